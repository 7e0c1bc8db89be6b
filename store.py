"""The memory store: one SQLite file holding the memories, their full-text index and the link
graph. Only this module speaks SQL.

`Store` is the whole persistence API: callers hand it plain Python values and get plain dicts
and lists back. The `nodes` table is the one source of truth: every other table and index is
derived from it by SQLite itself, in the same transaction (triggers, and indexes over built-in
functions only), so that a program writing `nodes` without this module keeps them right too.
What SQL cannot compute is computed when asked for. The module reads top down, the engine
the servers use first:

- limits: how much one memory or one call may hold
- schema: `SCHEMA`, the rules of a row (`_DOOR`), its version, the upgrade of older files
- errors: `StoreError` and its kinds; `_translated` puts SQLite's errors in a user's words
- words: the terms FTS5's `porter` tokenizer makes of a text, asked of SQLite
- values: the checks every argument passes before anything is written
- checking: what `store.py check` names, and `check --repair` mends
- connections: `Database`: a connection a thread, read and write transactions, checkpoints
- search: `Search`, FTS5's bm25 (stage one) re-scored from what FTS5 holds (stage two)
- store: `Store`, links both ways, traversal, access counting, checking, loads, backup and
  restore; `data_settings` and `open_directory`, which the servers start with

then, past one marked boundary, what uses the engine only through its names:

- command line: `python3 store.py COMMAND` (COMMANDS); the importers of the official memory
  server's format and of what other memory servers leave
"""

import bisect
import codecs
import collections
import concurrent.futures
import contextlib
import errno
import functools
import heapq
import io
import itertools
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import struct
import sys
import tempfile
import threading
import time
import uuid
import zlib
from datetime import datetime, timedelta, timezone

log = logging.getLogger("flood-memory.store")

# ----------------------------------------------------------------------------- limits

MAX_LIMIT = 100         # recall results per call
MAX_OFFSET = 1000       # recall results a call may skip, to page past earlier ones
MAX_DEPTH = 100         # hops a traversal may be asked for
MAX_NODES = 1000        # memories one connections call returns, nearest first
TRAVERSAL_CAP = 10_000  # memories a traversal walks and counts; pages reach this far
MAX_CONTENT = 100_000   # characters in one memory
MAX_TAGS = 100          # tags on one memory
MAX_TAG_LENGTH = 200    # characters in one tag
MAX_LINKS = 10_000      # ids in one links argument (back-links alone may make more)
MAX_SOURCE = 1_000      # characters in a memory's source label
MAX_QUERY_WORDS = 300   # words of a query that recall searches for; the rest are ignored
CLOSEST_TAGS = 5        # tags a recall that found nothing names...
MEASURED = 100          # ...found among this many, those closest by their letters
MAX_INT = 2**63 - 1     # the largest integer SQLite stores (access_count)
MAX_UNCOUNTED = 100_000 # accesses kept in memory while the file cannot take them
LOAD_CHUNK = 4_000      # memories in a load's first transaction...
LOAD_TXN = 0.5          # ...and seconds the next aim at (see _Load)
LOAD_LINKS = 200_000    # links to memories stored before that a load makes together (_Load)
LOAD_PAUSE = 0.025      # seconds a load leaves the write lock free between two transactions
LOAD_CACHE_KIB = 32_768 # SQLite's page cache while loading (2 MB otherwise): random keys
BUSY_TIMEOUT = 5.0      # seconds a write waits for another writer before giving up
BUSY_POLL = 0.05        # seconds one try at a lock may wait (see Database._retried)
WAL_PAGES = 1000        # a commit checkpoints the log once it is this long (SQLite's own)...
WAL_BYTES = 16 << 20    # ...and a log grown longer (a large import) is cut back to this size
WAL_SOFT = 32 << 20     # under Litestream, a write waits for it to checkpoint a longer log...
WAL_WAIT = 2.0          # ...for up to this many seconds, then checkpoints it itself...
WAL_UNHEARD = 60.0      # ...and for this long checkpoints without waiting (Litestream is gone)...
WAL_BOUND = 64 << 20    # ...and a commit checkpoints a log longer than this, whatever happens
LITESTREAM_ENV = "FLOOD_MEMORY_LITESTREAM"  # 1 or 0: whether Litestream replicates the file
LITESTREAM_LOOK = 1.0   # seconds a write trusts what it last saw of whether Litestream is there

DEFAULT_DIR = "~/flood/memory"
DB_NAME = "memory.db"
PRIVATE_DIR = 0o700     # a data directory this code makes
PRIVATE_FILE = 0o600    # the database, its -wal and -shm, backups and exports
KEPT = 3                # copies of what restores replaced, kept in the data directory

# ----------------------------------------------------------------------------- schema

# ASCII's spaces, which an exact duplicate may differ in (_exact_duplicate), in SQL and in re.
_SPACES = "char(9, 10, 11, 12, 13, 32)"
_SPACE_RUN = re.compile(r"[\t\n\x0b\x0c\r ]+")

# What every exact duplicate of a memory shares with it, as SQLite computes it: how many of
# its characters are not spaces, the first and the last of those (indexed by nodes_text).
_TEXT_KEY = ("length(" + functools.reduce(lambda sql, c: f"replace({sql}, char({c}), '')",
                                          (9, 10, 11, 12, 13, 32), "content") + ")",
             f"substr(ltrim(content, {_SPACES}), 1, 1)",
             f"substr(rtrim(content, {_SPACES}), -1)")
_SAME_KEY = " AND ".join(f"{key} = {key.replace('content', '?1')}" for key in _TEXT_KEY)


def _collapsed(content):
    """`content`, each run of spaces one space, none at the ends: what exact duplicates share.
    Most text has no run to collapse, which `in` tells faster than the pattern."""
    if "  " in content or any(space in content for space in "\t\n\x0b\x0c\r"):
        content = _SPACE_RUN.sub(" ", content)
    return content.strip(" ")


# SQL: a row's links as json_insert can extend them: '[]' if another program wrote no array.
_LINKS = "iif(json_valid(links) AND json_type(links) = 'array', links, '[]')"


def _sql_tag_array(value):
    """SQL: the tags column value `value` as the rules read it: a JSON array as it is, else
    '[]' (for an array holding a NUL too, which SQLite's JSON functions cut a string at)."""
    return (f"iif(json_valid({value}) AND json_type({value}) = 'array' AND NOT "
            f"{_NUL_IN.format(value)}, {value}, '[]')")


# SQL: whether the JSON text {0} escapes a NUL (`\u0000`, not `\\u0000`: a backslash and u0000).
_NUL_IN = "instr(replace({0}, '\\\\', ''), '\\u0000')"


def _sql_tag_rows(memory, rows=""):
    """SQL: the node_tags rows (tag, node, created_at) of the memory `memory` ("new", "old", or
    an alias that `rows`, the start of a FROM clause, defines): one a string of its tags."""
    return (f"SELECT j.value, {memory}.rowid, {memory}.created_at FROM {rows}json_each("
            f"{_sql_tag_array(memory + '.tags')}) j WHERE j.type = 'text'")


def _sql_untag(memory):
    """SQL: delete the node_tags rows of the memory `memory` (see _sql_tag_rows)."""
    return (f"DELETE FROM node_tags WHERE node = {memory}.rowid AND tag IN "
            f"(SELECT value FROM json_each({_sql_tag_array(memory + '.tags')}))")


# What str.strip() strips (str.isspace), which a tag neither starts nor ends with.
_WHITE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
          "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")

# The rules of one tag, in SQL (of a json_each row) and in Python (of the string), side by
# side. SQLite folds no case beyond ASCII, so tags differing only in case are let in (another
# program's "Work" and "work": a filter finds the memory by either); remember keeps the first.
_TAG_RULES = [
    ("type <> 'text'", lambda t: not isinstance(t, str), "tags must be an array of strings"),
    ("value = ''", lambda t: t == "", "a tag must not be empty"),
    (f"value <> trim(value, char({', '.join(str(ord(c)) for c in _WHITE)}))",
     lambda t: t != t.strip(), "a tag must not start or end with space"),
    (f"value GLOB '*[' || char({', '.join(map(str, [*range(1, 32), 127]))}) || ']*'",
     _CONTROL.search, "a tag must not hold control characters"),
    (f"length(value) > {MAX_TAG_LENGTH}", lambda t: len(t) > MAX_TAG_LENGTH,
     f"a tag may have at most {MAX_TAG_LENGTH} characters"),
    # GLOB reads a lone surrogate (and U+FFFE, U+FFFF) as U+FFFD.
    ("replace(replace(replace(value, char(65533), ''), char(65534), ''), char(65535), '') "
     "GLOB '*' || char(65533) || '*'", _SURROGATE.search,
     "a tag must be Unicode text (a lone surrogate is not)"),
]

# The rules of a row of nodes, whoever writes it, each written once: (column, SQL true of a row
# breaking it with {0} for the column, the rule, how check --repair mends it: SQL of the
# column's new value, "" where Python does, None where it cannot). The triggers refuse a row
# breaking a rule of _DOOR (an update, only in a column it changes: an older row can be put
# right a column at a time); check names the rows breaking any (let in before version 10, or
# past the triggers), repair mends them. _READ_AROUND's are let in and read around: refusing
# them would cost every access counted (which fires no trigger) or every link written.
_DOOR = [
    ("id", "typeof({0}) <> 'text'", "the id of a memory must be text",
     "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob("
     "2)), 2) || '-' || substr('89AB', abs(random()) % 4 + 1, 1) || substr(hex(randomblob(2)),"
     " 2) || '-' || hex(randomblob(6)))"),  # a uuid4
    ("content", "typeof({0}) <> 'text'", "content must be text (not a BLOB: decode bytes first)",
     "CAST({0} AS TEXT)"),
    ("tags", "typeof({0}) <> 'text' OR NOT json_valid({0}) OR json_type({0}) <> 'array'",
     "tags must be a JSON array of strings", ""),
    ("tags", _NUL_IN, "a tag must not hold a NUL character", ""),
    ("tags", f"json_array_length({_sql_tag_array('{0}')}) > {MAX_TAGS}",
     f"a memory may have at most {MAX_TAGS} tags", ""),
    ("created_at", "typeof({0}) <> 'text'", "created_at must be text (ISO 8601)",
     "CAST({0} AS TEXT)"),
    ("source", "typeof({0}) NOT IN ('text', 'null')", "source must be text", "CAST({0} AS TEXT)"),
    ("last_accessed", "typeof({0}) <> 'text'", "last_accessed must be text (ISO 8601)",
     "CAST({0} AS TEXT)"),
    ("access_count", "typeof({0}) NOT IN ('integer', 'real', 'null')",
     "access_count must be a number", "coalesce(CAST({0} AS INTEGER), 0)"),
]
_DOOR += [("tags", f"EXISTS (SELECT 1 FROM json_each({_sql_tag_array('{0}')}) WHERE {test})",
           rule, "") for test, _, rule in _TAG_RULES]  # the triggers ask these of a tag at once
_COLUMN_RULES = len(_DOOR) - len(_TAG_RULES)
_LINKS_BROKEN = ("links IS NOT NULL AND (NOT json_valid(links) OR json_type(links) <> 'array' "
                 f"OR EXISTS (SELECT 1 FROM json_each({_LINKS}) WHERE type <> 'text'))")
# The forms of a stored time (as _format_time writes) and of a memory id: GLOBs for SQL's
# checks, the same text compiled for Python's ('.' escaped: the one character read apart).
_STORED_GLOB = "####-##-##T##:##:##.###Z".replace("#", "[0-9]")
_STORED_TIME = re.compile(_STORED_GLOB.replace(".", r"\."))
_CANONICAL_ID = re.compile("-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12)))
_READ_AROUND = [
    ("links", _LINKS_BROKEN, "links must be a JSON array of memory ids", ""),
    ("id", f"{{0}} NOT GLOB '{_CANONICAL_ID.pattern}'",
     "an id must be a memory id (a lower-case uuid), or no tool can name it: correct it with "
     "sqlite3", None),
    ("created_at", " OR ".join(f"{c} NOT GLOB '{_STORED_GLOB}'" for c in (
        "created_at", "last_accessed")), "times must be in the stored form "
     "(2026-11-23T14:00:00.000Z), or they are in no time window: correct them with sqlite3", None),
    ("rowid", f"rowid > {1 << 62}", "a rowid must leave a load room after it (2^62 at most): "
     "forget the memory and remember it again", None),
]
_ROW_RULES = _DOOR + _READ_AROUND
_RULES_OF = {c: [r for r in _ROW_RULES if r[0] == c] for c in ("tags", "links")}


def _refuse(update=False):
    """SQL: the statements of nodes_bi (or, `update`, nodes_bu) refusing what _DOOR refuses."""
    changed = "new.{0} IS NOT old.{0} AND " if update else ""
    rows = "\n        ".join(
        f"WHEN {changed.format(c)}({test.format(f'new.{c}')}) THEN RAISE(ABORT, '{rule}')"
        for c, test, rule, _ in _DOOR[:_COLUMN_RULES] if not update or c in _REFUSED_ON_UPDATE)
    tags = " ".join(f"WHEN {test} THEN RAISE(ABORT, '{rule}')" for test, _, rule in _TAG_RULES)
    return (f"SELECT CASE {rows} END;\n    SELECT CASE {tags} END FROM json_each("
            f"{_sql_tag_array('new.tags')}){' WHERE new.tags IS NOT old.tags' * update};")


def _changed(*columns):
    """SQL: whether an update moved the row or changed any of `columns`."""
    return "(" + " OR ".join(["old.rowid <> new.rowid",
                              *(f"old.{c} IS NOT new.{c}" for c in columns)]) + ")"


# What a REPLACE removed: SQLite fires no delete trigger for the row an INSERT OR REPLACE, a
# REPLACE INTO or an UPDATE OR REPLACE removes (unless the writer set recursive_triggers), so
# `replaced` keeps the rows a write may displace, and what is derived from them goes after it
# (test_an_outside_replace_leaves_nothing_of_the_old_row_behind).
_DISPLACED = ("DELETE FROM replaced; INSERT INTO replaced SELECT rowid, id, content, tags FROM "
              "nodes WHERE (id = new.id OR rowid = new.rowid){};")
_DISPLACED_GONE = f"""INSERT INTO nodes_fts(nodes_fts, rowid, content)
        SELECT 'delete', rowid, content FROM replaced WHERE id = new.id OR rowid = new.rowid;
    DELETE FROM node_tags WHERE (tag, node) IN (SELECT j.value, r.rowid FROM replaced r,
        json_each({_sql_tag_array('r.tags')}) j WHERE r.id = new.id OR r.rowid = new.rowid);
    DELETE FROM replaced;"""
# What the derived tables are made of, the rowid by each of its names (an UPDATE OF trigger
# fires for the name written: SET oid = ... fires none that lists rowid alone).
_UPDATED = ("id", "content", "tags", "created_at", "rowid", "oid", "_rowid_")
# An update is refused in these: not in a count or time every access writes (see nodes_bu).
_REFUSED_ON_UPDATE = (*_UPDATED, *sorted({c for c, *_ in _DOOR} - {*_UPDATED, "last_accessed",
                                                                   "access_count"}))

SCHEMA = f"""
-- One row per memory: the one source of truth. `rowid` is implicit; the full-text index and
-- node_tags point at it. Everything below is derived from this table by SQLite itself.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,         -- uuid4, lower case
    content TEXT NOT NULL,       -- the memory itself
    tags TEXT DEFAULT '[]',      -- JSON array of strings
    links TEXT DEFAULT '[]',     -- JSON array of node ids; every link has its back-link
    source TEXT DEFAULT '',      -- conversation label or id
    created_at TEXT NOT NULL,    -- ISO 8601 in UTC, always 2026-11-23T14:00:00.000Z, so that
                                 -- comparing the text compares the times
    last_accessed TEXT NOT NULL, -- the same form; set by every recall or traversal hit
    access_count INTEGER DEFAULT 0
);
-- A time window (recall's since and until) and the newest-first listing read this index.
CREATE INDEX nodes_created ON nodes (created_at);
-- Exact duplicates share these (see _TEXT_KEY): remember finds a memory's among a few. An
-- index over expressions: a writer whose functions differ from SQLite's own makes keys this
-- module never computes, which check names and check --repair makes again (REINDEX).
CREATE INDEX nodes_text ON nodes ({", ".join(_TEXT_KEY)});

-- External-content index over nodes.content: the text lives once, in nodes.
CREATE VIRTUAL TABLE nodes_fts USING fts5(
    content, content=nodes, content_rowid=rowid, tokenize='porter'
);

-- One row per tag of a memory: a tag filter reads no JSON.
CREATE TABLE node_tags (
    tag TEXT NOT NULL,           -- as the memory spells it
    node INTEGER NOT NULL,       -- nodes.rowid
    created_at TEXT NOT NULL,    -- the memory's
    PRIMARY KEY (tag, node)      -- whether a memory carries a tag: asked of every match
) WITHOUT ROWID;
-- A tag's memories newest first, and within a window, straight from an index range.
CREATE INDEX node_tags_created ON node_tags (tag, created_at);

-- The rows a write is about to displace (see _DISPLACED), emptied once it has (an ignored
-- INSERT leaves its copy until the next write, or the forget of that memory).
CREATE TABLE replaced (rowid INTEGER PRIMARY KEY, id, content, tags);

-- The full-text index and node_tags follow the table through these triggers; the BEFORE
-- ones also refuse a row that breaks a rule of the door (_DOOR). One trigger an event, its
-- statements in the order they must run: SQLite fires the triggers of one event newest
-- first, _Load drops and makes three of them again at every batch (which would reverse that
-- order), and a REPLACE with an explicit rowid drifts the index unless what it displaces
-- leaves the index before the new row enters it (test_one_trigger_an_event).
CREATE TRIGGER nodes_bi BEFORE INSERT ON nodes BEGIN
    {_refuse()}
    {_DISPLACED.format("")}
END;
CREATE TRIGGER nodes_ai AFTER INSERT ON nodes BEGIN
    {_DISPLACED_GONE}
    INSERT INTO nodes_fts(rowid, content) VALUES (new.rowid, new.content);
    INSERT OR IGNORE INTO node_tags (tag, node, created_at) {_sql_tag_rows("new")};
END;
CREATE TRIGGER nodes_ad AFTER DELETE ON nodes BEGIN
    INSERT INTO nodes_fts(nodes_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    {_sql_untag("old")};
    DELETE FROM replaced WHERE rowid = old.rowid;
END;
-- Counting an access or editing links fires neither: they change nothing derived, and a
-- trigger a row counted cost a recall 6% (an odd count or time there is read around, named
-- by check, and mended by the next access).
CREATE TRIGGER nodes_bu BEFORE UPDATE OF {", ".join(_REFUSED_ON_UPDATE)} ON nodes BEGIN
    {_refuse(update=True)}
    {_DISPLACED.format(" AND rowid <> old.rowid")}
END;
CREATE TRIGGER nodes_au AFTER UPDATE OF {", ".join(_UPDATED)} ON nodes BEGIN
    {_DISPLACED_GONE}
    INSERT INTO nodes_fts(nodes_fts, rowid, content) SELECT 'delete', old.rowid, old.content
        WHERE {_changed("content")};
    INSERT INTO nodes_fts(rowid, content) SELECT new.rowid, new.content
        WHERE {_changed("content")};
    {_sql_untag("old")} AND {_changed("tags", "created_at")};
    INSERT OR IGNORE INTO node_tags (tag, node, created_at) {_sql_tag_rows("new")}
        AND {_changed("tags", "created_at")};
END;

-- Every tag in use, with how many memories carry it: a tag filter looks up the tag's
-- spellings here, and a recall that finds nothing names the tags there are.
CREATE TABLE tags (
    tag TEXT PRIMARY KEY,        -- as the memories spell it
    memories INTEGER NOT NULL,
    folded TEXT                  -- str.casefold(tag), written by this module: NULL until then
) WITHOUT ROWID;                 -- (SQLite folds no case beyond ASCII; see _fold_tags)
-- A tag's spellings whatever their case, and the tags not folded yet. A plain column: an
-- index over lower(tag) took the keys of whatever lower() the writer had.
CREATE INDEX tags_folded ON tags (folded);
CREATE TRIGGER tags_ai AFTER INSERT ON node_tags BEGIN
    INSERT INTO tags (tag, memories) VALUES (new.tag, 1)
        ON CONFLICT (tag) DO UPDATE SET memories = memories + 1;
END;
CREATE TRIGGER tags_ad AFTER DELETE ON node_tags BEGIN
    UPDATE tags SET memories = memories - 1 WHERE tag = old.tag;
    DELETE FROM tags WHERE tag = old.tag AND memories <= 0;
END;
"""

# Versions of SCHEMA, kept in PRAGMA user_version:
# 1: nodes, nodes_fts and its three triggers, as SPEC.md gives them.
# 2-4: node_tags; terms, hot_terms, hot_postings and pending, for ranking.
# 5: created_at in one UTC form, indexed in nodes and node_tags; fingerprints of duplicates.
# 6: owed, the work an interrupted load left to do; tags, every tag with its folded form.
# 7: FTS5 ranks and nodes_text finds duplicates (terms, hot_terms, hot_postings, pending, owed
#    and fingerprints gone); tags that are not a JSON array refused; tags folded when asked.
# 8: whatever SQL writes nodes: a REPLACE leaves nothing behind (replaced, nodes_bi, nodes_bu),
#    a moved rowid takes its index entries along, rows no tool writes are refused (_DOOR),
#    tags are folded into a plain column (tags.folded), one trigger a kind.
# 9: counting an access fires no trigger (nodes_refuse).
# 10: the door refuses every tags value check would name (_TAG_RULES), and NULL tags; the
#     BEFORE triggers refuse (nodes_refuse gone).
# 11: a rowid moved as oid or _rowid_ fires the update triggers; `replaced` keeps no copy of
#     a row after its write, nor of a forgotten memory (a REPLACE under recursive_triggers).
SCHEMA_VERSION = 11

# The tables of SPEC.md's schema (version 1), FTS5's own included.
_SPEC_TABLES = {"nodes", "nodes_fts", "nodes_fts_data", "nodes_fts_idx", "nodes_fts_docsize",
                "nodes_fts_config"}
# What versions of this module made beside those: an upgrade drops these, never others' tables.
_OWNED = {"nodes_ai", "nodes_ad", "nodes_au", "nodes_bi", "nodes_bu", "nodes_refuse",
          "nodes_created", "nodes_text", "node_tags", "node_tags_ai", "node_tags_ad",
          "node_tags_au", "node_tags_created", "node_tags_node", "tags", "tags_ai", "tags_ad",
          "tags_folded", "tags_used", "tags_wide", "terms", "hot_terms", "hot_postings",
          "hot_postings_node", "pending", "fingerprints", "loaded_links", "owed", "replaced"}
# Litestream's own, in any file it replicates: never a sign of another program's database.
_LITESTREAM_TABLES = {"_litestream_seq", "_litestream_lock"}
# FTS5's check of its index against nodes, an insert (it takes the write lock); the rank form,
# as the plain one misses an index drifted from its table (SPEC.md, clarification 6).
_FTS_CHECK = "INSERT INTO nodes_fts(nodes_fts, rank) VALUES ('integrity-check', 1)"


def _statements(script):
    """(name, statement) of each statement of a schema script (a trigger's holds `;` to END),
    with the comments within it (a column's goes on over lines), not those between them."""
    current = ""
    for line in script.splitlines(keepends=True):
        if not current.strip() and line.lstrip().startswith("--"):
            continue
        current += line
        if sqlite3.complete_statement(current):
            words = current.split()
            yield words[3] if words[1] == "VIRTUAL" else words[2], current.strip()
            current = ""


_STATEMENTS = dict(_statements(SCHEMA))  # name -> statement, in SCHEMA's order


def _upgrade(db, version):
    """Bring a file of schema `version` to this one, in the caller's write transaction. What
    this module made is dropped by name first (no old trigger fires), the rest kept; `nodes`
    keeps its rows, times put in the stored form (before 5), links made two-way (version 1's
    tools and a version 6 load cut short left some one-way); all else is derived again, but
    for the full-text index from version 2 on (version 1's may be anyone's, or empty)."""
    if version >= 8:  # only the triggers changed: SCHEMA's made again, nodes_refuse gone
        db.execute("DROP TRIGGER IF EXISTS nodes_refuse")
        for name, statement in _STATEMENTS.items():
            if statement.startswith("CREATE TRIGGER"):
                db.execute(f"DROP TRIGGER IF EXISTS {name}")
                db.execute(statement)
        db.execute("DELETE FROM replaced")
        # Tags holding a backslash then u0000 (no NUL) were read as none before version 10.
        db.execute(f"INSERT OR IGNORE INTO node_tags (tag, node, created_at) "
                   f"{_sql_tag_rows('n', 'nodes n, ')} AND instr(n.tags, '\\u0000')")
        _fold_tags(db)
        return
    links_owed = version == 1 or version == 6 and db.execute(
        "SELECT count(*) FROM sqlite_master WHERE name = 'owed'").fetchone()[0] and \
        db.execute("SELECT count(*) FROM owed WHERE work = 'links'").fetchone()[0]
    keep = {"nodes"} if version == 1 else {"nodes", *_SPEC_TABLES}
    owned = _OWNED | (_SPEC_TABLES - keep)
    for kind, name in db.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'index', 'table') "
            "ORDER BY type = 'table'").fetchall():
        if name in owned:
            db.execute(f"DROP {kind.upper()} IF EXISTS \"{name}\"")
    if version < 5:
        _fix_times(db)
    for name, statement in _STATEMENTS.items():
        if name not in keep:
            db.execute(statement)
    if version == 1:
        db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES ('rebuild')")
    if links_owed:
        _repair_links(db, _links_to_repair(db))
    _fill_tags(db)


def _fix_times(db):
    """created_at and last_accessed in the stored form (versions before 5 kept them as given)."""
    changed = []
    for rowid, created, accessed in db.execute(
            "SELECT rowid, created_at, last_accessed FROM nodes"):
        try:
            fixed = (_utc(created), _utc(accessed))
        except ValueError:
            continue  # not a time at all: left as it was, outside every window (check names it)
        if fixed != (created, accessed):
            changed.append((*fixed, rowid))
    db.executemany("UPDATE nodes SET created_at = ?, last_accessed = ? WHERE rowid = ?", changed)


def _fill_tags(db):
    """node_tags (and through its trigger, tags) made from the memories' tags."""
    db.execute("DELETE FROM node_tags")
    db.execute("DELETE FROM tags")
    db.execute(f"INSERT OR IGNORE INTO node_tags (tag, node, created_at) "
               f"{_sql_tag_rows('n', 'nodes n, ')}")
    _fold_tags(db)


def _fold_tags(db):
    """Fold the tags not folded yet (the triggers cannot fold beyond ASCII, and would take the
    writer's lower()); a tag filter reads them unfolded till then (see Store._spellings)."""
    unfolded = db.execute("SELECT tag FROM tags WHERE folded IS NULL").fetchall()
    db.executemany("UPDATE tags SET folded = ? WHERE tag = ?",
                   [(tag.casefold(), tag) for (tag,) in unfolded])


def _repair_links(db, changed):
    """Write the links `changed` that _links_to_repair found, but not over links changed since."""
    if changed:
        log.info("repairing the links of %d memories", len(changed))
        db.executemany("UPDATE nodes SET links = ? WHERE id = ? AND links IS ?", changed)


def _links_to_repair(db):
    """[(links as they should be, id, links as they are)] of the memories whose links are
    one-way, lead nowhere or to themselves, or are not a JSON array of ids."""
    rows = db.execute(f"SELECT id, links, {_breaking(*_RULES_OF['links'])} FROM nodes "
                      f"WHERE id IS NOT NULL").fetchall()
    text, broken = {i: t for i, t, _ in rows}, {i for i, _, b in rows if b}
    links = {node_id: _column_strings(value) for node_id, value in text.items()}
    repaired = {i: list(dict.fromkeys(t for t in ts if t in links and t != i))
                for i, ts in links.items()}
    for node_id, targets in list(repaired.items()):
        for target in targets:
            if node_id not in repaired[target]:
                repaired[target].append(node_id)
    return [(_json(ts), i, text[i]) for i, ts in repaired.items()
            if ts != links[i] or i in broken]


# ----------------------------------------------------------------------------- errors


class StoreError(Exception):
    """A store operation failed; the message says why in words a user can act on."""


class NotFound(StoreError):
    """No memory has the given id."""


class InvalidInput(StoreError):
    """An argument was refused before anything was written."""


class Busy(StoreError):
    """Another process held the write lock for longer than the timeout."""


def _code(exc):
    """SQLite's primary result code of an sqlite3 exception (SQLITE_BUSY...), or None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


# What SQLite reports when the disk or the file system refuses a write.
_CANNOT_WRITE = (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY,
                 sqlite3.SQLITE_CANTOPEN)
# What SQLite reports when another connection holds the lock a statement needs.
_LOCKED = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _translated(exc, doing, timeout, path=None):
    """The StoreError saying what SQLite's exception `exc` means for a user; with the database's
    `path`, the cause of a "disk I/O error" is looked for (_write_trouble). No path is named."""
    code = _code(exc)
    if path is not None and code in _CANNOT_WRITE and (trouble := _write_trouble(path)):
        return StoreError(f"could not {doing}: {trouble}")
    if code in _LOCKED:
        return Busy(f"could not {doing}: the database stayed locked by another process for "
                    f"more than {timeout:g} s")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
        return StoreError(f"could not {doing}: the memory store is shutting down")
    reasons = {sqlite3.SQLITE_FULL: "the disk is full",
               sqlite3.SQLITE_READONLY: "the database cannot be written (memory.db or its "
                                        "directory is read-only)",
               # Mostly an index another program's lower() or collation wrote keys into, which
               # a repair makes again (test_an_index_another_function_wrote_is_mended_by_repair).
               sqlite3.SQLITE_CORRUPT: f"the database is damaged ({exc}); run `"
                                       f"{store_py_command()} check --repair`, and restore a "
                                       f"backup only if that does not mend it",
               sqlite3.SQLITE_NOTADB: f"the database is damaged ({exc}); restore it from a backup",
               sqlite3.SQLITE_CANTOPEN: f"the database file cannot be opened ({exc})"}
    return StoreError(f"could not {doing}: {reasons.get(code, exc)}")


def store_py_command(system=None):
    """store.py as a message gives it to type: after the py launcher on Windows (`system`,
    os.name, says "nt"), where python3 is often the Microsoft Store's alias, else python3."""
    return ("py" if (system or os.name) == "nt" else "python3") + " store.py"


def _write_trouble(path):
    """Why the database at `path` cannot be written, if it can be seen: a full disk, this
    process's file-size limit, a read-only directory or file."""
    directory = os.path.dirname(os.path.abspath(path))
    with contextlib.suppress(OSError):
        if shutil.disk_usage(directory).free < 64 * 1024:
            return "the disk is full"
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            largest = max((os.path.getsize(p) for p in (path, path + "-wal")
                           if os.path.exists(p)), default=0)
            if largest + (1 << 20) >= limit:
                return (f"the file-size limit of this process is reached ({limit:,} bytes; "
                        f"see ulimit -f)")
    read_only_fs = False
    with contextlib.suppress(OSError, AttributeError):
        read_only_fs = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    if read_only_fs or not os.access(directory, os.W_OK):
        return ("the data directory is read-only (SQLite writes memory.db-wal and "
                "memory.db-shm beside the database)")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "memory.db is read-only"
    return None


# ----------------------------------------------------------------------------- words
#
# What FTS5's `porter` tokenizer makes of a text: unicode61 splitting and folding, then the
# Porter stemmer, each asked of SQLite once a character or a word. A "word" is a folded token;
# a "term" is what the index holds for it, its stem.

_TOKEN = re.compile(r"[^\W_]+")

# Common English function words: they carry no meaning of their own in a question.
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me might more most must my myself no nor not now of off on once only or other our ours
ourselves out over own same shall she should so some such than that the their theirs them
themselves then there these they this those through to too under until up upon us very was we
were what when where which while who whom whose why will with would you your yours yourself
yourselves s t d ll m re ve
""".split())


def _tokenized(text, tokenizer):
    """The terms FTS5's tokenizer `tokenizer` ("unicode61" or "porter") indexes for `text`, in
    order, asked of SQLite (the only faithful source) in memory, in a transaction rolled back."""
    with _tokenizer_lock:
        if not _tokenizer:
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            for name in ("unicode61", "porter"):
                db.execute(f"CREATE VIRTUAL TABLE {name} USING fts5(x, content='', "
                           f"tokenize='{name}')")
                db.execute(f"CREATE VIRTUAL TABLE {name}_terms USING fts5vocab({name}, instance)")
            _tokenizer.append(db)
        db = _tokenizer[0]
        db.execute("BEGIN")
        try:
            db.execute(f"INSERT INTO {tokenizer} (x) VALUES (?)", (text,))
            terms = db.execute(f"SELECT term FROM {tokenizer}_terms ORDER BY offset")
            return [t for (t,) in terms]
        finally:
            db.execute("ROLLBACK")


_tokenizer, _tokenizer_lock = [], threading.Lock()  # the one database _tokenized asks


class _Folds(dict):
    """Code point -> what unicode61 makes of the character in a word: its folded form ('' for
    a diacritic it drops), or a space. A text's new characters are looked up together (one a
    character held writers up); a full table starts again from ASCII."""

    _ASCII = {i: chr(i).lower() if chr(i).isalnum() else " " for i in range(128)}

    def __init__(self):
        super().__init__(self._ASCII)

    def fold(self, text):
        """`text` with each character folded, as unicode61 has it inside a word."""
        chars = set(text)
        new = [c for c in chars if ord(c) not in self]
        if new:
            values = self._look_up(new)
            if len(chars) > MAX_FOLDS - 128:  # more than the table holds: for this text alone
                return text.translate(collections.ChainMap(values, self))
            if len(self) + len(values) > MAX_FOLDS:
                values.update((ord(c), self[ord(c)]) for c in chars if ord(c) in self)
                self.clear()
                self.update(self._ASCII)
            self.update(values)
        return text.translate(self)

    def __missing__(self, code):
        # Only if another thread emptied the table between fold's look-up and its use.
        return self._look_up([chr(code)])[code]

    def _look_up(self, chars):
        """{code point: value} of `chars`, each tokenized between two letters, in one text."""
        terms = _tokenized(" ".join(f"a{c}b" for c in chars), "unicode61")
        values, i = {}, 0
        for c in chars:  # "a" then "b" where c separates words, else one term
            values[ord(c)] = " " if terms[i] == "a" else terms[i][1:-1]
            i += 2 if terms[i] == "a" else 1
        return values


MAX_FOLDS = 100_000  # characters _Folds keeps: a hostile text may hold every code point there is
_folds = _Folds()


def tokenize(text):
    """The words of `text`, in order, split and folded as unicode61 does."""
    return _folds.fold(text).split()


class _Stems(dict):
    """word -> term: what FTS5's porter tokenizer indexes for a word of tokenize's, asked of
    SQLite the first time the word is seen; the new words of a text are asked together."""

    def of(self, words):
        """The terms of `words`, in order."""
        new = list({w: None for w in words if w not in self})
        if new:
            if len(self) + len(new) > 200_000:  # bounded: new words (numbers) never stop coming
                self.clear()
            # A word of tokenize's is one token (its folded characters are word characters).
            self.update(zip(new, _tokenized(" ".join(new), "porter")))
        return list(map(self.__getitem__, words))

    def __missing__(self, word):  # not kept: new, or another thread cleared it meanwhile
        return self.of([word])[0]


stems = _Stems().of  # stems(words) -> the terms FTS5's porter tokenizer indexes for them


def first_words(text, n=MAX_QUERY_WORDS):
    """The first `n` words of `text`, and whether it holds more, tokenizing only its start (a
    query may be megabytes)."""
    size = 16 * n
    while True:
        words = tokenize(text[:size])
        if len(words) > n or size >= len(text):
            return words[:n], len(words) > n
        size *= 4


def _distinctive(words):
    """The distinct words of `words` that are not stopwords, or all of them if all are."""
    return {w for w in words if w not in STOPWORDS} or set(words)


def _meaningful(words):
    """The words of a question a search looks for, one a term: not stopwords, unless nothing
    else is left ("what is it?")."""
    kept = {}  # term -> the first word that has it
    words = [w for w in words if w not in STOPWORDS] or words
    for word, term in zip(words, stems(words)):
        kept.setdefault(term, word)
    return list(kept.values())


def _distance(a, b, most=2):
    """The edits (a letter added, dropped or changed, neighbours swapped) making `a` into `b`,
    or most + 1 past `most`: only the diagonal's band of `most` is filled."""
    far = most + 1
    before, row = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        x, current, least = a[i - 1], [i] + [far] * len(b), far
        for j in range(max(1, i - most), min(len(b), i + most) + 1):
            y = b[j - 1]
            cost = min(row[j - 1] + (x != y), row[j] + 1, current[j - 1] + 1)
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, before[j - 2] + 1)
            current[j] = cost
            least = min(least, cost)
        if least > most and i > most:
            return far
        before, row = row, current
    return min(row[-1], far)


def _letters(text):
    """The letters of `text` as bits of an integer (a bit may stand for several letters), for a
    quick bound on how far apart two texts are."""
    bits = 0
    for letter in text:
        bits |= 1 << (ord(letter) & 127)
    return bits


def fts_query(words):
    """An FTS5 MATCH expression: each word quoted as a string, the words OR-ed."""
    return " OR ".join('"%s"' % word.replace('"', '""') for word in words)


# ----------------------------------------------------------------------------- values


def _now():
    return _format_time(datetime.now(timezone.utc))


def _format_time(moment):
    """The one form times are stored in: UTC, milliseconds, Z (2026-11-23T14:00:00.000Z)."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _utc(value):
    """An ISO 8601 date or date-time (UTC unless it says) in the stored form; else ValueError."""
    if isinstance(value, str) and _STORED_TIME.fullmatch(value):
        datetime.fromisoformat(value[:-1])  # a real day and time (ValueError if not)...
        return value  # ...in the stored form already, as an export has it: no reformatting
    if not isinstance(value, str) or not value[:4].isdigit():
        raise ValueError(value)
    moment = datetime.fromisoformat(value.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        return _format_time(moment)
    except OverflowError:  # 0001-01-01T00:00+14:00 is a time before year 1 in UTC
        raise ValueError(f"{value} is out of range once in UTC") from None


TIME_FORMS = ("an ISO 8601 date or date-time, such as 2026-11-23, 2026-11-23T14:30 or "
              "2026-11-23T14:30:00+01:00 (UTC unless it gives an offset)")


def _window_end(value, name):
    """A since or until argument in the stored form, or None; InvalidInput if malformed."""
    return None if value is None else _timestamp(value, name, "; got")


def _column_strings(text):
    """The strings of a `tags` or `links` column value, as _sql_tag_array reads tags: none
    unless a JSON array without a NUL (_NUL_IN); none holding a lone surrogate."""
    if not isinstance(text, str):
        return []  # NULL, or a BLOB another program wrote
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    if "\\u" not in text:  # no escape: no NUL, no lone surrogate (UTF-8 holds none)
        return [t for t in value if isinstance(t, str)]
    if "\\u0000" in text.replace("\\\\", ""):
        return []
    return [t for t in value if isinstance(t, str) and
            (t.isascii() or not _SURROGATE.search(t))]


# The JSON name of each type, for messages: bool before int, which it is a kind of.
_KINDS = ((type(None), "null"), (bool, "a boolean"), (int, "an integer"), (float, "a number"),
          (str, "a string"), ((list, tuple), "an array"), (dict, "an object"))


def _kind(value):
    return next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)


def _shorten(value, n=60):
    text = repr(value)
    return text if len(text) <= n else text[:n - 4] + "...'"


def _node_id(value, name="node_id"):
    """`value` as a canonical memory id, or InvalidInput naming the argument."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {_kind(value)}")
    if _CANONICAL_ID.fullmatch(value):
        return value  # as every stored id is: no uuid.UUID to build for each id of an import
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidInput(f"{name} {_shorten(value)} is not a memory id (ids look like "
                           f"'{uuid.UUID(int=0)}')") from None


def _text(value, name, *, allow_empty=True, most=None, advice=""):
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not valid Unicode text (it holds a lone surrogate)") \
            from None
    if not allow_empty and not value.strip():
        raise InvalidInput(f"{name} must not be empty")
    if most is not None and len(value) > most:
        raise InvalidInput(f"{name} may have at most {most:,} characters, got {len(value):,}"
                           f"{advice}")
    return value


def _content(value):
    return _text(value, "content", allow_empty=False, most=MAX_CONTENT,
                 advice="; split it into several linked memories")


def _source(value):
    return _text(value, "source", most=MAX_SOURCE)


def _tags(values):
    """Tags stripped of space, in order, each once whatever its case (the first spelling
    kept); InvalidInput at one that breaks a rule (_TAG_RULES)."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(f"tags must be an array of strings, got {_kind(values)}")
    tags = {}  # in order, each once (a dict: asking a list grows with the square)
    for value in values:
        tag = value.strip() if isinstance(value, str) else value
        for _, broken, rule in _TAG_RULES:
            if broken(tag):
                raise InvalidInput(rule + (f", got {_shorten(tag)}" if isinstance(tag, str) else
                                           f", and holds {_kind(tag)}"))
        tags.setdefault(tag.casefold(), tag)
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a memory may have at most {MAX_TAGS} tags, got {len(tags)}")
    return list(tags.values())


NOT_AN_ID = "not a memory id"
NO_SUCH_MEMORY = "no memory has this id"
ITSELF = "a memory cannot link to itself"


def _link_ids(values, limit=MAX_LINKS, skipped=None):
    """Canonical ids from a links argument, each once; what is not an id is left out, and
    added to the list `skipped` if given, as {"id": value, "reason": ...}."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(f"links must be an array of memory ids, got {_kind(values)}")
    if limit is not None and len(values) > limit:
        raise InvalidInput(f"links may hold at most {limit:,} ids, got {len(values):,}")
    ids = {}
    for value in values:
        if not isinstance(value, str):
            raise InvalidInput(f"links must be an array of memory ids (strings), and holds "
                               f"{_kind(value)}")
        try:
            ids[_node_id(value, "link")] = None
        except InvalidInput:
            if skipped is not None:  # echoed in the reply: cut, it may be any text at all
                skipped.append({"id": value if len(value) <= 80 else value[:77] + "...",
                                "reason": NOT_AN_ID})
    return list(ids)


def _log_skipped(doing, skipped):
    """One warning line for all the links a call skipped, however many."""
    if skipped:
        shown = ", ".join(_shorten(s["id"], 40) for s in skipped[:3])
        more = f" and {len(skipped) - 3:,} more" if len(skipped) > 3 else ""
        reasons = {s["reason"] for s in skipped}
        log.warning("%s: skipped %d link%s (%s): %s%s", doing, len(skipped),
                    "" if len(skipped) == 1 else "s",
                    reasons.pop() if len(reasons) == 1 else "several reasons", shown, more)


def _int(value, name, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {_shorten(value)}")
    return value


def _timestamp(value, name, got=", got"):
    """A time argument in the stored form; InvalidInput if malformed, saying `got` before the
    value (a window's end "; got", an imported time ", got")."""
    _text(value, name)
    try:
        return _utc(value)
    except ValueError:
        raise InvalidInput(f"{name} must be {TIME_FORMS}{got} {_shorten(value)}") from None


# A memory as an import file gives it, checked and completed: a row of nodes.
_COLUMNS = "id, content, tags, links, source, created_at, last_accessed, access_count"
Record = collections.namedtuple("Record", _COLUMNS)


def _record(value, number):
    """The memory object `value` (record `number` of an import), checked: a Record."""
    if not isinstance(value, dict):
        raise InvalidInput(f"record {number}: a memory must be a JSON object")
    try:
        if "id" not in value or "content" not in value:
            raise InvalidInput("a memory needs an id and content")
        created = _timestamp(value.get("created_at") or _now(), "created_at")
        return Record(_node_id(value["id"], "id"), _content(value["content"]),
                      _tags(value.get("tags", [])), _link_ids(value.get("links", []), None),
                      _source(value.get("source", "")), created,
                      _timestamp(value.get("last_accessed") or created, "last_accessed"),
                      _int(value.get("access_count", 0), "access_count", 0, MAX_INT))
    except InvalidInput as exc:
        raise InvalidInput(f"record {number}: {exc}") from None


def _said(content, tags):
    """What a source said of a memory, in 8 hex digits: an import keeps it at the end of the
    memory's source, so that importing again tells a change there from one made here."""
    said = zlib.crc32(content.encode("utf-8", "surrogatepass"))
    tags = "\0".join([str(len(content)), *tags]).encode("utf-8", "surrogatepass")
    return f"{zlib.crc32(tags, said):08x}"


def _labelled(source):
    """(label, what its source said (_said) or None) of the source of an imported memory."""
    source, said = source or "", (source or "")[-8:]
    if source[-10:-8] == " @" and len(said) == 8 and not said.strip("0123456789abcdef"):
        return source[:-10], said
    return source, None


def _checked(values):
    """Records from memory objects, one by one; InvalidInput at a bad one or a repeated id."""
    first = {}  # id -> the number of the record that gave it
    for number, value in enumerate(values, 1):
        record = _record(value, number)
        if record.id in first:
            raise InvalidInput(f"record {number}: id {record.id} is also record "
                               f"{first[record.id]}: each memory may come once")
        first[record.id] = number
        yield record


# _COLUMNS, each text column read as text, whatever another program stored before version 8.
_READ = ", ".join(c if c == "access_count" else f"CAST({c} AS TEXT)" for c in _COLUMNS.split(", "))


def _node(row):
    """A memory as callers get it, from a row of _READ."""
    count = row[7]
    # A float here was left by a version whose count overflowed past MAX_INT; text or a
    # BLOB, by another program (refused in a new row since version 8, not in an update).
    if not isinstance(count, (int, float)) or count != count:
        count = 0
    return {"id": row[0], "content": row[1], "tags": _column_strings(row[2]),
            "links": _column_strings(row[3]), "source": row[4] or "", "created_at": row[5],
            "last_accessed": row[6], "access_count": int(max(0, min(count, MAX_INT)))}


# JSON text of a value; one encoder kept, as json.dumps with options makes one a call.
_json = json.JSONEncoder(ensure_ascii=False).encode


def _id_list(ids):
    """A list of memory ids as _json writes it, joined (ids hold nothing JSON escapes): the
    encoder's work on a hub's thousands saved."""
    return '["' + '", "'.join(ids) + '"]' if ids else "[]"


def _folded(tags):
    """Tags as a filter compares them: a frozenset of their case-folded forms."""
    return frozenset(t.casefold() for t in tags)


def _chunks(items, size=500):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _qmarks(items):
    return ",".join("?" * len(items))


def _sql_tag_filter(tags, column):
    """(SQL, parameters) joining node_tags so that only memories at `column` carrying every tag
    of `tags` (its spellings each) remain: three joined, the rest asked in the last join's
    condition (many joins exhaust SQLite's planner and MATCH)."""
    joined, rest = tags[:3], tags[3:]
    sql = "".join(f" JOIN node_tags t{i} ON t{i}.node = {column} AND t{i}.tag IN ({_qmarks(s)})"
                  for i, s in enumerate(joined))
    sql += "".join(f" AND EXISTS (SELECT 1 FROM node_tags x{i} WHERE x{i}.tag IN "
                   f"({_qmarks(s)}) AND x{i}.node = {column})" for i, s in enumerate(rest))
    return sql, [t for spellings in (*joined, *rest) for t in spellings]


# ----------------------------------------------------------------------------- checking
#
# What another program may write into `nodes` that this one would not (a link to a missing
# memory, an exact duplicate, text that is not UTF-8), or wrote before the door refused it
# (_ROW_RULES), is stored as written, read around, and named by `store.py check`.


def _fitted_tags(values, most=MAX_TAGS):
    """`values` (another program's: a list, or a tags column's JSON) made tags every rule takes
    (_fitted_tag), each once whatever its case, `most` at most; what cannot be one left out."""
    if isinstance(values, str):
        with contextlib.suppress(ValueError):
            values = json.loads(values)
    made = {}
    for value in values if isinstance(values, list) else ():
        tag = _fitted_tag(value) if isinstance(value, str) else ""
        if tag and not _SURROGATE.search(tag):
            made.setdefault(tag.casefold(), tag)
    return list(made.values())[:most]


def _fitted_tag(text):
    """`text` made a tag that remember takes: control characters made spaces, cut to length."""
    return _CONTROL.sub(" ", text).strip()[:MAX_TAG_LENGTH].rstrip()


def _derived_problems(db):
    """Where node_tags and tags disagree with the memories' tags, in words."""
    problems = []
    expected = _sql_tag_rows("n", "nodes n, ")
    kept = "SELECT tag, node, created_at FROM node_tags"
    if db.execute(f"SELECT EXISTS ({expected} EXCEPT {kept}) OR "
                  f"EXISTS ({kept} EXCEPT {expected})").fetchone()[0]:
        problems.append("node_tags disagrees with the memories' tags")
    counted = "SELECT tag, count(*) FROM node_tags GROUP BY tag"
    if db.execute(f"SELECT EXISTS ({counted} EXCEPT SELECT tag, memories FROM tags) OR "
                  f"EXISTS (SELECT tag, memories FROM tags EXCEPT {counted})").fetchone()[0] \
            or any(tag.casefold() != folded for tag, folded in db.execute(
                "SELECT tag, folded FROM tags WHERE folded IS NOT NULL")):
        problems.append("the tags table disagrees with the memories' tags")
    return problems


def _rule_breakers(db):
    """What another program wrote into nodes that remember would not have, in words: the
    kind, how many memories, the first ids, and what to do where check --repair cannot."""
    found = collections.defaultdict(list)  # what is wrong -> ids of the memories
    for rowid, node_id, *which in db.execute(  # one pass over the memories
            f"SELECT rowid, CAST(id AS TEXT), {', '.join(_breaking(r) for r in _ROW_RULES)} "
            f"FROM nodes WHERE {_breaking(*_ROW_RULES)}"):
        for (_, _, rule, mend), hit in zip(_ROW_RULES, which):
            if hit:
                found[f'memories that break "{rule}"' + (" (check --repair mends them)" if
                      mend is not None else "")].append(node_id or f"rowid {rowid}")
    links = {}
    for rowid, node_id, text, content in db.execute(
            "SELECT rowid, CAST(id AS TEXT), CAST(links AS TEXT), CAST(content AS BLOB) "
            "FROM nodes"):
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            found["memories whose content is not UTF-8 text (read with replacement "
                  "characters: correct them with edit, or forget them)"].append(
                node_id or f"rowid {rowid}")
        if node_id is not None:
            links[node_id] = _column_strings(text)
    for node_id, targets in links.items():
        if node_id in targets:
            found["memories linking to themselves"].append(node_id)
        if any(t not in links for t in targets):
            found["memories linking to memories that are not there"].append(node_id)
        if any(t in links and node_id not in links[t] for t in targets):
            found["memories whose links lack their back-link"].append(node_id)
    for (rowids,) in db.execute(f"SELECT group_concat(rowid) FROM nodes GROUP BY "
                                f"{', '.join(_TEXT_KEY)} HAVING count(*) > 1").fetchall():
        first = {}
        for node_id, content, tags in db.execute(
                f"SELECT id, CAST(content AS TEXT), CAST(tags AS TEXT) FROM nodes WHERE rowid "
                f"IN ({rowids}) AND id IS NOT NULL ORDER BY rowid"):
            key = (_collapsed(content), _folded(_column_strings(tags)))
            if key in first:
                found[f"memories repeating an older one exactly: forget them "
                      f"({store_py_command()} forget ID)"].append(node_id)
            first.setdefault(key, node_id)
    return [f"{what}: {len(ids):,} ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"
            for what, ids in found.items() if ids]


def _breaking(*rules):
    """SQL: 1 if a row of nodes breaks one of `rules` (of _ROW_RULES), else NULL (a CASE: a
    test such as json_type's may fail unless the one before it is false)."""
    return f"CASE {' '.join(f'WHEN {t.format(c)} THEN 1' for c, t, _, _ in rules)} END"


# ----------------------------------------------------------------------------- connections


class WriteQueue:
    """The writers of this process, first come first served (a plain lock, or SQLite's own
    polling wait, let some writes of many HTTP clients wait past any bound). Each waiting
    thread blocks on a lock of its own: a turn wakes the first alone."""

    def __init__(self):
        self._lock = threading.Lock()          # guards the fields below
        self._taken = False
        self._waiting = collections.deque()    # one held lock per waiting thread, in order

    def take(self, timeout):
        """True once it is the caller's turn; False, and out of the queue, after `timeout` s."""
        with self._lock:
            if not self._taken:
                self._taken = True
                return True
            mine = threading.Lock()
            mine.acquire()
            self._waiting.append(mine)
        if mine.acquire(timeout=timeout):
            return True  # give() passed the turn on
        with self._lock:
            if mine in self._waiting:
                self._waiting.remove(mine)
                return False
        return True  # passed on just as the wait ran out

    def give(self):
        """End the caller's turn: the next in the queue has it."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._taken = False


# Connections this process has open, by the real path of their file (see _check_file).
_connected = collections.Counter()
_connected_lock = threading.Lock()


def _count_connections(path, change):
    with _connected_lock:
        _connected[os.path.realpath(path)] += change


def replicated(path, litestream=None):
    """Whether Litestream replicates the database at `path`: as `litestream` says (data_settings)
    or, None, as the directory it keeps beside the file does (.memory.db-litestream, made by
    0.3.x and 0.5.x at their first sync; it stays after Litestream stops)."""
    if litestream is not None:
        return litestream
    if path == ":memory:" or path.startswith("file:"):
        return False
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.isdir(os.path.join(directory, f".{name}-litestream"))


def _log_bytes(path):
    """How long the log of the database at `path` is, in bytes: the frames since it last
    started over, which carry its header's salt (sqlite.org/fileformat2.html#walformat); the
    -wal's size is how long it ever was. Never from the -shm (closing it drops SQLite's locks)."""
    try:
        with open(path + "-wal", "rb") as f:
            header = f.read(32)
            if len(header) < 32:
                return 0
            frame = struct.unpack(">I", header[8:12])[0] + 24

            def unsalted(i):  # whether frame i lacks the header's salt (it is from before)
                f.seek(32 + i * frame + 8)
                return f.read(8) != header[16:24]
            frames = range((os.fstat(f.fileno()).st_size - 32) // frame)
            return 32 + bisect.bisect_left(frames, True, key=unsalted) * frame
    except OSError:
        return 0


# How text is read: as UTF-8, with replacement characters where another program stored bytes
# that are not (Latin-1), not failing every query (test_one_bad_row_never_takes_recall_away).
_TEXT = functools.partial(str, encoding="utf-8", errors="replace")


class Database:
    """The SQLite file as this process uses it: a connection per thread, set up alike, the read
    and write transactions, SQLite's errors in words (compare coverage.py's SqliteDb)."""

    def __init__(self, path, timeout=BUSY_TIMEOUT, litestream=None):
        self.path, self.timeout, self.litestream = path, timeout, litestream  # see replicated
        self._local = threading.local()
        self._open, self._lock = set(), threading.Lock()  # the connections open; guards them
        self.queue = WriteQueue()       # one writer at a time within this process
        self._unheard = 0.0             # until when Litestream is taken not to be running
        self._looked, self._replicated = -LITESTREAM_LOOK, False  # see _make_room

    def connection(self):
        """The calling thread's connection, opened on first use."""
        db = getattr(self._local, "db", None)
        if db is None:
            with self.errors("open the memory database"):
                # SQLite's own wait: a write's while another process may switch a new file to
                # WAL; short once set up (below), as write() waits for the write lock itself.
                db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                     check_same_thread=False)
                db.text_factory = _TEXT
                db.execute("PRAGMA foreign_keys=ON")
                self._local.durable = None
                self._set_durable(db, True)
                if sys.platform == "darwin":
                    # macOS's fsync leaves what was written in the drive's own cache, which a
                    # power cut loses; F_FULLFSYNC flushes it (see README, Backups).
                    db.execute("PRAGMA fullfsync=ON")
                # A statement's undo and sorts in memory (issue 42's import wrote 3 GB of
                # temporary files); set before any temporary table, which it would drop.
                db.execute("PRAGMA temp_store=MEMORY")
                # FTS5's vocabulary (Search.rank's df): a temporary table, made before
                # anything can make the connection read-only.
                db.execute("CREATE VIRTUAL TABLE temp.nodes_vocab "
                           "USING fts5vocab(main, nodes_fts, row)")
                self._set_log(db, replicated(self.path, self.litestream))
                db.execute(f"PRAGMA busy_timeout = {int(BUSY_POLL * 1000)}")
            self._local.db = db
            with self._lock:
                self._open.add(db)
            _count_connections(self.path, 1)
        return db

    def _set_durable(self, db, durable):
        """Whether `db`'s commits reach the disk before they return: FULL, so that what a reply
        says is stored survives a power cut; NORMAL syncs at checkpoints only, which a killed
        process survives (test_what_is_acknowledged_is_synced_before_the_reply)."""
        if getattr(self._local, "durable", None) != durable:
            db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._local.durable = durable

    def _set_log(self, db, replicated):
        """How `db` checkpoints: the commit that takes the log past WAL_PAGES copies it into the
        file (another thread's checkpoint, racing writes, never finished:
        test_the_log_stays_bounded_under_back_to_back_writes). Under Litestream, checkpoints
        are its own and the log is never cut (0.3.x's replicas lost frames, or a generation
        began), but past WAL_BOUND, in case the sign of Litestream is stale."""
        if replicated:
            page = db.execute("PRAGMA page_size").fetchone()[0]
            db.execute(f"PRAGMA wal_autocheckpoint={int(WAL_BOUND // page)}")
            db.execute("PRAGMA journal_size_limit=-1")
        else:
            db.execute(f"PRAGMA wal_autocheckpoint={int(WAL_PAGES)}")
            db.execute(f"PRAGMA journal_size_limit={int(WAL_BYTES)}")
        self._local.replicated = replicated

    def _make_room(self, db):
        """Before a write under Litestream, wait for it to checkpoint a long log (WAL_SOFT and
        after); its directory outlives it, so one that does not answer is taken not to run."""
        if time.monotonic() >= self._looked + LITESTREAM_LOOK:
            # A stat at every write costs too much for what changes once in a long while.
            self._looked = time.monotonic()
            self._replicated = replicated(self.path, self.litestream)
        now = self._replicated
        if now != self._local.replicated:  # Litestream came, or went, since db was opened
            self._set_log(db, now)
        try:
            if not now or os.stat(self.path + "-wal").st_size <= WAL_SOFT:
                return
        except OSError:
            return
        waiting = time.monotonic() >= self._unheard
        deadline = time.monotonic() + (WAL_WAIT if waiting else 0)
        while _log_bytes(self.path) > WAL_SOFT:
            if time.monotonic() >= deadline:
                if waiting:  # Litestream did not answer
                    self._unheard = time.monotonic() + WAL_UNHEARD
                with contextlib.suppress(sqlite3.Error):
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                return
            time.sleep(0.01)

    @contextlib.contextmanager
    def read(self):
        """One read transaction, so that every statement in it sees the same snapshot."""
        db = self.connection()
        db.execute("BEGIN")
        try:
            yield db
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.execute("COMMIT")

    @contextlib.contextmanager
    def write(self, doing="write to the memory database", durable=True, wait=True):
        """One write transaction: IMMEDIATE, all rolled back if a statement fails, on the disk
        once committed. Threads take turns first (WriteQueue: SQLite's `timeout` is for other
        processes; a thread not given its turn in twice that gives up). A `durable` one lets
        Litestream shorten the log first (_make_room); not `durable` (access counts), it waits
        for neither. Without `wait`, Busy at once if another writer holds the lock."""
        db = self.connection()
        if durable:
            self._make_room(db)
        if not self.queue.take(2 * self.timeout if wait else BUSY_POLL):
            raise Busy(f"could not {doing}: this server had more writes queued than it could "
                       f"do in {2 * self.timeout:g} s")
        try:
            db = self.connection()
            self._set_durable(db, durable)
            self._retried(db, "BEGIN IMMEDIATE", self.timeout if wait else 0)
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
        finally:
            self.queue.give()

    def _retried(self, db, statement, timeout, pause=0.0):
        """Execute `statement`, tried again `pause` s apart for up to `timeout` s while another
        connection holds a lock it needs. A BEGIN IMMEDIATE's tries wait BUSY_POLL each: SQLite's
        own wait sleeps longer and longer, and missed the gaps of a process writing in bursts."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return db.execute(statement)
            except sqlite3.OperationalError as exc:
                if _code(exc) not in _LOCKED or time.monotonic() >= deadline:
                    raise
                time.sleep(pause)

    @contextlib.contextmanager
    def errors(self, doing):
        """Turn SQLite's exceptions inside the block into StoreErrors saying what failed."""
        try:
            yield
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.ProgrammingError) and "closed" not in str(exc):
                raise  # a bug, for the transport to log
            raise _translated(exc, doing, self.timeout, self.path) from exc

    def close_thread(self):
        """Close the calling thread's connection, if it has one."""
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            with self._lock:
                self._open.discard(db)
            db.close()
            _count_connections(self.path, -1)

    def close(self):
        """Close every connection this process opened here. Using it again reopens it."""
        with self._lock:
            connections, self._open = self._open, set()
        for db in connections:
            db.close()  # the last connection to the file checkpoints it and removes the log
            _count_connections(self.path, -1)
        self._local = threading.local()


# ----------------------------------------------------------------------------- search

# What a search reads of a memory: occurrences of each term (Search.terms order) in its content
# and, TAG_WEIGHT each, its tags; its length in tokens (a tag's word TAG_WEIGHT); its tags
# column; its created_at; its content.
Features = collections.namedtuple("Features", "counts length tags created content")

# A question that asks when, in English: "when" asking ("when did", "when's"; not "what to do
# when it fails"), "what year was", "which month did", "how long ago" (see _asks_when).
_AUXILIARY = r"(?:'s| (?:exactly |roughly )?(?:did|do|does|was|were|is|are|will|would|has|have|" \
             r"had|can|could|should|shall|might|must)\b)"
_ASKS_WHEN = re.compile(r"\bwhen" + _AUXILIARY + r"|\b(?:since|until|till) when\b"
                        r"|\b(?:what|which) (?:year|month|day|date|time|week|season)s?"
                        + _AUXILIARY + r"|\bhow long ago\b")
_OTHER_QUESTION = re.compile(r"\b(?:what|who|whom|whose|where|which|why|how)\b")


def _asks_when(query):
    """Whether a query asks when: as _ASKS_WHEN says, or starting with "when" and asking
    nothing else ("When Jon lost his job?", not "When I was in Paris, what did I eat?")."""
    query = query.lower()
    return _ASKS_WHEN.search(query) is not None or (
        query.lstrip(" \t\n\"'(¿").startswith("when ") and not _OTHER_QUESTION.search(query))


# What says when something happened, in English, in lowered text: a year or decade, a date, a
# month ("May" and "March" only next to a number, abbreviations only before one), a weekday,
# a time of day, or one relative to now ("last week", "two days ago", "recently"). Asked when,
# the answer likely gives a time: stage two weighs those SAYS_WHEN_WEIGHT more.
_SAYS_WHEN = re.compile(
    r"\b(?:1[89]\d\d|20\d\d|(?:1[89]|20)\d0s|\d{1,2}/\d{1,2}/\d{2,4}"
    r"|january|february|april|june|july|august|september|october|november|december"
    r"|(?:may|march|jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)\.? \d{1,2}(?:st|nd|rd|th)?"
    r"|\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:may|march)"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|weekday"
    r"|yesterday|today|tonight|tomorrow|recently|lately|ago|soon|earlier|since"
    r"|(?:last|next|this|past) (?:week|month|year|night|summer|winter|spring|fall|autumn"
    r"|morning|evening|afternoon|time)"
    r"|(?:\d+|a|one|two|three|four|five|six|seven|eight|nine|ten|few|several|couple of) "
    r"(?:days|weeks|months|years)"
    r"|\d{1,2}(?::\d\d)? ?(?:am|pm|[ap]\.m|o'clock)|\d{1,2}:\d\d)\b")

# A question asking for the present state of something that changed ("where do I live now?"):
# the newest memory about it most likely answers. These words are not searched for.
_PRESENT = re.compile(r"\b(?:right now|now|nowadays|currently|current|these days|at (?:the )?"
                      r"moment|at present|presently|latest|still|any ?more)\b", re.I)

# What a question asks beside its words: when (_asks_when), the present state (_PRESENT), its
# words in order (for _times), and the names it writes with a capital (see _idf).
Question = collections.namedtuple("Question", "when present said names",
                                  defaults=(False, False, (), frozenset()))


def _question(query):
    """(the words a search looks for, whether words past MAX_QUERY_WORDS were cut, the
    Question) of a query."""
    head = query[:16 * MAX_QUERY_WORDS]
    said, cut = first_words(query)
    present = _PRESENT.search(head) is not None
    words = _meaningful(first_words(_PRESENT.sub(" ", head))[0] if present else said)
    names = frozenset(w for token in re.findall(r"\w+", head) if token[0].isupper()
                      for w in tokenize(token))
    return words or _meaningful(said), cut, Question(_asks_when(head), present, said, names)

# The times a question may be anchored in (see _times).
_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # first month
_SHIFTS = {"last": -1, "previous": -1, "past": -1, "this": 0}  # years from the anchor's
_BEFORE_A_TIME = {"in", "since", "during", "of", "early", "late", "mid", "until", "before",
                  "after", "by", "the", "end", "start", "and", "or", "to", "from", "through"}
                  # "in May": a month, "I may": a word
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "few": 3, "several": 3, "couple": 2}
_UNITS = {"day": 1, "week": 7, "month": 30.44, "year": 365.25}  # in days


def _year(word):
    """The year a word names ("2025"), or None."""
    return int(word) if len(word) == 4 and word.isdigit() and 1900 <= int(word) < 2100 else None


def _month_start(year, month):
    """The first moment of `month` of `year` (a month past 12 runs into the next years)."""
    return datetime(year + (month - 1) // 12, (month - 1) % 12 + 1, 1, tzinfo=timezone.utc)


def _times(words, anchor):
    """(start, end, the words that only say when) of the time a question's `words` (lowered,
    in order) name, relative to `anchor` (the newest memory's time), or None. A month or
    season ("in March", "last spring", "March 2026") is the one of the year named, else the
    year before the anchor's with "last", the anchor's with "this", else the last one begun;
    a year alone ("2025", "last year") the whole year; then "last week", "this month", "two
    weeks ago", "yesterday". Several make one span, the earliest to the latest."""
    spans, relative = [], set()
    pairs = list(zip(["", *words], words, [*words[1:], ""]))
    years = [_year(w) for w in words if _year(w)]
    for before, word, after in pairs:
        if word == "year" and before in _SHIFTS:
            years.append(anchor.year + _SHIFTS[before])
            relative.update((before, word))
    for before, word, after in pairs:
        unit = _UNITS.get(word[:-1] if word.endswith("s") else word)
        if word in _MONTHS or word in _SEASONS:
            if word in ("may", "march", "fall") and not _year(after) and \
                    before not in _SHIFTS and before not in _BEFORE_A_TIME:
                continue
            first = _SEASONS.get(word) or _MONTHS.index(word) + 1
            year = _year(after) or (anchor.year + _SHIFTS[before] if before in _SHIFTS else
                                    years[0] if years else
                                    anchor.year - (first > anchor.month))
            spans.append((_month_start(year, first),
                          _month_start(year, first + (3 if word in _SEASONS else 1))))
            relative.add(before if before in _SHIFTS else "")
        elif word in ("week", "month") and before in _SHIFTS and after != "of":
            spans.append((anchor - timedelta(days=unit * (1 - _SHIFTS[before])), anchor))
            relative.update((before, word))
        elif unit and after == "ago":
            middle = anchor - timedelta(days=unit * (int(before) if before.isdigit() else
                                                     _COUNTS.get(before, 1)))
            spans.append((middle - timedelta(days=unit / 2), middle + timedelta(days=unit / 2)))
            relative.update((before, word, after))
        elif word in ("yesterday", "today"):
            day = datetime(anchor.year, anchor.month, anchor.day, tzinfo=timezone.utc)
            day -= timedelta(days=word == "yesterday")
            spans.append((day, day + timedelta(days=1)))
            relative.add(word)
    if years and not any(w in _MONTHS or w in _SEASONS for w in words):
        spans += [(_month_start(y, 1), _month_start(y + 1, 1)) for y in years]
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans), relative - {""}


# The words of ranking: df, how many memories hold a term in their content (fts5vocab) or tags (the
# tags table); idf = log(1 + (N - df + 0.5) / (df + 0.5)), never 0; impact, BM25's term-frequency
# part for one term in one memory (_impact). A score sums idf times impact over the query's terms.

RERANK_K1, RERANK_B = 0.6, 0.3  # stage two: a long memory is penalised less for its length
RERANK_DEPTH = 25               # stage-one results that stage two re-scores, and memories
                                # it adds for each tag the words name and for the time named
TAG_WEIGHT = 1.0                # occurrences a tag holding a query word counts for
TIME_WEIGHT = 2.0               # a memory created in the time named holds a term this heavy
PRIOR = 100                     # _idf: a smaller store is as if it held this many memories,
WORD_SHARE = 0.05               # ...the others holding an ordinary word this often...
NAME_SHARE = 0.005              # ...and a name (see Search._names) this often
NEWER = 0.1                     # a memory as new as the newest weighs this much more...
NEWER_NOW = 0.5                 # ...or this much, asked about the present (_PRESENT)
NEWER_DAYS = 180                # ...and one this many days older half as much more
SUPERSEDED = 15                 # the best memories compared for restating an older one...
SAME_STATE = 0.2                # ...when this share of their terms is the same
FOLLOWERS = (0.3, 0.3)          # share of a match's score lent to the next two memories...
PRECEDER = 0.2                  # ...and to the one memory stored just before it
SAYS_WHEN_WEIGHT = 0.3          # stage two: asked "when", one that says when weighs this much more
LENDERS = 10                    # stage-two matches that lend
RARE = 16                       # a word held by this many memories or fewer is rare...
SIMILAR_PROBES = 4              # ...and remember's similar list asks FTS5 about this many words
COMMON_KEPT = 20_000            # ...not known to be common; it remembers this many common ones,
COMMON_RENEWED = 1_000          # ...found anew every this many remembers (forgets make words rare)
SIMILAR_JACCARD = 0.42          # similar memories: distinctive terms this similar...
SIMILAR_SHARED = 2              # ...and at least this many of them in common
SIMILAR_RARE = 2                # rare terms a memory must share to be compared at all...
SIMILAR_CANDIDATES = 3          # ...and the memories sharing the most of them that are
SIMILAR_LISTED = 3              # similar memories listed at most...
SIMILAR_SHOWN = 120             # ...each with this many characters of its content


def _idf(df, n, name=False):
    """The idf of a term `df` of `n` memories hold, a `name` or not: see PRIOR."""
    more = max(0, PRIOR - n)
    df, n = min(df, n) + more * (NAME_SHARE if name else WORD_SHARE), n + more
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _impact(tf, dl, avgdl):
    """The impact of `tf` occurrences in a memory of `dl` tokens."""
    return tf * (RERANK_K1 + 1) / (tf + RERANK_K1 * (1 - RERANK_B + RERANK_B * dl / avgdl))


def _varint(data, i=0):
    """The SQLite varint in `data` at `i`, and the index after it."""
    value = 0
    for j in range(i, i + 8):
        value = (value << 7) | (data[j] & 0x7F)
        if data[j] < 0x80:
            return value, j + 1
    return (value << 8) | data[i + 8], i + 9


def _averages(db):
    """(memories, tokens) in the full-text index, from FTS5's own averages record."""
    row = db.execute("SELECT block FROM nodes_fts_data WHERE id = 1").fetchone()
    if not row or not row[0]:
        return 0, 0
    count, i = _varint(row[0])
    return count, _varint(row[0], i)[0]


def _select_in(db, sql, keys):
    """The rows of `sql`, which ends in "IN", for the list of `keys`: asked a chunk at a time,
    as SQLite limits the parameters of a statement."""
    for chunk in _chunks(list(keys)):
        yield from db.execute(f"{sql} ({_qmarks(chunk)})", chunk)


def _window(since, until, column="created_at"):
    """(SQL, parameters) of the conditions that `column` is from `since` (inclusive) to `until`
    (exclusive), each as " AND ...", for the ends given."""
    ends = [(op, end) for op, end in ((">=", since), ("<", until)) if end is not None]
    return "".join(f" AND {column} {op} ?" for op, _ in ends), [end for _, end in ends]


def _most_similar(near, n, words):
    """Those of the memories `near` ([(id, content)]) very close (SIMILAR_JACCARD, _SHARED) to
    a new one of `n` characters and `words`, neither four times as long as the other, closest
    first: [{"id", "content"}], cut to SIMILAR_SHOWN. Asked outside the write transaction."""
    mine = set(stems(list(_distinctive(words)))) if near else set()  # none: nothing to stem
    # Only a word that starts like one of ours can stem to one of our terms: stemming the
    # others (slow for words not seen before) can wait until their number matters.
    prefixes = tuple(t[:max(1, len(t) - 3)] for t in mine)
    close = []
    for node_id, text in near:
        if not n // 4 - 40 <= len(text) <= 4 * n + 40:
            continue
        words = _distinctive(tokenize(text))
        common = len(mine.intersection(stems([w for w in words if w.startswith(prefixes)])))
        if common < SIMILAR_SHARED:
            continue
        # Their distinct words bound their distinct terms from above: stem them all only
        # when the bound cannot tell.
        most = common * (1 + SIMILAR_JACCARD) / SIMILAR_JACCARD - len(mine)
        size = len(words) if len(words) <= most else len(set(stems(list(words))))
        similarity = common / (len(mine) + size - common)
        if similarity >= SIMILAR_JACCARD:
            close.append((similarity, node_id, text))
    close.sort(reverse=True)
    return [{"id": node_id, "content": text[:SIMILAR_SHOWN]}
            for _, node_id, text in close[:SIMILAR_LISTED]]


@functools.lru_cache(maxsize=4096)
def _tag_terms(tag):
    """The terms of a tag's words, as the index would hold them were the tag content; but a
    number is no word of a tag ("session-3", "conv-26" number labels, say nothing of 3)."""
    return frozenset(stems([w for w in tokenize(tag) if not w.isdigit()]))


@functools.lru_cache(maxsize=4096)
def _column_tag_terms(tags_json):
    return tuple(map(_tag_terms, _column_strings(tags_json)))


def _moment(text):
    """The datetime of a stored time, or None if it is not one (another program wrote it)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        return None


def _tags_holding(db, term):
    """({tag: how many memories carry it} of the tags one of whose words has `term`, whether
    tags not folded yet were met): looked up by their first letters (a tag's later words are
    found only in the memories read), and among those not folded yet (see _fold_tags)."""
    start = term[:-1] if len(term) > 3 else term
    rows = db.execute("SELECT tag, memories, folded FROM tags WHERE folded >= ?1 AND folded < "
                      "?1 || char(1114111) OR folded IS NULL", (start,)).fetchall()
    return ({tag: n for tag, n, _ in rows if term in _tag_terms(tag)},
            any(folded is None for _, _, folded in rows))


def _newest(db, spellings, since, until, limit, offset=0):
    """The rowids of the newest memories carrying every tag of `spellings` (a {spelling:
    memories} each, as Store._spellings gives them), created from `since` to `until`: from the
    rarest tag's node_tags entries, or nodes_created without tags, both in time order."""
    if not spellings:
        window, bounds = _window(since, until)
        return [r for (r,) in db.execute(
            f"SELECT rowid FROM nodes WHERE 1{window} ORDER BY created_at DESC, rowid DESC "
            f"LIMIT ? OFFSET ?", (*bounds, limit, offset))]
    first, *others = sorted(spellings, key=lambda s: sum(s.values()))
    joins, parameters = _sql_tag_filter(others, "a.node")
    window, bounds = _window(since, until, "a.created_at")
    return [r for r, _ in db.execute(
        f"SELECT DISTINCT a.node, a.created_at FROM node_tags a{joins} WHERE a.tag IN "
        f"({_qmarks(first)}){window} ORDER BY a.created_at DESC, a.node DESC LIMIT ? OFFSET ?",
        (*parameters, *first, *bounds, limit, offset))]


class Search:
    """One search, in one read transaction: stage one finds candidates (`top`, `tagged`, `dated`),
    stage two (`rank`) scores them from what FTS5 holds (df, lengths, their average) and the tags
    table counts."""

    def __init__(self, db, words, tags=(), since=None, until=None, question=Question()):
        self.db, self.question = db, question
        self.tags = list(tags)  # the spellings of each tag asked
        self.since, self.until = since, until  # created_at window, in the stored form
        self.anchor = _moment((db.execute(  # the newest time: in a text starting with a digit
            "SELECT created_at FROM nodes WHERE created_at >= '0' AND created_at < ':' "
            "ORDER BY created_at DESC LIMIT 1").fetchone() or [None])[0])
        times = _times(question.said, self.anchor) if question.said and self.anchor else None
        self.times = times and (_format_time(times[0]), _format_time(times[1]))
        # The time words are searched for only if there is no time to favour instead.
        self.words = [w for w in words if not times or w not in times[2]]
        self.terms = list(dict.fromkeys(stems(self.words)))
        # Porter rewrites at most the last few letters of a word, so only words starting
        # like a term can stem to it: the others need no stemming.
        self.prefixes = tuple(t[:max(1, len(t) - 3)] for t in self.terms)
        # In ASCII text a word is a run of [a-z0-9] once lowered: one regular expression
        # finds the words starting like a term, in C, rather than asking each word.
        ascii_prefixes = sorted({re.escape(p) for p in self.prefixes if p.isascii()})
        self.ascii_words = re.compile(
            f"(?<![a-z0-9])(?:{'|'.join(ascii_prefixes)})[a-z0-9]*") if ascii_prefixes else None
        self.features = {}   # rowid -> Features, read once a search
        self.capital, self.lower = set(), set()  # how the memories read write words (_names)
        self.unfolded = False  # tags not folded yet were met (see _tags_holding)

    # -- stage one

    def top(self, n):
        """FTS5's best `n` by bm25() of the words OR-ed, ties to the older, among the memories
        carrying the tags and created in the window: [(-bm25, rowid)]."""
        joins, parameters = self._where("nodes_fts.rowid")
        return self.db.execute(
            f"SELECT -bm25(nodes_fts), nodes_fts.rowid FROM nodes_fts{joins} "
            f"WHERE nodes_fts MATCH ? ORDER BY bm25(nodes_fts), nodes_fts.rowid LIMIT ?",
            (*parameters, fts_query(self.words), n)).fetchall()

    def tagged(self):
        """({term: memories carrying a tag holding it}, rowids of the newest RERANK_DEPTH
        memories carrying such a tag, among those carrying the tags and created in the window):
        of each term's tags, the rarest first, RERANK_DEPTH in all (a query may be 300 words)."""
        found = {}
        for term in self.terms:
            found[term], unfolded = _tags_holding(self.db, term)
            self.unfolded = self.unfolded or unfolded
        rowids = []
        for term in sorted((t for t in found if found[t]), key=lambda t: sum(found[t].values())):
            rowids += _newest(self.db, [*self.tags, found[term]], self.since, self.until,
                              RERANK_DEPTH - len(rowids))
            if len(rowids) >= RERANK_DEPTH:
                break
        return {t: sum(held.values()) for t, held in found.items()}, rowids

    def dated(self):
        """(how many memories were created in the time the question names, the rowids of the
        newest RERANK_DEPTH of them carrying the tags and created in the window)."""
        held = self.db.execute("SELECT count(*) FROM nodes WHERE created_at >= ? AND "
                               "created_at < ?", self.times).fetchone()[0]
        start, end = (max(filter(None, (self.since, self.times[0]))),
                      min(filter(None, (self.until, self.times[1]))))
        return held, _newest(self.db, self.tags, start, end, RERANK_DEPTH) if start < end else []

    def _where(self, column):
        """(SQL, parameters) of joins that keep only the memories at `column` that carry the
        tags and were created in the window."""
        sql, parameters = _sql_tag_filter(self.tags, column)
        if self.since is not None or self.until is not None:
            window, ends = _window(self.since, self.until, "w.created_at")
            # FTS5 skips to the rowids the window spans (memories are mostly stored in time
            # order: the range is narrow).
            span = self.db.execute(f"SELECT min(rowid), max(rowid) FROM nodes w WHERE 1{window}",
                                   ends).fetchone()
            sql += f" JOIN nodes w ON w.rowid = {column}{window} AND {column} BETWEEN ? AND ?"
            parameters += [*ends, *span]
        return sql, parameters

    def _in_window(self, created):
        return (self.since is None or created >= self.since) and \
            (self.until is None or created < self.until)

    # -- reading memories

    def _read(self, rowids, window=False):
        """{rowid: Features} of the memories at `rowids` (created in the window, with `window`)."""
        known, terms, prefixes = self.features, self.terms, self.prefixes
        missing = [r for r in rowids if r not in known]
        read, cased = [], not self.question.names  # how words are written tells names (_names)
        for rowid, content, tagged, created, size in _select_in(
                self.db, "SELECT n.rowid, CAST(n.content AS TEXT), CAST(n.tags AS TEXT), "
                "CAST(n.created_at AS TEXT), d.sz FROM nodes n LEFT JOIN nodes_fts_docsize d "
                "ON d.id = n.rowid WHERE n.rowid IN", missing):
            if not content.isascii():
                words = [w for w in tokenize(content) if w.startswith(prefixes)]
            else:
                lowered, words = content.lower(), ()
                if self.ascii_words and any(p in lowered for p in prefixes):
                    words = self.ascii_words.findall(lowered)
                    if cased:
                        for found in self.ascii_words.finditer(lowered):
                            self._note_case(found[0], content, found.start())
            read.append((rowid, words, _varint(size)[0] if size else 0, tagged or "[]",
                         created, content))
        found = iter(stems([w for row in read for w in row[1]]))  # new words asked together
        wanted = set(terms)
        for rowid, words, length, tagged, *rest in read:
            counted = collections.Counter(itertools.islice(found, len(words)))
            labels = _column_tag_terms(tagged)
            for label in labels:
                for term in label & wanted if not label.isdisjoint(wanted) else ():
                    counted[term] += TAG_WEIGHT
            known[rowid] = Features([counted[t] for t in terms],
                                    length + TAG_WEIGHT * sum(map(len, labels)), tagged, *rest)
        return {r: known[r] for r in rowids if r in known and
                (not window or self._in_window(known[r].created))}

    def _note_case(self, word, content, at):
        """Note how `word` is written at `at` in `content`: in lower case, or with a capital
        within a sentence (as a name is; see _names)."""
        if not content[at].isupper():
            self.lower.add(word)
        elif content[max(0, at - 9):at].rstrip(" \t\"'(")[-1:] not in ("", *".!?:\n"):
            self.capital.add(word)

    def _names(self):
        """The terms that are names: those the question writes with a capital or, all in lower
        case, those the memories read write with one within a sentence and never without."""
        if self.question.names:
            return set(stems([w for w in self.words if w in self.question.names]))
        return set(stems(list(self.capital))) - set(stems(list(self.lower)))

    # -- stage two

    def rank(self, limit):
        """Stage two: [(score, rowid)] of stage one's candidates, best first, ties to the newer,
        scored as the constants of ranking weigh them. Then the LENDERS best lend a share of
        their score to the memories stored next to them with the same tags (stored together,
        they share a context): only one holding a query term fewer than half the memories hold
        gains, or one right after a question ("?"), and never past its lender."""
        terms = self.terms
        count, tokens = _averages(self.db)
        avgdl = tokens / count if count else 1.0
        df = dict(_select_in(self.db, "SELECT term, doc FROM temp.nodes_vocab WHERE term IN",
                             terms))
        tag_df, tagged = self.tagged()
        held, dated = self.dated() if self.times else (0, [])
        first = [r for _, r in self.top(max(limit, RERANK_DEPTH))] if terms else []
        candidates = list(dict.fromkeys(first + tagged + dated))
        self._read(candidates)
        names = self._names()
        held_by = [df.get(t, 0) + tag_df.get(t, 0) for t in terms]
        idf = [_idf(n, count, t in names) for t, n in zip(terms, held_by)]
        time_idf = TIME_WEIGHT * _idf(held, count)
        weighty = [i for i, n in enumerate(held_by) if 0 < n < count / 2] or \
            [i for i, n in enumerate(held_by) if n]
        newer = NEWER_NOW if self.question.present else NEWER

        def score(rowids):
            features = self._read(rowids)
            scores = {}
            for r, f in features.items():
                weight = sum(idf[i] * _impact(tf, f.length, avgdl)
                             for i, tf in enumerate(f.counts) if tf)
                if self.times and self.times[0] <= f.created < self.times[1]:
                    weight += time_idf * _impact(1, f.length, avgdl)
                moment = _moment(f.created)
                if moment and self.anchor:
                    age = max(0, (self.anchor - moment).days)  # a day apart at least
                    weight *= 1 + newer * 0.5 ** (age / NEWER_DAYS)
                says_when = self.question.when and _SAYS_WHEN.search(f.content.lower())
                scores[r] = weight * (1 + SAYS_WHEN_WEIGHT if says_when else 1)
            return scores, features

        scores, features = score(candidates)
        lenders = heapq.nsmallest(LENDERS, scores, key=lambda r: (-scores[r], r))
        lent, cap = collections.Counter(), {}
        answers = set()  # memories right after one that asks: they need not match the query
        tags_by_rowid = "SELECT rowid, CAST(tags AS TEXT) FROM nodes WHERE rowid"
        for lender in lenders:  # the memories stored next to it, forgotten ones passed over
            following = self.db.execute(f"{tags_by_rowid} > ? ORDER BY rowid LIMIT ?",
                                        (lender, len(FOLLOWERS))).fetchall()
            before = self.db.execute(f"{tags_by_rowid} < ? ORDER BY rowid DESC LIMIT 1",
                                     (lender,)).fetchall()
            context = _folded(_column_strings(features[lender].tags))
            asks = "?" in features[lender].content
            neighbours = [(share, r, asks, tags) for share, (r, tags) in zip(FOLLOWERS, following)]
            neighbours += [(PRECEDER, r, False, tags) for r, tags in before]
            for share, rowid, answer, tags in neighbours:
                if _folded(_column_strings(tags)) == context:
                    lent[rowid] += share * scores[lender]
                    # Just below the lender: one stored after it must not pass it on the
                    # tie-break (newer first) either.
                    cap[rowid] = max(cap.get(rowid, 0.0), math.nextafter(scores[lender], 0.0))
                    if answer:
                        answers.add(rowid)
        extra_scores, extra_features = score(list(self._read(
            [r for r in lent if r not in scores], window=True)))
        features.update(extra_features)
        scores.update(extra_scores)
        matched = set(candidates)
        for rowid, extra in lent.items():
            if rowid in features and (any(features[rowid].counts[i] for i in weighty)
                                      or rowid in answers):
                scores[rowid] = max(scores[rowid], min(scores[rowid] + extra, cap[rowid]))
            elif rowid not in matched:
                scores.pop(rowid, None)
        if not self.times:  # asked about a time: not the newest state
            self._supersede(scores, features)
        return heapq.nsmallest(limit, ((s, r) for r, s in scores.items() if s > 0),
                               key=lambda sr: (-sr[0], -sr[1]))

    def _supersede(self, scores, features):
        """The newest state first: of the SUPERSEDED best, one much like an older one (SAME_STATE
        of their terms in common) and a day newer or more ranks just above it."""
        best = heapq.nsmallest(SUPERSEDED, scores, key=lambda r: (-scores[r], r))
        terms = {r: set(stems(list(_distinctive(first_words(features[r].content)[0])))).union(
            *_column_tag_terms(features[r].tags)) for r in best}
        moments = {r: _moment(features[r].created) for r in best}
        best = sorted((r for r in best if moments[r]), key=moments.get)
        for i, newer in enumerate(best):
            for older in best[:i]:
                shared, either = terms[newer] & terms[older], terms[newer] | terms[older]
                if scores[older] >= scores[newer] and len(shared) >= SAME_STATE * len(either) \
                        and moments[newer] - moments[older] >= timedelta(days=1):
                    scores[newer] = math.nextafter(scores[older], math.inf)


# ----------------------------------------------------------------------------- store


class Store:
    """The memories in one SQLite file: the API the transports and the command line call. It
    owns the links (each with its back-link), traversal and access counting, and hands ranking
    to Search, SQLite to Database. Threads may share it; processes' writes wait for each other
    up to `timeout` seconds. `litestream`: whether Litestream replicates the file (replicated)."""

    def __init__(self, path, *, timeout=BUSY_TIMEOUT, litestream=None):
        self.path = os.fspath(path)
        self.db = Database(self.path, timeout, litestream)
        self._uncounted = {}  # accesses not written yet, as count_accesses returns them
        self._uncounted_lock = threading.Lock()
        self._unfolded = False  # a tag filter met tags not folded yet (see _spellings)
        self._similar_threads, self._similar_lock = None, threading.Lock()  # _similar_pool
        self._similar_asked = 0
        self._common = set()  # words held by more than RARE memories (_similar_candidates)
        _check_file(self.path)
        if self.path != ":memory:" and not self.path.startswith("file:"):
            # SQLite would make it 0644 less the umask; its -wal and -shm copy this mode.
            with contextlib.suppress(OSError):  # there already, or SQLite will say what is wrong
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
        try:
            try:
                db = self.db.connection()
            except StoreError as exc:
                if _code(exc.__cause__) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                    raise _damaged(self.path, exc.__cause__) from exc
                raise StoreError(f"{self.path}: {exc}") from exc
            self._prepare(db)
        except BaseException:
            self.close()
            raise

    def close(self):
        """Close every connection this store opened, having written the accesses counted.
        Using the store again reopens it."""
        if self._uncounted:
            self.count_accesses()
        with self._similar_lock:
            threads, self._similar_threads = self._similar_threads, None
        if threads is not None:
            threads.shutdown()
        self.db.close()

    def close_thread(self):
        """Close the calling thread's connection, if it has one."""
        self.db.close_thread()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- schema

    def _prepare(self, db):
        """Create the schema in a new file, or bring an older one up to date."""
        with self.db.errors(f"open the memory database {self.path}"):
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than the {SCHEMA_VERSION} "
                    f"this Flood Memory understands; upgrade Flood Memory to open it")
            # Another program (a backup script) may have left the file in another journal
            # mode: readers would block writers, and a few clients time out. WAL persists in
            # the file; switching needs sole use and does not wait for it: tried till timeout.
            with contextlib.suppress(sqlite3.OperationalError):  # a read-only file
                self.db._retried(db, "PRAGMA journal_mode=WAL", self.db.timeout, 0.01)
            if version == SCHEMA_VERSION:
                return
            with self.db.write():
                self._migrate(db)

    def _migrate(self, db):
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return  # another process did it meanwhile
        tables = {row[0] for row in db.execute(  # sqlite_stat1 and the like: SQLite's own
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")
            } - _LITESTREAM_TABLES
        if not version and not tables:
            for statement in _STATEMENTS.values():
                db.execute(statement)
        elif not version and not ("nodes" in tables and tables <= _SPEC_TABLES):
            raise StoreError(f"{self.path} is not a Flood Memory database (it holds "
                             f"{', '.join(sorted(tables - _SPEC_TABLES)) or 'no nodes table'}); "
                             f"refusing to touch it")
        else:
            version = version or 1  # 0: made from SPEC.md's schema before versions were recorded
            log.info("upgrading %s from schema version %d to %d", self.path, version,
                     SCHEMA_VERSION)
            _upgrade(db, version)
        db.execute(f"PRAGMA user_version = {int(SCHEMA_VERSION)}")

    # -- reading

    def get(self, node_id):
        """The memory with this id, without counting it as an access."""
        node_id = _node_id(node_id)
        with self.db.errors("read the memory"):
            return self._row(self.db.connection(), node_id)

    def count(self):
        """How many memories there are."""
        with self.db.errors("count the memories"):
            return self.db.connection().execute("SELECT count(*) FROM nodes").fetchone()[0]

    @contextlib.contextmanager
    def _snapshot(self):
        """A read transaction on a connection of its own, for a caller that may stop reading
        early: the thread's connection left inside a transaction failed its next write."""
        with self.db.errors("read the memories"), \
                contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as db:
            db.text_factory = _TEXT
            db.execute("BEGIN")
            yield db

    def records(self):
        """Every memory, oldest first, as dicts with keys in a fixed order; one snapshot."""
        with self._snapshot() as db:
            yield from map(_node, db.execute(f"SELECT {_READ} FROM nodes WHERE id IS NOT NULL "
                                             f"ORDER BY rowid"))

    def ids_from(self, labels):
        """The ids of the memories that imports of another memory server's data labelled one
        of `labels` (see _labelled), one by one, from one snapshot."""
        with self._snapshot() as db:
            yield from (i for i, source in db.execute("SELECT id, source FROM nodes WHERE "
                                                      "source LIKE '% @%'")
                        if (label := _labelled(source))[1] and label[0] in labels)

    def resolve(self, given):
        """The ids of the memories whose id is `given`, or starts with it (4 characters at
        least, in any case): one, none, or several (11 at most) when it is ambiguous."""
        given = given.strip().lower()
        if not re.fullmatch(r"[0-9a-f-]{4,36}", given):
            raise InvalidInput(f"{_shorten(given)} is not a memory id, nor its first 4 or more "
                               f"characters")
        with self.db.errors("look up the memory"), self.db.read() as db:
            return [i for (i,) in db.execute("SELECT id FROM nodes WHERE id >= ? AND id < ? "
                                             "ORDER BY id LIMIT 11", (given, given + "\x7f"))]

    def short_ids(self, ids):
        """{id: its start of 8 characters, or more where 8 start another memory's id too}."""
        out = {}
        with self.db.errors("read the memories"), self.db.read() as db:
            for node_id in ids:
                n = 8
                while n < len(node_id) and db.execute(
                        "SELECT count(*) FROM (SELECT 1 FROM nodes WHERE id >= ? AND id < ? "
                        "LIMIT 2)", (node_id[:n], node_id[:n] + "\x7f")).fetchone()[0] > 1:
                    n += 1
                out[node_id] = node_id[:n]
        return out

    def peek(self, ids):
        """{id: memory} of those of `ids` that name one, not counted as accessed."""
        with self.db.errors("read the memories"), self.db.read() as db:
            return {n["id"]: n for n in self._read_fitted(db, "id", list(ids), None, None)[0]}

    def newest(self, tags=(), since=None, until=None, limit=20):
        """The newest memories carrying every one of `tags`, created in the window, not
        counted as accessed: what a person lists."""
        tags, limit = _tags(tags), _int(limit, "limit", 1, 1_000_000)
        since, until = _window_end(since, "since"), _window_end(until, "until")
        with self.db.errors("list the memories"):
            return self._read_counted("rowid", self._newest_rowids(tags, since, until, limit, 0),
                                      count=False)

    def tag_counts(self, limit=-1):
        """[(tag, how many memories carry it)], most used first: `limit` of them (-1: all)."""
        with self.db.errors("read the tags"), self.db.read() as db:
            return db.execute("SELECT tag, memories FROM tags ORDER BY memories DESC, tag "
                              "LIMIT ?", (limit,)).fetchall()

    def stats(self):
        """How many memories, links and tags there are, the oldest and newest memory's
        time, and where the database is and how large (with its log)."""
        with self.db.errors("read the memories"), self.db.read() as db:
            memories, oldest, newest = db.execute(
                "SELECT count(*), min(created_at), max(created_at) FROM nodes").fetchone()
            links = db.execute("SELECT total(json_array_length(links)) FROM nodes "
                               "WHERE json_valid(links)").fetchone()[0]
            tags = db.execute("SELECT count(*) FROM tags").fetchone()[0]
        size = sum(os.path.getsize(p) for p in (self.path, self.path + "-wal")
                   if os.path.exists(p))
        return {"memories": memories, "links": int(links) // 2, "tags": tags,
                "oldest": oldest, "newest": newest, "database": self.path, "bytes": size}

    def check(self):
        """What is wrong with the database, in words ([] when nothing is): SQLite's and FTS5's
        own checks, what is derived from the memories against them, and the rows that break a
        rule (_rule_breakers)."""
        problems = []
        with self.db.errors("check the database"):
            found = [r for (r,) in self.db.connection().execute("PRAGMA integrity_check")]
            if found != ["ok"]:
                problems.append(f"SQLite's integrity check: {'; '.join(found[:3])}")
            with self.db.write() as db:
                try:
                    db.execute(_FTS_CHECK)
                except sqlite3.DatabaseError as exc:
                    problems.append(f"the full-text index disagrees with the memories ({exc})")
            with self.db.read() as db:
                problems += [*_derived_problems(db), *_rule_breakers(db)]
        return problems

    def repair(self):
        """Make right what check finds that can be: indexes SQLite finds keys missing from made
        again, rows that break a rule mended, the full-text index and tag tables made again, every
        link made two-way. Each step is a write transaction of its own, what to write found by
        reading before; a memory another writer changes meanwhile is left for the next repair."""
        with self.db.errors("repair the database"):
            found = " ".join(r for (r,) in self.db.connection().execute("PRAGMA integrity_check"))
            if found != "ok":  # each index it names ("row 5 missing from index nodes_text")
                with self.db.write() as db:
                    for name in set(re.findall(r"index (\w+)", found)) or [""]:
                        db.execute(f"REINDEX {name}")
            with self.db.write() as db:  # what a rule of _ROW_RULES mends in SQL
                for rule in (r for r in _ROW_RULES if r[3]):
                    db.execute(f"UPDATE nodes SET {rule[0]} = {rule[3].format(rule[0])} "
                               f"WHERE {_breaking(rule)}")
            with self.db.read() as db:
                tags = [(_json(_fitted_tags(text)), rowid, text) for rowid, text in db.execute(
                    f"SELECT rowid, tags FROM nodes WHERE {_breaking(*_RULES_OF['tags'])}")]
                derived = _derived_problems(db)
                links = _links_to_repair(db)
            with self.db.write() as db:
                db.executemany("UPDATE nodes SET tags = ? WHERE rowid = ? AND tags IS ?", tags)
                if derived:
                    _fill_tags(db)
            with self.db.write() as db:
                try:
                    db.execute(_FTS_CHECK)
                except sqlite3.DatabaseError:
                    db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES ('rebuild')")
            with self.db.write() as db:
                _repair_links(db, links)

    def _row(self, db, node_id):
        row = db.execute(f"SELECT {_READ} FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        return _node(row)

    # -- writing, links both ways

    def add(self, content, tags=(), links=(), source=""):
        """Store a new memory, linked both ways to the existing ids in `links`; the memory,
        with the links left out under "skipped_links" ({"id", "reason"}). An exact duplicate
        (the same content once runs of spaces are collapsed, the same tags in any case) comes
        back instead, "already_remembered" and given the links. Stored memories very close to
        a new one are listed under "similar" (_most_similar), never merged."""
        content, tags, skipped = _content(content), _tags(tags), []
        links, source = _link_ids(links, skipped=skipped), _source(source)
        node_id, now = str(uuid.uuid4()), _now()
        words = tokenize(content)  # here: a thread holding the GIL stalls another
        with self.db.errors("save the memory"), self.db.write() as db:
            stored = self._exact_duplicate(db, content, tags)
            if stored is not None:
                node = self._add_links(db, stored, self._existing(db, links, skipped, stored))
                node["already_remembered"] = True
                return _with_skipped(node, "remember", skipped)
            links = self._existing(db, links, skipped, node_id)
            self._link_back_to(db, node_id, links)
            db.execute(f"INSERT INTO nodes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                       (node_id, content, _json(tags), _json(links), source, now, now))
            _fold_tags(db)
            # Asked now, to read while the commit syncs: asked before, its Python held up
            # this thread's statements.
            similar = self._similar_pool().submit(self._look_for_similar, words)
        node = {"id": node_id, "content": content, "tags": tags, "links": links,
                "source": source, "created_at": now, "last_accessed": now, "access_count": 0}
        try:
            similar = _most_similar([(i, text) for i, text in similar.result()
                                     if i != node_id], len(content), words)
            if similar:
                node["similar"] = similar
        except (StoreError, sqlite3.Error) as exc:  # the memory is stored all the same
            _warn_once(f"remember's look for similar memories failed: {exc}")
        return _with_skipped(node, "remember", skipped)

    def _similar_pool(self):
        """The threads that look for the memories a new one is very close to."""
        with self._similar_lock:
            if self._similar_threads is None:
                self._similar_threads = concurrent.futures.ThreadPoolExecutor(
                    2, "flood-memory-similar")
            return self._similar_threads

    def _look_for_similar(self, words):
        """_similar_candidates, in a thread and a read transaction of its own while the new
        memory's commit syncs: FTS5's lookups of its words (each opens every segment) then
        cost a remember little. The snapshot may hold the new memory (add leaves it out)."""
        with self.db.errors("look for similar memories"), self.db.read() as db:
            return self._similar_candidates(db, words)

    def _exact_duplicate(self, db, content, tags):
        """The id of the oldest memory `content` and `tags` duplicate exactly (tags whatever
        their case), among the few nodes_text gives."""
        text, tagged = _collapsed(content), _folded(tags)
        for node_id, stored, stored_tags in db.execute(
                f"SELECT id, CAST(content AS TEXT), CAST(tags AS TEXT) FROM nodes "
                f"WHERE {_SAME_KEY} ORDER BY rowid", (content,)):
            if _collapsed(stored) == text and _folded(_column_strings(stored_tags)) == tagged:
                return node_id
        return None

    def _add_links(self, db, node_id, links):
        """The memory `node_id`, its links extended by `links` (both ways)."""
        node = self._row(db, node_id)
        new = [i for i in links if i not in node["links"]]
        if new:
            node["links"] += new
            db.execute("UPDATE nodes SET links = ? WHERE id = ?", (_json(node["links"]), node_id))
            self._link_back_to(db, node_id, new)
        return node

    def _similar_candidates(self, db, words):
        """[(id, content)] of the memories a new one of `words` may be very close to: those
        sharing the most rare words with it (see SIMILAR_*), asked of FTS5 for its longest
        distinctive words not known to be common. Words, not terms: most remembers find
        nothing near, and then stem nothing."""
        distinct = _distinctive(words)
        if len(distinct) < SIMILAR_SHARED:
            return []
        probes = sorted(distinct - self._common, key=lambda w: (-len(w), w))[:SIMILAR_PROBES]
        asked = " UNION ALL ".join(f"SELECT {i}, rowid FROM (SELECT rowid FROM nodes_fts "
                                   f"WHERE nodes_fts MATCH ? LIMIT {RARE + 1})"
                                   for i in range(len(probes)))
        holders = collections.defaultdict(list)
        for probe, holder in db.execute(asked, [fts_query([w]) for w in probes]):
            holders[probe].append(holder)
        self._similar_asked += 1
        if len(self._common) > COMMON_KEPT or self._similar_asked % COMMON_RENEWED == 0:
            self._common.clear()  # whoever deleted or changed memories since, it is right again
        self._common.update(probes[i] for i, found in holders.items() if len(found) > RARE)
        shared = collections.Counter(r for found in holders.values() if len(found) <= RARE
                                     for r in found)
        compared = [r for r, k in shared.items() if k >= SIMILAR_RARE]
        near = heapq.nlargest(SIMILAR_CANDIDATES, compared, key=lambda r: (shared[r], r))
        return list(_select_in(db, "SELECT id, CAST(content AS TEXT) FROM nodes WHERE id IS NOT "
                               "NULL AND rowid IN", near))

    def load(self, records, *, checked=False, pause=LOAD_PAUSE, update=False, dry_run=False):
        """Insert whole memories, ids and times as given, in batches `pause` s apart (_Load), each
        record checked first unless `checked`; {"loaded", "skipped", "differ", "kept",
        "unsaid"}. A record stored already is skipped but for its links (a load run again
        completes one cut short); `differ` lists those whose content or tags differ, which take
        the record's with `update` (True; "changed": but those changed here, `kept`, or stored
        before imports kept what the source said, `unsaid`: find_differ). Links to ids found
        nowhere are dropped, with a warning. A `dry_run` only counts."""
        if not checked:
            records = list(_checked(records))
        return _Load(self, pause, update, dry_run).run(records)

    def update(self, node_id, content=None, tags=None, links=None):
        """Replace the given fields of a memory, links keeping their back-links in step; the
        memory, with the links left out listed under "skipped_links", as for add."""
        node_id = _node_id(node_id)
        if content is None and tags is None and links is None:
            raise InvalidInput("nothing to update: give content, tags or links")
        content = None if content is None else _content(content)
        tags = None if tags is None else _tags(tags)
        skipped = []
        links = None if links is None else _link_ids(links, skipped=skipped)
        with self.db.errors("update the memory"), self.db.write() as db:
            old = self._row(db, node_id)
            changes = {}
            if content is not None and content != old["content"]:
                changes["content"] = content
            if tags is not None and tags != old["tags"]:
                changes["tags"] = _json(tags)
            if links is not None:
                made = self._existing(db, links, skipped, node_id)
                kept, had = set(made), set(old["links"])  # a hub holds thousands
                self._unlink_from(db, node_id, [t for t in old["links"] if t not in kept])
                self._link_back_to(db, node_id, [t for t in made if t not in had])
                changes["links"] = _json(made)
            if changes:
                db.execute(f"UPDATE nodes SET {', '.join(f'{k} = ?' for k in changes)} "
                           f"WHERE id = ?", (*changes.values(), node_id))
                _fold_tags(db)
            node = self._row(db, node_id)
        return _with_skipped(node, "update", skipped)

    def delete(self, node_id):
        """Delete a memory and every back-link to it."""
        node_id = _node_id(node_id)
        with self.db.errors("delete the memory"), self.db.write() as db:
            self._unlink_from(db, node_id, self._row(db, node_id)["links"])
            db.execute("DELETE FROM nodes WHERE id = ?", (node_id,))
        return {"id": node_id, "deleted": True}

    def _existing(self, db, ids, skipped, itself):
        """Those of `ids` that name a memory but `itself`, in order; the others go to `skipped`."""
        found = {i for (i,) in _select_in(db, "SELECT id FROM nodes WHERE id IN", ids)} - {itself}
        skipped += ({"id": i, "reason": ITSELF if i == itself else NO_SUCH_MEMORY}
                    for i in ids if i not in found)
        return [i for i in ids if i in found]

    def _link_back_to(self, db, node_id, targets):
        """Add `node_id` to the links of each memory in `targets` that lacks it. In SQL, not
        read into Python: a memory thousands link to holds a long list."""
        for chunk in _chunks(list(targets)):
            db.execute(f"UPDATE nodes SET links = json_insert({_LINKS}, '$[#]', ?1) "
                       f"WHERE instr(coalesce(links, ''), ?2) = 0 AND id IN ({_qmarks(chunk)})",
                       (node_id, f'"{node_id}"', *chunk))

    def _unlink_from(self, db, node_id, targets):
        """Remove `node_id` from the links of each memory in `targets`, in SQL as _link_back_to."""
        for chunk in _chunks(list(targets)):
            db.execute(f"UPDATE nodes SET links = (SELECT json_group_array(value) FROM "
                       f"json_each(nodes.links) WHERE value <> ?1) WHERE instr(links, ?2) AND "
                       f"json_valid(links) AND id IN ({_qmarks(chunk)})",
                       (node_id, f'"{node_id}"', *chunk))

    # -- search

    def search(self, query="", tags=(), limit=10, *, offset=0, since=None, until=None,
               fit=None, report=None, count=True):
        """The `limit` memories after `offset` matching `query`, carrying every one of `tags`,
        created from `since` to `until` (exclusive): by relevance (rank), else newest first;
        the first fit(memories) of them with `fit`. Each counts as accessed unless not
        `count`. A dict `report` is told the "words" searched and whether some were "cut"."""
        query, tags = _text(query, "query"), _tags(tags)
        limit, offset = _int(limit, "limit", 1, MAX_LIMIT), _int(offset, "offset", 0, MAX_OFFSET)
        since, until = _window_end(since, "since"), _window_end(until, "until")
        if since is not None and until is not None and since >= until:
            raise InvalidInput(f"since ({since}) must come before until ({until})")
        words, cut, question = _question(query)
        if report is not None:
            report.update(words=words, cut=cut)
        if not words and query.strip():
            return []  # nothing searchable in it: punctuation or symbols only
        with self.db.errors("search the memories"):
            if words:
                rowids = [rowid for _, rowid in self.rank(
                    words, tags, offset + limit, since, until, question)][offset:]
            else:
                rowids = self._newest_rowids(tags, since, until, limit, offset)
            return self._read_counted("rowid", rowids, fit, count=count)

    def rank(self, words, tags=(), limit=10, since=None, until=None, question=Question()):
        """[(score, rowid)] of the best `limit` memories for `words`, best first (Search.rank)."""
        with self.db.read() as db:
            spellings = self._spellings(db, tags)
            if not all(spellings):
                return []  # no memory carries one of the tags
            search = Search(db, words, spellings, since, until, question)
            ranked = search.rank(limit)
            self._unfolded = self._unfolded or search.unfolded
            return ranked

    def _spellings(self, db, tags):
        """For each of `tags`, the spellings memories carry of it whatever their case (as
        str.casefold has it): [{spelling: memories}, ...], from tags.folded and the tags not
        folded yet (_fold_tags), which the next access counted folds."""
        out = []
        for tag in tags:
            folded = tag.casefold()
            rows = db.execute("SELECT tag, memories, folded FROM tags WHERE folded = ? OR "
                              "folded IS NULL", (folded,)).fetchall()
            self._unfolded = self._unfolded or any(f is None for _, _, f in rows)
            out.append({t: n for t, n, _ in rows if t.casefold() == folded})
        return out

    def nothing_found(self, tags=(), since=None, until=None, words=()):
        """What a recall that found nothing can tell the model, each key where it applies:
        "tags": [{"tag", "memories", "closest"}] for `tags` (closest: _closest_tags), else
        "most_used": [(tag, memories)]; "in_window": memories in the window; "matching": what
        the `words` find without tags and window (MAX_LIMIT + 1 at most); "word_tags": [{"word",
        "tags", "memories"}], the tags one of the `words` is a word of (a spelling each)."""
        tags = _tags(tags)
        since, until = _window_end(since, "since"), _window_end(until, "until")
        out = {}
        if not tags:
            out["most_used"] = self.tag_counts(CLOSEST_TAGS)
        if words and (tags or since is not None or until is not None):
            with self.db.errors("search the memories"):
                out["matching"] = len(self.rank(words, limit=MAX_LIMIT + 1))
        with self.db.errors("look at the tags"), self.db.read() as db:
            if since is not None or until is not None:
                out["in_window"] = db.execute(
                    "SELECT count(*) FROM nodes WHERE created_at >= ? AND created_at < ?",
                    (since or "", until or "~")).fetchone()[0]
            out["word_tags"] = []
            for word, term in zip(words, stems(list(words))):
                if held := _tags_holding(db, term)[0]:  # one spelling a tag, the most used
                    spelled = {t.casefold(): t for t in sorted(held, key=held.get)}
                    out["word_tags"].append({"word": word, "memories": sum(held.values()), "tags":
                                             sorted(spelled.values(), key=lambda t: -held[t])})
            out["tags"] = []
            for n, (tag, spellings) in enumerate(zip(tags, self._spellings(db, tags))):
                held = sum(spellings.values())
                closest = [] if held or n >= CLOSEST_TAGS else self._closest_tags(db, tag)
                out["tags"].append({"tag": tag, "memories": held, "closest": closest})
        return out

    def _closest_tags(self, db, tag):
        """Up to CLOSEST_TAGS tags close to `tag`, closest then most used first: an edit or two
        away (a swap of neighbours counting one: "marai"), then sharing a word with it
        ("maria-garcia"). MEASURED at most, the closest by their letters, are measured."""
        asked = tag.casefold()
        letters, words = _letters(asked), set(_TOKEN.findall(asked))
        near, found = [], {}  # spelling -> (how far, fewer memories first)
        for spelling, memories in db.execute("SELECT tag, memories FROM tags"):
            folded = spelling.casefold()
            if words & set(_TOKEN.findall(folded)):
                found[spelling] = (3, -memories)
            # Two edits change four letters at most.
            differ = (_letters(folded) ^ letters).bit_count()
            if abs(len(folded) - len(asked)) <= 2 and differ <= 4:
                near.append((differ, -memories, spelling, folded))
        for _, memories, spelling, folded in heapq.nsmallest(MEASURED, near):
            far = _distance(asked, folded)
            if far <= 2:
                found[spelling] = (far, memories)
        named = {}  # one spelling of each tag, the most used
        for spelling in sorted(found, key=lambda t: (*found[t], t)):
            named.setdefault(spelling.casefold(), spelling)
        return list(named.values())[:CLOSEST_TAGS]

    def _newest_rowids(self, tags, since, until, limit, offset):
        """The rowids of the newest memories carrying every one of `tags` (see _newest)."""
        db = self.db.connection()
        spellings = self._spellings(db, tags)
        return _newest(db, spellings, since, until, limit, offset) if all(spellings) else []

    # -- traversal

    def neighbors(self, node_id, depth=1, *, offset=0, limit=MAX_NODES, fit=None):
        """The memory and those within `depth` links of it, nearest first, with their shortest
        `distance`: {"nodes", "total", "exact"}, the nodes from `offset` on, at most `limit` (or
        what `fit` allows), counted as accessed; `total` stops at TRAVERSAL_CAP (then inexact)."""
        node_id, depth = _node_id(node_id), _int(depth, "depth", 0, MAX_DEPTH)
        offset = _int(offset, "offset", 0, TRAVERSAL_CAP)
        limit = _int(limit, "limit", 1, MAX_NODES)
        with self.db.errors("traverse the links"):
            with self.db.read() as db:
                distances = self._walk(db, node_id, depth)
            order = list(distances)[:TRAVERSAL_CAP]
            page = {i: {"distance": distances[i]} for i in order[offset:offset + limit]}
            nodes = self._read_counted("id", list(page), fit, page)
        return {"nodes": nodes, "total": len(order), "exact": len(distances) <= TRAVERSAL_CAP}

    def _walk(self, db, node_id, depth):
        """{id: distance} of the memories within `depth` links of `node_id`, breadth first, in
        the order met; TRAVERSAL_CAP + 1 at most. A link to a memory not there leads nowhere."""
        row = db.execute("SELECT links FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        distances = {node_id: 0}
        frontier = [row[0]]
        for distance in range(1, depth + 1):
            met = []
            for links in frontier:
                for target in _column_strings(links):
                    if target not in distances:
                        distances[target] = distance
                        met.append(target)
                if len(distances) > TRAVERSAL_CAP:
                    break
            further = "links" if distance < depth else "NULL"
            found = dict(_select_in(db, f"SELECT id, {further} FROM nodes WHERE id IN", met))
            for target in met:
                if target not in found:
                    del distances[target]
            frontier = [found[i] for i in met if i in found]
            if not frontier or len(distances) > TRAVERSAL_CAP:
                break
        return distances

    # -- access counting

    def _read_counted(self, column, keys, fit=None, extra=None, count=True):
        """The memories _read_fitted reads, counted as accessed (unless not `count`): written
        now if the write lock is free, else later (see count_accesses)."""
        if not keys:
            return []
        now = _now()
        with self.db.read() as db:
            nodes, rowids = self._read_fitted(db, column, keys, fit, extra)
        if not count:
            return nodes
        with self._uncounted_lock:
            for node in nodes:
                times, _, _ = self._uncounted.get(node["id"], (0, now, None))
                self._uncounted[node["id"]] = (times + 1, now, rowids[node["id"]])
        counted = self.count_accesses(wait=False)
        for node in nodes if counted else ():
            node["last_accessed"] = now
            node["access_count"] = min(node["access_count"] + counted[node["id"]][0], MAX_INT)
        return nodes

    def count_accesses(self, wait=True):
        """Write the accesses counted since they last could be: {id: (how many, the last
        one's time, rowid)} of those written, or None. Without `wait`, a lock held leaves them
        for the next call (test_a_recall_never_waits_for_another_process_s_write)."""
        with self._uncounted_lock:
            counted, self._uncounted = self._uncounted, {}
        if not counted:
            return counted
        try:
            with self.db.errors("count the access"), \
                    self.db.write("count the access", durable=False, wait=wait) as db:
                # Past MAX_INT, SQLite's integers overflow into floats: the count stops. By
                # rowid (a sixth faster); a memory another program moved meanwhile is left so.
                db.executemany(f"UPDATE nodes SET last_accessed = max(iif(typeof(last_accessed) "
                               f"= 'text', last_accessed, ''), ?), access_count = access_count "
                               f"+ min(?, {MAX_INT} - access_count) WHERE rowid = ? AND id = ?",
                               [(when, times, rowid, node_id) for node_id, (times, when, rowid)
                                in counted.items()])
                if self._unfolded:  # not every time: its SELECT was 1% of a recall
                    self._unfolded = False
                    _fold_tags(db)
            return counted
        except StoreError as exc:  # locked by another process, a full disk, a read-only file
            with self._uncounted_lock:
                for node_id, (times, when, rowid) in counted.items():
                    more, later, _ = self._uncounted.get(node_id, (0, when, None))
                    self._uncounted[node_id] = (times + more, max(when, later), rowid)
                if len(self._uncounted) > MAX_UNCOUNTED:  # a file that stays read-only
                    self._uncounted.clear()
            if not isinstance(exc, Busy):
                _warn_once(f"accesses not counted: "
                           f"{str(exc).removeprefix('could not count the access: ')}")
            return None

    def _read_fitted(self, db, column, keys, fit, extra):
        """The memories whose `column` ('rowid' or 'id') is in `keys`, in that order, with the
        fields of `extra[key]` added, cut to what `fit` allows; and {id: rowid} of them."""
        sql = f"SELECT {column}, rowid, {_READ} FROM nodes WHERE id IS NOT NULL AND {column} IN"
        db.text_factory = str  # a fifth faster than _TEXT, which only text not UTF-8 needs
        try:
            rows = list(_select_in(db, sql, keys))
        except sqlite3.OperationalError:  # "Could not decode to UTF-8": another program's
            db.text_factory = _TEXT
            rows = list(_select_in(db, sql, keys))
        finally:
            db.text_factory = _TEXT
        found = {row[0]: _node(row[2:]) for row in rows}
        nodes = [found[key] | (extra[key] if extra else {}) for key in keys
                 if key in found]  # a memory forgotten meanwhile is gone
        if fit and nodes:
            nodes = nodes[:fit(nodes)]
        return nodes, {row[2]: row[1] for row in rows}

    # -- the whole database

    def owns(self, path):
        """Whether `path` is this database file or one of its companions (log, index)."""
        return os.path.exists(path) and any(
            os.path.exists(own) and os.path.samefile(path, own)
            for own in (self.path, self.path + "-wal", self.path + "-shm"))

    def backup(self, target):
        """Copy the database as one snapshot (writers go on) to the file `target`, made beside
        it and renamed over it once complete and checked; how many memories it holds."""
        with self.written_beside(target, "the backup") as (target, partial), \
                self.db.errors(f"back up the memories to {target}"), \
                contextlib.closing(sqlite3.connect(partial, isolation_level=None)) as copy:
            self.db.connection().backup(copy)
            problem = copy.execute("PRAGMA quick_check").fetchone()[0]
            if problem != "ok":
                raise StoreError(f"the copy of {self.path} failed its check: {problem}")
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            return copy.execute("SELECT count(*) FROM nodes").fetchone()[0]

    @contextlib.contextmanager
    def written_beside(self, target, what):
        """(the path `target` names, a new private file beside it) for `what` (a backup, an
        export) to be written in, renamed over the target once written; what killed writers
        left there is removed first, and this one's own if the writing fails."""
        named, target = target, _target_file(target, what)
        if self.owns(target):
            raise InvalidInput(f"{named} is the memory database itself: {what} goes elsewhere")
        directory, name = os.path.split(target)
        _remove_leftovers(directory, re.escape(f".{name}.") + r"(\d+)\.part(-journal|-wal|-shm)?")
        partial = os.path.join(directory, f".{name}.{os.getpid()}.part")
        try:
            os.close(_open_private(partial))
            yield target, partial
            _replace(partial, target)
        except OSError as exc:
            raise StoreError(f"cannot write {what} {target}: {exc.strerror}") from exc
        finally:
            for leftover in (partial, partial + "-journal", partial + "-wal", partial + "-shm"):
                with contextlib.suppress(OSError):
                    os.remove(leftover)

    def restore(self, source, confirm=None):
        """Replace every memory with those of the backup file `source`, what it replaces kept
        in a copy beside the database (the last KEPT are); (how many, the copy), or None if
        confirm(memories in it) says False. Checked and brought to this schema in a copy first,
        it is written into the live database by SQLite's backup API in one transaction, which
        running servers read from their next on (their log would overwrite a file copied)."""
        source = os.path.abspath(os.path.expanduser(os.fspath(source)))
        if self.owns(source):
            raise InvalidInput("the backup to restore must not be the database itself")
        if not os.path.isfile(source):
            raise InvalidInput(f"there is no backup file {source}")
        directory = os.path.dirname(os.path.abspath(self.path))
        _remove_leftovers(directory, _RESTORING)
        with tempfile.TemporaryDirectory(prefix=f".restore-{os.getpid()}-", dir=directory,
                                         ignore_cleanup_errors=True) as work:
            copy = os.path.join(work, DB_NAME)
            try:
                _copy_private(source, copy)
                if os.path.exists(source + "-wal"):  # a live database's log holds pages too
                    _copy_private(source + "-wal", copy + "-wal")
            except OSError as exc:
                raise StoreError(f"cannot read the backup {source}: {exc.strerror}") from exc
            with self.db.errors("read the memory database"):
                page_size = self.db.connection().execute("PRAGMA page_size").fetchone()[0]
            count = _checked_backup(copy, source, page_size)
            if confirm is not None and not confirm(count):
                return None
            kept = os.path.join(directory, f"before-restore-{datetime.now():%Y%m%d-%H%M%S-%f}.db")
            self.backup(kept)
            with self.db.errors("restore the memories"):
                deadline = time.monotonic() + self.db.timeout

                def waited(status, remaining, total):
                    if status in _LOCKED and time.monotonic() > deadline:
                        raise Busy(f"could not restore the memories: the database stayed locked "
                                   f"by another process for more than {self.db.timeout:g} s")

                with contextlib.closing(sqlite3.connect(copy, isolation_level=None)) as backup:
                    db = self.db.connection()
                    self.db._set_durable(db, True)  # restored means synced, as any write
                    backup.backup(db, progress=waited, sleep=0.02)
        copies = sorted(n for n in os.listdir(directory) if re.fullmatch(_REPLACED_COPY, n))
        for name in copies[:-KEPT]:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
        return count, kept


# The triggers of an insert, set aside by a load: it indexes a batch at once, and its rows,
# checked and new, neither displace a row nor need refusing.
_INDEXING = ("nodes_bi", "nodes_ai", "tags_ai")


class _Load:
    """One Store.load: its records in batches, each one write transaction (other writers get
    turns between), the links within a batch written with it, the others later (link). After
    every commit each link has its back-link; running a stopped load again makes the rest."""

    def __init__(self, store, pause, update=False, dry_run=False):
        self.db = store.db
        self.pause, self.update, self.dry_run = pause, update, dry_run
        self.size = LOAD_CHUNK  # records in the next batch
        self.waiting = collections.defaultdict(list)  # id not stored -> ids linking to it
        # Links to make both ways between stored memories: {rowid of the one stored first:
        # (its id, [the ids it links to])}.
        self.pairs = {}
        self.later = {}  # id -> rowid of the memories in pairs' lists
        self.waited = 0  # links in pairs
        self.loaded = self.skipped = 0
        self.differ, self.kept, self.unsaid = [], [], []  # ids stored already that differ

    def run(self, records):
        db = self.db.connection()
        self.version = db.execute("PRAGMA data_version").fetchone()[0]  # see add_links
        cache = db.execute("PRAGMA cache_size").fetchone()[0]
        db.execute(f"PRAGMA cache_size = -{LOAD_CACHE_KIB}")
        try:
            with self.db.errors("load the memories"):
                records = iter(records)
                while batch := list(itertools.islice(records, self.size)):
                    self.store_batch(batch)
                    time.sleep(self.pause)  # another process's write may be waiting
                self.link()
        finally:
            db.execute(f"PRAGMA cache_size = {int(cache)}")
        _log_skipped("import", [{"id": target, "reason": NO_SUCH_MEMORY}
                                for target, sources in self.waiting.items() for _ in sources])
        return {"loaded": self.loaded, "skipped": self.skipped, "differ": self.differ,
                "kept": self.kept, "unsaid": self.unsaid}

    def store_batch(self, batch):
        """The records of `batch` not stored yet, with the links among them, in one write
        transaction; the next batch sized to take LOAD_TXN s, from LOAD_CHUNK / 4 to 4 times."""
        started = time.monotonic()
        with self.db.read() if self.dry_run else self.db.write() as db:
            asked = list({i: None for r in batch
                          for i in (r.id, *r.links, *self.waiting.get(r.id, ()))})
            stored = dict(_select_in(db, "SELECT id, rowid FROM nodes WHERE id IN", asked))
            fresh = [r for r in batch if r.id not in stored]
            changes = self.find_differ(db, [r for r in batch if r.id in stored])
            self.loaded += len(fresh)
            self.skipped += len(batch) - len(fresh)
            if self.dry_run:
                return
            db.executemany("UPDATE nodes SET content = coalesce(?, content), tags = coalesce("
                           "?, tags), source = ? WHERE id = ?", changes)
            new = {r.id for r in fresh}
            # id -> the links it is stored with, in order: each record's own, then back-links.
            gained = collections.defaultdict(dict)
            later = []  # (id, id) of the links that wait
            for record in batch:
                for target in record.links:
                    if target == record.id:
                        continue
                    if record.id in new and target in new:
                        gained[record.id][target] = None
                    elif target in stored or target in new:
                        later.append((record.id, target))
                    else:
                        self.waiting[target].append(record.id)
            for record in fresh:
                for target in record.links:
                    if target in new and target != record.id:
                        gained[target][record.id] = None
            for record in batch:  # fresh, or stored by another writer since it was waited for
                later += ((source, record.id) for source in self.waiting.pop(record.id, ())
                          if source in stored)  # not forgotten since by another writer
            if fresh:
                stored.update(zip((r.id for r in fresh), self.insert(db, [
                    (r.id, r.content, _json(r.tags), _id_list(list(gained.get(r.id, ()))),
                     r.source, r.created_at, r.last_accessed, r.access_count) for r in fresh],
                    collections.Counter(t for r in fresh for t in r.tags))))
            if fresh or changes:
                _fold_tags(db)
        for a, b in later:  # kept with the memory stored first (its id once, as a key)
            if stored[a] > stored[b]:
                a, b = b, a
            self.pairs.setdefault(stored[a], (a, []))[1].append(b)
            self.later[b] = stored[b]
        self.waited += len(later)
        if fresh:
            pace = max(time.monotonic() - started, 1e-3) / len(fresh)
            self.size = max(LOAD_CHUNK // 4, min(4 * LOAD_CHUNK, int(LOAD_TXN / pace)))
        if self.waited >= LOAD_LINKS:
            self.link()

    def link(self):
        """Make the links waiting in self.pairs both ways (once LOAD_LINKS wait, and at the
        end), in transactions of about LOAD_TXN s, in the order of the memory stored first:
        one linked from thousands after it (an official entity) is written a few times, not
        once a batch, and memories stored together in the same transaction."""
        pairs, self.pairs, self.waited = self.pairs, {}, 0
        rowids, self.later = self.later, {}
        owners = sorted(pairs)
        size, at = 2 * LOAD_CHUNK, 0
        while at < len(owners):
            started, taken, group = time.monotonic(), 0, []
            while at < len(owners) and taken < size:
                group.append((owners[at], *pairs.pop(owners[at])))
                taken += len(group[-1][2])
                at += 1
            with self.db.write() as db:
                self.add_links(db, group, rowids)
            pace = max(time.monotonic() - started, 1e-3) / taken
            size = max(LOAD_CHUNK // 4, min(16 * LOAD_CHUNK, int(LOAD_TXN / pace)))
            time.sleep(self.pause)

    @staticmethod
    def insert(db, rows, tags):
        """Insert the memories `rows` (of _COLUMNS), carrying `tags` ({tag: how many}), and
        index them in one statement each, their triggers set aside meanwhile (a DROP rolls back
        with the transaction, and no one else writes); their rowids."""
        first = db.execute("SELECT max(rowid) FROM nodes").fetchone()[0] or 0
        insert = f"INSERT INTO nodes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        if first >= MAX_INT - len(rows):
            # Another program stored a memory at the last rowid: SQLite picks the new ones at
            # random, and the triggers index them one by one.
            db.executemany(insert, rows)
            return [db.execute("SELECT rowid FROM nodes WHERE id = ?", (row[0],)).fetchone()[0]
                    for row in rows]
        for trigger in _INDEXING:
            db.execute(f"DROP TRIGGER {trigger}")
        db.executemany(insert, rows)
        db.execute("INSERT INTO nodes_fts (rowid, content) SELECT rowid, content FROM nodes "
                   "WHERE rowid > ?", (first,))
        # In the order of the index: inserted in the order of the memories, each row went
        # somewhere else in it (three times as long).
        db.execute(f"INSERT OR IGNORE INTO node_tags (tag, node, created_at) "
                   f"{_sql_tag_rows('n', 'nodes n, ')} AND n.rowid > ? ORDER BY 1, 2", (first,))
        db.executemany("INSERT INTO tags (tag, memories) VALUES (?, ?) ON CONFLICT (tag) DO "
                       "UPDATE SET memories = memories + excluded.memories", tags.items())
        for name in _INDEXING:
            db.execute(_STATEMENTS[name])
        return range(first + 1, first + 1 + len(rows))

    def find_differ(self, db, records):
        """Note the ids of `records` (stored already) whose content or tags differ (see
        Store.load); the (content or None, tags or None, source, id) to write of them. With
        `update` "changed", a memory takes the record's where it is still what its source
        said last (_said, kept in the source), and the source is made the record's."""
        stored, changes = {row[0]: row[1:] for row in _select_in(
            db, "SELECT id, CAST(content AS TEXT), tags, source FROM nodes WHERE id IN",
            [r.id for r in records])}, []
        for r in records:
            content, tags, source = stored[r.id]
            same, said = content == r.content and _column_strings(tags) == r.tags, \
                _labelled(source)[1]
            take = not same and (self.update is True or self.update == "changed" and
                                 said == _said(content, _column_strings(tags)))
            if not same:
                # A memory whose source says nothing of what it gave is left, and so said, till
                # --update: who changed it cannot be told.
                (self.differ if take or self.update != "changed" else
                 self.unsaid if said is None else self.kept).append(r.id)
            if take or self.update == "changed" and source != r.source and (same or said):
                changes.append(((r.content, _json(r.tags)) if take else (None, None)) +
                               (r.source, r.id))
        return changes

    def add_links(self, db, group, rowids):
        """Make the links of `group` ([(rowid, id, [ids of memories stored after it])]) both
        ways: each memory given those it lacks after its own, by rowid (`rowids` of the later
        ones), or by id once another writer wrote since the load began (a link to a memory it
        forgot is dropped)."""
        later = {i: rowids[i] for _, _, linked in group for i in linked}
        if db.execute("PRAGMA data_version").fetchone()[0] != self.version:
            later = dict(_select_in(db, "SELECT id, rowid FROM nodes WHERE id IN", later))
        first = {rowid: (node_id, linked) for rowid, node_id, linked in group}
        changed, back = [], collections.defaultdict(list)  # later id -> the first ones
        for rowid, node_id, text in _select_in(  # a chunk at a time: a hub's links are long
                db, "SELECT rowid, id, links FROM nodes WHERE rowid IN", first):
            if node_id != first[rowid][0]:
                continue  # forgotten, and its rowid taken by another memory
            linked = [i for i in dict.fromkeys(first[rowid][1]) if i in later]
            changed.append((_extended(text, linked), rowid))
            for i in linked:
                back[i].append(node_id)
        db.executemany("UPDATE nodes SET links = ? WHERE rowid = ?", [c for c in changed if c[0]])
        changed = [(_extended(text, back[node_id]), rowid) for rowid, node_id, text in
                   _select_in(db, "SELECT rowid, id, links FROM nodes WHERE rowid IN",
                              [later[i] for i in back]) if node_id in back]
        db.executemany("UPDATE nodes SET links = ? WHERE rowid = ?", [c for c in changed if c[0]])


def _extended(text, ids):
    """The links column value `text` with those of `ids` it lacks after its own, or None if
    it lacks none. Without a backslash in it, no id needs escaping: _id_list writes it."""
    had = _column_strings(text) if text != "[]" else []  # "[]": most memories a load links to
    there = set(had)
    more = [i for i in ids if i not in there]
    plain = not isinstance(text, str) or "\\" not in text
    return (_id_list if plain else _json)(had + more) if more else None


_warned = {}  # warning -> when it was last logged


def _warn_once(message, every=60.0):
    """Log `message` as a warning, but not again within `every` seconds: a disk that stays
    full would otherwise log a line per recall."""
    now = time.monotonic()
    if now - _warned.get(message, -every) >= every:
        _warned[message] = now
        log.warning("%s", message)


def _with_skipped(node, doing, skipped):
    if skipped:
        _log_skipped(doing, skipped)
        node["skipped_links"] = skipped
    return node


def data_settings(environ, paths=os.path):
    """(the data directory, whether Litestream replicates the file) as `environ` sets them, for
    the servers, store.py and setup.py alike: FLOOD_MEMORY_DIR (DEFAULT_DIR unset), `~`
    expanded by `paths` (ntpath or posixpath play a system), must be absolute (a client starts
    the server in a folder of its own, and Claude Desktop on Windows may give it no
    USERPROFILE); FLOOD_MEMORY_LITESTREAM is 1 or 0, else None. InvalidInput says what is wrong."""
    value = environ.get("FLOOD_MEMORY_DIR") or DEFAULT_DIR
    directory = paths.expanduser(value)
    if directory.startswith("~"):
        raise InvalidInput(f"FLOOD_MEMORY_DIR is {value}, and this process cannot expand ~ (it "
                           f"has no {'USERPROFILE' if paths.sep == chr(92) else 'HOME'}): set "
                           f"FLOOD_MEMORY_DIR to an absolute path")
    if not paths.isabs(directory):
        raise InvalidInput(f"FLOOD_MEMORY_DIR is {value}, a relative path: set it to an absolute "
                           f"path (a client starts the server in a folder of its own choosing)")
    return directory, {"1": True, "0": False}.get(environ.get(LITESTREAM_ENV, "").strip())


def open_directory(directory, litestream=None):
    """The store in `directory` (`litestream` as Store takes it), the directory made private if
    need be, as is a database made in it (its -wal and -shm take its mode); one other users of
    the machine can read is warned about, with the command that fixes it."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise StoreError(f"the data directory {directory} is a file, not a directory; set "
                         f"FLOOD_MEMORY_DIR to a directory")
    if not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=PRIVATE_DIR, exist_ok=True)
            os.chmod(directory, PRIVATE_DIR)
        except OSError as exc:
            raise StoreError(f"cannot create the data directory {directory}: "
                             f"{exc.strerror}") from exc
    path = os.path.join(directory, DB_NAME)
    _remove_leftovers(directory, _RESTORING)
    store = Store(path, litestream=litestream)
    exposed = [p for p in (path, path + "-wal", path + "-shm") if _shared_mode(p)]
    if exposed:
        import shlex
        log.warning("%s can be read by other users of this machine; to make it private, run: "
                    "chmod 700 %s && chmod 600 %s*", os.path.basename(exposed[0]),
                    shlex.quote(directory), shlex.quote(path))
    return store


def _shared_mode(path):
    """Whether users other than the owner may read or write the file at `path`."""
    if os.name != "posix":
        return False  # Windows keeps files private through ACLs, not mode bits
    with contextlib.suppress(OSError):
        return bool(os.stat(path).st_mode & 0o077)
    return False


def _target_file(target, what):
    """The path `what` (a backup, an export) named `target` is written to: made absolute, or the
    regular file a symbolic link there points at (written through); InvalidInput for a
    directory, a special file or a missing directory. Only a last link is followed: messages
    name the path given (a Mac's temporary folder is behind /var; Windows would say FIRSTL~1)."""
    path = os.path.abspath(os.path.expanduser(os.fspath(target)))
    if os.path.islink(path):
        path = os.path.realpath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        kind = "a directory" if os.path.isdir(path) else "a device or other special file"
        raise InvalidInput(f"{target} is {kind}: {what} is written to a regular file or a "
                           f"new path")
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise InvalidInput(f"the directory {directory} does not exist; create it first")
    return path


def _open_private(path):
    """A new, empty file at `path` (emptied if it was there) that only its owner may read;
    its descriptor, open for writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    if os.name == "posix":
        os.fchmod(fd, PRIVATE_FILE)  # it may have been there with another mode
    return fd


def _copy_private(source, target):
    with open(source, "rb") as f, open(_open_private(target), "wb") as out:
        shutil.copyfileobj(f, out)


# The copies of what restores replaced; what a killed restore leaves: its work directory, the
# copy being written.
_REPLACED_COPY = r"before-restore-[\d-]+\.db"
_RESTORING = rf"\.(?:restore-|{_REPLACED_COPY}\.)(\d+)(?:-\w+|\.part(-journal|-wal|-shm)?)"


def _remove_leftovers(directory, pattern):
    """Remove the files and directories in `directory` whose names match `pattern` (its first
    group a process id) that a process no longer running left: a killed backup, restore or
    export cannot remove its own."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            found = re.fullmatch(pattern, entry.name)
            if found and not _running(int(found.group(1))):
                log.info("removing %s, left by a process that stopped", entry.path)
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.remove(entry.path)


def _running(pid):
    """Whether the process `pid` may be running."""
    if os.name == "nt":  # os.kill would end it there: ask the system whether it has ended
        import ctypes
        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x00100000, False, pid)  # SYNCHRONIZE
        if not handle:
            return False
        try:
            return kernel32.WaitForSingleObject(handle, 0) == 0x102  # WAIT_TIMEOUT
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: running
    return True


REPLACE_TRIES = 20      # times a finished copy is renamed over a file held open (Windows)...
REPLACE_PAUSE = 0.25    # ...this many seconds apart


def _replace(source, target, system=None):
    """os.replace(source, target), tried again for a few seconds on Windows (`system`, os.name,
    "nt"), where a file another program holds open (an editor, a sync tool, an antivirus
    scan) cannot be replaced, often for a moment only; then StoreError says what to close."""
    for tries_left in range(REPLACE_TRIES - 1, -1, -1):
        try:
            os.replace(source, target)
            return
        except PermissionError:
            if (system or os.name) != "nt":
                raise
            if not tries_left:
                raise StoreError(f"cannot replace {target}: another program has it open "
                                 f"(Windows does not let a file in use be replaced); close "
                                 f"it, or choose another file, and try again") from None
            time.sleep(REPLACE_PAUSE)


def _checked_backup(path, name, page_size):
    """Check the copy at `path` of the backup file `name` and bring it to this schema, in
    SQLite's page size `page_size`; how many memories it holds. InvalidInput if it is not an
    intact Flood Memory database."""
    with open(path, "rb") as f:
        if not f.read(16).startswith(b"SQLite format 3\0"):
            raise InvalidInput(f"{name} is not a backup of the memories: it is not an SQLite "
                               f"database")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        try:
            problem = db.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE "
                                               "type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise InvalidInput(f"{name} is damaged ({exc}); nothing was restored") from exc
    if problem != "ok":
        raise InvalidInput(f"{name} is damaged ({problem}); nothing was restored")
    if "nodes" not in tables:
        raise InvalidInput(f"{name} is not a backup of the memories: it has no nodes table")
    try:
        with Store(path) as copy:  # brings an older schema up to date, refuses a newer one
            db = copy.db.connection()
            db.execute(_FTS_CHECK)
            count = copy.count()
            if db.execute("PRAGMA page_size").fetchone()[0] != page_size:
                # The backup API cannot change the page size of a database in WAL mode.
                db.execute("PRAGMA journal_mode=DELETE")
                db.execute(f"PRAGMA page_size={int(page_size)}")
                db.execute("VACUUM")
    except (StoreError, sqlite3.DatabaseError) as exc:
        reason = str(exc).replace(path, name)
        raise InvalidInput(f"{name} cannot be restored: {reason}; nothing was restored") from exc
    return count


def _check_file(path):
    """Refuse a file that is not an SQLite database, has lost pages or is gone beside its log,
    before SQLite sees it; not one this process has open already: closing a descriptor drops every
    POSIX lock the process holds on the file, and another process could then remove the log from
    under this one (test_a_second_store_in_one_process_keeps_the_first_ones_locks)."""
    with _connected_lock:
        if _connected[os.path.realpath(path)] > 0:
            return
    try:
        with open(path, "rb") as f:
            header, status = f.read(100), os.fstat(f.fileno())
    except FileNotFoundError:
        if os.path.exists(path + "-wal"):  # a new database would drop it, and a server's writes
            raise StoreError(f"{path} is gone, but its -wal is there: put it back, or close every "
                             f"client and move the -wal and -shm files aside too")
        return
    except OSError as exc:
        raise StoreError(f"cannot read the memory database {path}: {exc.strerror}") from exc
    size, links = status.st_size, status.st_nlink  # of the file read, as it was then
    if links > 1:
        raise StoreError(f"{path} has {links} names (hard links, as cp -al or rsync --link-dest "
                         f"make): SQLite locks the file by its name, so writes through the "
                         f"other names would be lost. Give it a name of its own, with the "
                         f"servers stopped: cp {path} {path}.copy && mv {path}.copy {path}")
    if not header:
        return  # empty: SQLite makes a new database in it
    if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
        raise _damaged(path, "not an SQLite database: its header is wrong")
    with contextlib.suppress(OSError):
        if os.path.getsize(path + "-wal") > 0:
            return  # the write-ahead log may hold pages the file lacks; SQLite replays it
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is only current when its "valid for" counter matches.
    if header[92:96] == header[24:28] and page_size and pages and size < pages * page_size:
        raise _damaged(path, f"truncated: it holds {size} bytes of {pages * page_size}")


def _damaged(path, why):
    """The StoreError of a database too damaged to open, saying how to go back to a backup."""
    return StoreError(f"{path} is damaged ({why}): close every client, move it and its -wal and "
                      f"-shm files aside, then copy a backup in its place")


# =============================================================================================
# The boundary. Above: the engine, which the servers use. Below: the command line and the
# importers, which use the engine only through its names (Store, open_directory, Record, _tags,
# ...) and import the modules only they need where they need them: a server's start loads none.
# =============================================================================================

# ----------------------------------------------------------------------------- command line


def reader_gone(exc, system=None):
    """Whether `exc`, raised by a write to standard output, says that its reader has gone:
    BrokenPipeError, or OSError EINVAL on Windows (`system`, os.name, says "nt")."""
    return isinstance(exc, BrokenPipeError) or (
        (system or os.name) == "nt" and isinstance(exc, OSError) and exc.errno == errno.EINVAL
        and exc.filename is None)


def export(store, out):
    """Write every memory to the text stream `out`, one JSON line each; return how many."""
    n = 0
    for n, record in enumerate(store.records(), 1):
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return n


def read_lines(lines):
    """("line 3", value) of each JSON line (bytes) but blank ones; InvalidInput names a bad one."""
    nonblank = ((n, line) for n, line in enumerate(lines, 1) if line.strip())
    for number, (line_number, line) in enumerate(nonblank, 1):
        try:
            yield f"line {line_number}", _DECODER.decode(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInput(f"record {number} (line {line_number}) is not UTF-8 text") from None
        except (ValueError, RecursionError) as exc:
            raise InvalidInput(f"record {number} (line {line_number}) is not JSON: "
                               f"{exc}") from None


def read_entries(lines):
    """(graph, entries) of an import file (lines of bytes): (where, value) of each thing it
    gives, and whether they come from a knowledge graph given as one object. Mostly a JSON
    value a line ("line 3"); a file whose first line is "{" alone or starts with "[" is read
    whole (as `jq .` prints), an array giving its items ("item 3"), a knowledge graph (the
    official server's read_graph) its entities and relations ("entity 3"), typed."""
    lines = iter(lines)
    head = []  # the blank lines before the first, and the first
    for line in lines:
        head.append(line.removeprefix(b"\xef\xbb\xbf") if not head else line)
        if head[-1].strip():
            break
    first = head[-1].strip() if head else b""
    if first != b"{" and not first.startswith(b"["):
        parsed = read_lines(itertools.chain(head, lines))
        top = next(parsed, None)
        if top and _is_graph(top[1]):
            return True, itertools.chain(_graph_entries(top[1]), parsed)
        return False, itertools.chain([top] if top else [], parsed)
    try:
        values = _json_values(b"".join(itertools.chain(head, lines)).decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidInput("the file is not UTF-8 text") from None
    if len(values) == 1 and _is_graph(values[0][1]):
        return True, _graph_entries(values[0][1])
    if len(values) == 1 and isinstance(values[0][1], list):
        return False, ((f"item {n}", value) for n, value in enumerate(values[0][1], 1))
    return False, ((f"line {line}", value) for line, value in values)


def utf8_lines(source):
    """The lines of the binary file `source` (with peek), as UTF-8 bytes, from UTF-16 after its
    byte order mark (as Windows PowerShell 5.1's > and Out-File write text)."""
    if source.peek(2)[:2] not in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        yield from source
        return
    try:
        yield from (line.encode("utf-8") for line in _text_stream(source))
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the file starts as UTF-16 text but is not: {exc.reason}") from None


_JSON_SPACE = re.compile(r"[ \t\n\r]*")
# An integer of thousands of digits is a number too (int() refuses past 4,300): an import
# uses none, and reads it as a float rather than refuse the file.
_DECODER = json.JSONDecoder(parse_int=lambda digits: int(digits) if len(digits) < 4000 else
                            float(digits))


def _json_values(text):
    """[(line it starts on, value)] of the JSON values in `text`, one after another."""
    values, at, line = [], 0, 1
    while True:
        start = _JSON_SPACE.match(text, at).end()
        line += text.count("\n", at, start)
        if start == len(text):
            return values
        try:
            value, at = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the file is not JSON at line {exc.lineno}, column "
                               f"{exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise InvalidInput(f"the JSON value at line {line} is nested too deeply") from None
        values.append((line, value))
        line += text.count("\n", start, at)


def _graph_entries(graph):
    """(where, value) of the entities and relations of a knowledge graph as one object."""
    for key in ("entities", "relations"):
        if not isinstance(graph.get(key, []), list):
            raise InvalidInput(f'the graph\'s "{key}" must be an array, got {_kind(graph[key])}')
    return ((f"{kind} {n}", dict(value, type=kind) if isinstance(value, dict) else value)
            for key, kind in (("entities", "entity"), ("relations", "relation"))
            for n, value in enumerate(graph.get(key, []), 1))


def _is_graph(value):
    """Whether a JSON value is a knowledge graph of the official memory server as one object."""
    return isinstance(value, dict) and ("entities" in value or "relations" in value) and \
        "type" not in value and "content" not in value


# ----------------------------------------------------------------------------- the official format
#
# The reference MCP memory server (memory.jsonl, older versions memory.json) keeps a JSON object
# a line: an entity {"type": "entity", "name", "entityType", "observations": [...]} or a relation
# {"type": "relation", "from", "to", "relationType"}; of forks' fields only createdAt is used.
# An entity becomes a memory ("John_Smith is a person."), each observation one naming it
# ("John_Smith: Speaks fluent Spanish"), both tagged with its name and type, and linked; a
# relation one ("John_Smith works at Anthropic") tagged with both names and its type, linked to
# both entities' memories (theirs linked too): connections reach Anthropic from any of John's
# in two hops. Ids are made from what a memory says: importing again adds only what is new.
# An entity with more than OFFICIAL_LINKED observations (often the user) meets its relations
# through its own memory only: each relation linked to every observation cost their product.

OFFICIAL = uuid.UUID("5f3a2c8e-9b1d-4c6e-8a7f-0e4d2b1c3a59")  # namespace of those ids
OFFICIAL_LINKED = 20  # past this many observations, an entity's relations link to its own memory
OFFICIAL_MAX_NAME = 10_000  # characters in a name, type or relation type of the file


def _official_id(key):
    """The text of uuid.uuid5(OFFICIAL, key), made without a UUID object (an import makes
    one a memory): the version (5) and RFC 4122's variant (8, 9, a or b) set in hex digits."""
    import hashlib  # here, as every module of the command line: servers need none
    h = hashlib.sha1(OFFICIAL.bytes + key.encode("utf-8")).hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


def is_official(value):
    """Whether a file's first JSON object is an entity or relation of the official format."""
    return isinstance(value, dict) and value.get("type") in ("entity", "relation") and \
        "content" not in value


def official_records(entries, source, report):
    """The Records of an official memory file's `entries` (read_entries), once every line is
    checked (InvalidInput names a bad one); `report` counts what was held, skipped and why."""
    entities, relations = {}, {}
    for where, value in entries:
        if not isinstance(value, dict):
            raise InvalidInput(f"{where}: not a JSON object")
        kind = value.get("type")
        try:
            if kind == "entity":
                name, kind_of = _official_name(value, "name"), _official_name(value, "entityType")
                observations = value.get("observations")
                observations = [] if observations is None else observations  # a fork's null
                if not isinstance(observations, list) or \
                        not all(isinstance(o, str) for o in observations):
                    raise InvalidInput("observations must be a list of strings")
                if name in entities:
                    report["skipped", "entity line", "entity lines",
                           "repeating a name (observations merged)"] += 1
                created = _foreign_time(value.get("createdAt"))
                entity = entities.setdefault(name, {"type": kind_of, "observations": {},
                                                    "created": created})
                for observation in observations:
                    text = _text(observation.strip(), f"an observation of {_shorten(name)}",
                                 most=MAX_CONTENT - len(name) - 2)  # as "name: text"
                    if not text:
                        report["skipped", "empty observation", "empty observations", ""] += 1
                    elif text in entity["observations"]:
                        report["skipped", "repeated observation", "repeated observations", ""] += 1
                    else:
                        entity["observations"][text] = created
            elif kind == "relation":
                key = tuple(_official_name(value, k) for k in ("from", "relationType", "to"))
                if key in relations:
                    report["skipped", "repeated relation", "repeated relations", ""] += 1
                relations.setdefault(key, _foreign_time(value.get("createdAt")))
            else:
                report["skipped", "line", "lines", "with no type" if kind is None else
                       f"of another type ({_shorten(kind, 30)})"] += 1
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None
    if not entities and not relations and report:  # lines, and none of them the format's
        raise InvalidInput("the file holds no entity and no relation: it is not the official "
                           "memory server's (--format flood reads Flood Memory's own)")
    report["entity", "entities"] = len(entities)
    report["observation", "observations"] = sum(len(e["observations"]) for e in entities.values())
    report["relation", "relations"] = len(relations)
    # Then the Records one by one: an import spools them to a file as they come instead of
    # holding them all (a large file's records were many times its size).
    now = _now()
    seen = {}  # name -> its tag

    def tags_of(*names):  # made tags remember takes (counted) rather than refuse the file
        for name in names:
            if name not in seen:
                seen[name] = _fitted_tag(name)  # stripped names: changed only if it must be
                if seen[name] != name:
                    report["changed", "name", "names", "made a shorter tag, or one without "
                           "control characters"] += 1
        return _tags([seen[name] for name in names])
    ids = {}  # entity name -> [its memory's id, ids of its observations' memories]
    for name, entity in entities.items():
        ids[name] = [_official_id(f"entity\0{name}")]
        ids[name] += (_official_id(f"observation\0{name}\0{text}")
                      for text in entity["observations"])
    # Related entities' own memories link too (see above).
    related = collections.defaultdict(list)
    for start, _, end in relations:
        if start in entities and end in entities and start != end:
            related[start].append(ids[end][0])
    for name, entity in entities.items():
        tags = tags_of(name, entity["type"])
        own = ids[name][0]
        kind_text = entity["type"].replace("_", " ")
        article = "an" if kind_text[:1].lower() in "aeiou" else "a"
        created = entity["created"] or now
        yield Record(own, _content(f"{name} is {article} {kind_text}."), tags,
                     list(dict.fromkeys(related.get(name, ()))), source, created, created, 0)
        for node_id, (text, created) in zip(ids[name][1:], entity["observations"].items()):
            yield Record(node_id, _content(f"{name}: {text}"), tags, [own], source,
                         created or now, created or now, 0)
    # What a relation links to of each entity: all its memories, or its own only (see above).
    reach = {name: own if len(own) <= OFFICIAL_LINKED + 1 else own[:1]
             for name, own in ids.items()}
    for (start, kind, end), created in relations.items():
        if start not in entities or end not in entities:
            report["kept as text only", "relation", "relations",
                   "naming an entity not in the file (linked to no memory of it)"] += 1
        links = [i for name in (start, end) for i in reach.get(name, ())]
        yield Record(_official_id(f"relation\0{start}\0{kind}\0{end}"),
                     _content(f"{start} {kind.replace('_', ' ')} {end}"),
                     tags_of(start, end, kind), list(dict.fromkeys(links)), source,
                     created or now, created or now, 0)


def _official_name(value, key):
    """The name, type or relation type `key` of a line, stripped; InvalidInput if it cannot
    be one (NUL separates the names in the keys of _official_id)."""
    text = value.get(key)
    if not isinstance(text, str) or not _CONTROL.sub("", text).strip():
        raise InvalidInput(f"{value.get('type')} needs {key}, a string that is not empty")
    _text(text, key, most=OFFICIAL_MAX_NAME)
    if "\0" in text:
        raise InvalidInput(f"{key} must not hold a NUL character")
    return sys.intern(text.strip())  # one copy of a name the file repeats in many relations


def _foreign_time(created):
    """A time another program wrote (ISO 8601 text, or seconds or milliseconds since 1970),
    in the stored form, or None: a field in another form is not ours to refuse a file for."""
    if created is None or isinstance(created, bool):
        return None
    try:
        return _utc(created) if isinstance(created, str) else _format_time(
            datetime.fromtimestamp(created / (1000 if created > 1e11 else 1), timezone.utc))
    except (ValueError, TypeError, OverflowError, OSError):
        return None


# ---------------------------------------------------------------------------- other memory servers
#
# What other memory servers leave on disk, read as they left it and never written (each reader
# says how, and its key). Ids are made from the keys as the official import makes its own (the
# format's name first): importing a source again stores only what is new in it, and as no key
# holds a path, a folder moved elsewhere is the same source. What changed there under the same
# key takes the new content and tags; what is gone from it is listed, never deleted.

UNZIP_MAX = 1 << 30  # bytes a zip's memories.json may decompress to (a zip bomb stops here)


class _RecordMaker:
    """The Records of one import from another memory server: content too long cut with a note,
    tags fitted, a key seen before skipped, what was changed or skipped counted in `report`, a
    source ending in what it said (_said). A reader yields what `record` gives, None too."""

    def __init__(self):
        self.report, self.labels = collections.Counter(), set()  # labels: of the sources read
        self.seen = set()  # the ids made so far, as _id_numbers

    def source(self, format_name, path, label=None):
        """Make the next Records those of `path`, labelled `label` (else _source_name)."""
        self.format = format_name
        self.label = (label or _source_name(format_name, path))[:MAX_SOURCE - 10]
        self.labels.add(self.label)

    def skip(self, why):
        """Count a memory skipped, and why; None, as `record` gives for it."""
        self.report["skipped", "memory", "memories", why] += 1

    def record(self, key, content, tags, created, links=()):
        """The Record made from `key` (a tuple of strings) and the rest; None if skipped."""
        node_id = _official_id("\0".join((self.format, *key)))
        if _id_number(node_id) in self.seen:
            return self.skip("repeated in the source")
        try:
            content = _text(content, "content").strip()
            tags = [_text(t, "a tag") for t in tags]
        except InvalidInput:
            return self.skip("with text that is not valid Unicode")
        if not content:
            return self.skip("with no text")
        if len(content) > MAX_CONTENT:
            kept = content[:MAX_CONTENT - 60].rstrip()
            content = f"{kept} [cut: {len(content) - len(kept):,} more characters in the source]"
            self.report["changed", "memory", "memories", f"cut to {MAX_CONTENT:,} characters, "
                        f"with a note"] += 1
        self.report["changed", "tag", "tags", "made shorter, or without control characters"] += \
            sum(_fitted_tag(tag) != tag.strip() for tag in tags)
        tags = _fitted_tags(tags, None)
        if len(tags) > MAX_TAGS:
            self.report["changed", "memory", "memories", f"with more than {MAX_TAGS} tags "
                        f"(the first kept)"] += 1
        self.seen.add(_id_number(node_id))
        created, tags = created or _now(), tags[:MAX_TAGS]
        return Record(node_id, content, tags, list(links), f"{self.label} @{_said(content, tags)}",
                      created, created, 0)


def _id_number(node_id):
    """60 bits of a memory id as a number: a set of them takes half the memory of the ids."""
    return int(node_id[:8] + node_id[9:13] + node_id[15:18], 16) | 1


def _source_name(format_name, path):
    """The source label of an import's memories: the format and the file's or folder's path,
    the home folder's part as ~: two folders of one name are two sources."""
    if path == "-":
        return f"{format_name}: standard input"
    path, home = os.path.normpath(os.path.abspath(path)), os.path.expanduser("~")
    if os.path.dirname(home) != home and (path + os.sep).startswith(os.path.join(home, "")):
        path = "~" + path[len(home):]
    return f"{format_name}: {path}"


def _decoded(value):
    """The text of a column value read as bytes, or None when it is not UTF-8 text."""
    if not isinstance(value, bytes):  # NULL, or a number: text_factory makes text bytes
        return None if value is None else str(value)
    with contextlib.suppress(UnicodeDecodeError):
        return value.decode("utf-8")
    return None


def _split_tags(value):
    """mcp-memory-service's tags: comma-separated text, or a JSON array (older versions)."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if isinstance(value, str):
        return value.split(",")  # empty ones are left out as every tag is (_fitted_tags)
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def mcp_memory_service_records(path, maker):
    """The Records of mcp-memory-service's SQLite database (sqlite_vec.db) at `path`, read
    through a mode=ro URI (a connection of ours would checkpoint their log into their file),
    its `memories` table only (sqlite3 cannot load their vector extension, and need not);
    rows deleted or superseded there are skipped. Key: content_hash."""
    import pathlib
    maker.source("mcp-memory-service", path)
    uri = pathlib.Path(os.path.abspath(path)).as_uri() + "?mode=ro"  # file:///C:/... on Windows
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            db.text_factory = bytes  # not UTF-8 as it is: read as bytes, decoded one by one
            columns = {row[1].decode() for row in db.execute("PRAGMA table_info(memories)")}
            if not {"content_hash", "content"} <= columns:
                raise InvalidInput(f"{os.path.basename(path)} is a SQLite database, but not "
                                   f"mcp-memory-service's: it has no memories table with a "
                                   f"content_hash")
            wanted = ("content_hash", "content", "tags", "created_at", "created_at_iso",
                      "deleted_at", "superseded_by")
            cursor = db.execute("SELECT " + ", ".join(c if c in columns else "NULL"
                                                      for c in wanted) + " FROM memories")
            for key, content, tags, created, created_iso, deleted, newer in cursor:
                maker.report["memory", "memories"] += 1
                texts = [_decoded(v) for v in (key, content, tags)]
                if deleted is not None:
                    maker.skip("deleted there")
                elif newer:
                    maker.skip("replaced there by a newer version")
                elif None in texts[:2] or tags is not None and texts[2] is None:
                    maker.skip("with no content_hash or content, or text that is not UTF-8")
                else:
                    yield maker.record((texts[0],), texts[1], _split_tags(texts[2]),
                                       _foreign_time(created) or
                                       _foreign_time(_decoded(created_iso)))
    except sqlite3.Error as exc:
        raise InvalidInput(f"{os.path.basename(path)} cannot be read as mcp-memory-service's "
                           f"database: {exc}") from None


def _text_stream(binary):
    """The text of the binary stream `binary` (with peek): UTF-8, or UTF-16 after its BOM."""
    utf16 = binary.peek(2)[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    return io.TextIOWrapper(binary, encoding="utf-16" if utf16 else "utf-8-sig", newline="")


RECORD_MAX = 8 << 20  # characters of one JSON value that an import holds (a memory's text)
# Where a JSON value ends is found by these, in C, no character looked at more than twice
# (possessive, of atomic groups: see setup.py's JSON patterns): runs of text, whole strings
# and brackets holding no bracket; the rest of a string; a number, true, false or null.
_JSON_TEXT = r'[^"\[\]{}]++|"[^"\\]*+(?>\\.[^"\\]*+)*+"'
_JSON_RUN = re.compile(rf"(?>{_JSON_TEXT}|\{{(?>{_JSON_TEXT})*+\}}|\[(?>{_JSON_TEXT})*+\])*+",
                       re.S)
_JSON_STRING_REST = re.compile(r'[^"\\]*+(?>\\.[^"\\]*+)*+', re.S)
_JSON_SCALAR = re.compile(r"[^\s,:\]}]*+")


def _json_members(stream, wanted, keys=None):
    """(key, value) of each member named in `wanted` of the JSON objects in the text stream
    `stream`, read a piece at a time; an array gives (key, item) for each item. A value held
    has RECORD_MAX characters at most, but for an object, of which the fields `wanted[key]`
    names are then kept; what is not kept is skipped unheld. `keys` gets each key."""
    text, at, base = "", 0, 0  # base: where `text` starts in the stream

    def more():  # read on, dropping the text before `at`; False at the end
        nonlocal text, at, base
        try:
            chunk = stream.read(1 << 20)
        except UnicodeDecodeError:
            raise InvalidInput("the file is not UTF-8 text") from None
        text, at, base = text[at:] + chunk, 0, base + at
        return bool(chunk)

    def broken(message, where):
        return InvalidInput(f"the file is not JSON at character {base + where + 1:,}: {message}")

    def space():
        nonlocal at
        while (at := _JSON_SPACE.match(text, at).end()) == len(text) and more():
            pass
        return text[at:at + 1]

    def expect(marks):
        nonlocal at
        if (found := space()) not in marks or not found:
            raise broken(f"expected {' or '.join(repr(m) for m in marks)}", at)
        at += 1
        return found

    def end(hold):  # where the value at `at` ends; None for one held past RECORD_MAX
        nonlocal at
        i, depth, inside, scalar = at, 0, False, text[at:at + 1] not in ('"', "[", "{")
        while True:
            if scalar or inside or depth:
                i = (_JSON_SCALAR if scalar else _JSON_STRING_REST if inside else
                     _JSON_RUN).match(text, i).end()
            if i < len(text) and text[i] != "\\":  # a backslash there: what it escapes is next
                if scalar:
                    return i
                c, i = text[i], i + 1
                inside, depth = c == '"' and not inside, depth + (c in "[{") - (c in "]}")
                if not (depth or inside):
                    return i
            elif hold and i - at > RECORD_MAX:
                return None
            else:  # read on, dropping what was read of a value not held
                at, i = (at, i - at) if hold else (i, 0)
                if not more():  # the end: parsing says what is wrong with what is held
                    if scalar or hold:
                        return i
                    raise broken("it ends within a value", i)

    def value(what, kept=None):
        """The value at `at` (`what` names it; None: it is skipped, and None returned)."""
        nonlocal at
        space()
        with contextlib.suppress(json.JSONDecodeError, RecursionError):  # mostly whole
            found, stop = _DECODER.raw_decode(text, at)
            if stop < len(text) and (not what or stop - at <= RECORD_MAX):
                at = stop
                return found if what else None
        stop = end(bool(what))
        if not what:
            at = stop
            return None
        if stop is None or stop - at > RECORD_MAX:
            if kept is None or text[at] != "{":
                raise InvalidInput(f"{what} is too large to import: more than {RECORD_MAX:,} "
                                   f"characters")
            return {field: value(f'{what}\'s "{field}"') for field in fields()
                    if field in kept or value(None)}  # a field not kept is skipped
        try:
            found, at = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise broken(exc.msg, exc.pos) from None
        except RecursionError:
            raise broken("a value is nested too deeply", at) from None
        return found

    def fields():  # the keys of the object at `at`, each with `at` before its value
        after = "," if expect("{") and space() != "}" else expect("}")
        while after == ",":
            key = value("a key")
            if not isinstance(key, str):
                raise broken("a key must be a string", at)
            expect(":")
            yield key
            after = expect(",}")

    while space():
        for key in fields():
            if keys is not None:
                keys.add(key)
            if key not in wanted:
                value(None)
            elif space() != "[":
                yield key, value(f'"{key}"', wanted[key])
            else:
                after, n = "," if expect("[") and space() != "]" else expect("]"), 0
                while after == ",":
                    n += 1
                    yield key, value(f'item {n:,} of "{key}"', wanted[key])
                    after = expect(",]")


def _json_export_records(binary, path, maker):
    """The Records of mcp-memory-service's JSON export ({"export_metadata", "memories"}) in
    the binary stream `binary` of `path`, an item at a time. Key: content_hash."""
    keys = set()
    maker.source("mcp-memory-service", path)
    for _, item in _json_members(_text_stream(binary), {"memories": (
            "content_hash", "content", "tags", "created_at", "created_at_iso")}, keys):
        if not isinstance(item, dict):
            raise InvalidInput("the export's memories must be an array of objects")
        maker.report["memory", "memories"] += 1
        tags, content_hash = item.get("tags"), item.get("content_hash")
        if not isinstance(content_hash, str) or not isinstance(item.get("content"), str):
            maker.skip("without content_hash or content")
            continue
        yield maker.record((content_hash,), item["content"], _split_tags(tags),
                           _foreign_time(item.get("created_at")) or
                           _foreign_time(item.get("created_at_iso")))
    if "memories" not in keys:
        raise InvalidInput('the file has no "memories": it is not mcp-memory-service\'s export')


def openmemory_records(path, maker):
    """The Records of the zip OpenMemory's backup router wrote (routers/backup.py of mem0ai/mem0
    before ea2ee0758) at `path`: memories.json, whose memories name their app and categories
    by id; those active or paused. Key: its memory id."""
    import zipfile
    maker.source("openmemory", path)
    try:
        with zipfile.ZipFile(path) as archive:
            member = next((i for i in archive.infolist() if not i.is_dir() and
                           i.filename.rsplit("/", 1)[-1] == "memories.json"), None)
            if member is None:
                raise InvalidInput(f"{os.path.basename(path)} holds no memories.json: it is not "
                                   f"an OpenMemory export")
            # zipfile gives no more than the size the header says (then fails its CRC).
            if member.file_size > UNZIP_MAX:
                raise InvalidInput(f"memories.json would decompress to {member.file_size:,} "
                                   f"bytes, more than the {UNZIP_MAX:,} an import reads")

            def members():
                return _json_members(_text_stream(archive.open(member)), {
                    "apps": ("id", "name"), "categories": ("id", "name"), "memories": (
                        "id", "content", "state", "app_id", "category_ids", "created_at")}, keys)
            names, keys = {"apps": {}, "categories": {}}, set()  # id -> name
            later = False  # whether the memories came before the names (not as backup.py wrote)
            for key, value in members():
                if key in names and isinstance(value, dict) and isinstance(value.get("id"), str) \
                        and isinstance(value.get("name"), str):  # cut: a tag is no longer
                    names[key][value["id"]] = value["name"].strip()[:MAX_TAG_LENGTH + 1]
                elif key == "memories" and not names.keys() <= keys:
                    later = True
                elif key == "memories":
                    yield _openmemory_record(maker, value, names)
            for key, value in members() if later else ():
                if key == "memories":
                    yield _openmemory_record(maker, value, names)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError,
            NotImplementedError, RuntimeError) as exc:
        raise InvalidInput(f"{os.path.basename(path)} cannot be read as a zip: {exc}") from None


def _openmemory_record(maker, memory, names):
    """The Record of one memory of memories.json, or None if it is not kept."""
    if not isinstance(memory, dict):
        raise InvalidInput("memories.json's memories must be an array of objects")
    maker.report["memory", "memories"] += 1
    state = memory.get("state")
    if state not in ("active", "paused"):
        return maker.skip(f"{state} there" if state in ("archived", "deleted") else
                          "in no state it knows")
    if not isinstance(memory.get("id"), str) or not isinstance(memory.get("content"), str):
        return maker.skip("without id or content")
    categories, app = memory.get("category_ids"), memory.get("app_id")
    tags = [names["categories"].get(c) for c in categories
            if isinstance(c, str)] if isinstance(categories, list) else []
    tags.append(names["apps"].get(app) if isinstance(app, str) else None)
    return maker.record((memory["id"],), memory["content"], [t for t in tags if t],
                        _foreign_time(memory.get("created_at")))


def _files(folder, report):
    """(path, path relative to `folder` with /) of each file under `folder`, in order; hidden
    ones (.git, .obsidian) and a folder reached again through a link (a loop) skipped, counted."""
    seen, stack = set(), [(folder, "")]
    while stack:
        path, relative = stack.pop()
        try:
            status = os.stat(path)
            entries = sorted(os.scandir(path), key=lambda e: e.name, reverse=True)
        except OSError:
            report["skipped", "folder", "folders", "that could not be read"] += 1
            continue
        if (status.st_dev, status.st_ino) in seen:
            report["skipped", "folder", "folders", "reached again through a link"] += 1
            continue
        seen.add((status.st_dev, status.st_ino))
        files = []
        for entry in entries:
            if entry.name.startswith("."):
                report["skipped", "hidden file or folder", "hidden files and folders", ""] += 1
            elif os.path.isdir(entry.path):  # False, not OSError, for a link that loops
                stack.append((entry.path, relative + entry.name + "/"))
            elif os.path.isfile(entry.path):
                files.append((entry.path, relative + entry.name))
            else:
                report["skipped", "broken link or special file", "broken links and "
                       "special files", ""] += 1
        yield from reversed(files)


def _notes(folder, report, other, index=None):
    """(path relative to `folder`, front matter, the text after it, when it was created) of
    each markdown file under `folder` but `index`; the rest counted skipped as `other`."""
    for path, relative in _files(folder, report):
        if relative == index:
            continue
        if not relative.lower().endswith(".md"):
            report["skipped", *other, ""] += 1
        elif (text := _markdown(path, report)) is not None:
            fields, body = _front_matter(text)
            created = _foreign_time(_field_text(fields.get("created"))) or _mtime(path)
            yield relative, fields, body, created


def _markdown(path, report):
    """The text of the markdown file at `path` (UTF-8, or UTF-16 with its byte order mark),
    line breaks as \\n; None when it cannot be read or is not such text (counted)."""
    try:
        with open(path, "rb") as f:
            text = _text_stream(f).read()
    except OSError:
        report["skipped", "file", "files", "that could not be read"] += 1
        return None
    except UnicodeDecodeError:
        report["skipped", "file", "files", "not UTF-8 text"] += 1
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")


_FRONT_MATTER = re.compile(r"---[ \t]*\n(.*?\n)?---[ \t]*(?:\n|\Z)", re.S)
_YAML_KEY = re.compile(r"([^\s:#-][^:]*?):(?:[ \t]+(.*))?$")
_LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")


def _front_matter(text):
    """({field: value}, the text after it) of a markdown text with YAML front matter, or ({},
    text): plain and quoted values, lists (- item, or [a, b]), block texts (| and >) and one
    level of nested fields (metadata: with type: under it), which is what notes hold."""
    found = _FRONT_MATTER.match(text)
    if not found:
        return {}, text
    fields, key, parent, block = {}, None, None, None
    for line in [*(found.group(1) or "").split("\n"), "#"]:  # "#" at no indent ends a block
        indent = len(line) - len(line.lstrip())
        if block is not None:
            if not line.strip() or indent > block[1]:
                block[2].append(line.strip())
                continue
            owner, _, lines, folded = block
            owner[key] = (" " if folded else "\n").join(lines).strip()
            block = None
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = _LIST_ITEM.match(line) if line.lstrip()[:1] == "-" else None
        owner = fields[parent] if indent and isinstance(fields.get(parent), dict) else fields
        if item and key is not None:
            if not isinstance(owner.get(key), list):
                owner[key] = []
            owner[key].append(_yaml_value(item.group(1) or ""))
            continue
        pair = _YAML_KEY.match(line.strip())
        if not pair:
            continue
        if indent and fields.get(parent, 0) is None:
            fields[parent] = owner = {}
        elif indent and owner is fields:
            continue  # a line of a value this reading does not take apart
        elif not indent:
            parent, owner = pair.group(1).strip(), fields
        key, value = pair.group(1).strip(), (pair.group(2) or "").strip()
        if value and value[0] in "|>" and not value[1:].strip("+-0123456789"):
            block = (owner, indent, [], value[:1] == ">")
            owner[key] = ""
        else:
            owner[key] = _yaml_value(value) if value else None
    return fields, text[found.end():]


def _yaml_value(text, flow=True):
    """A YAML scalar or flow list (one level deep) as a string or a list of strings."""
    text = text.strip()
    if flow and text[:1] == "[" and text[-1:] == "]":
        return [v for v in (_yaml_value(p, False) for p in text[1:-1].split(",")) if v]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].replace("''", "'") if text[0] == "'" else text[1:-1]
    return re.sub(r"(?<!\s)\s+#.*", "", text)  # tried at the start of a run of spaces only


def _field_text(value):
    if isinstance(value, list):
        value = ", ".join(v for v in value if isinstance(v, str))
    return value.strip() or None if isinstance(value, str) else None


def _field_tags(value):
    """A front matter's tags (a list, or text of tags parted by commas), without #."""
    values = value if isinstance(value, list) else [value] if isinstance(value, str) else []
    return [t.strip().lstrip("#") for v in values if isinstance(v, str)
            for t in v.split(",") if t.strip().lstrip("#")]


def _mtime(path):
    with contextlib.suppress(OSError):
        return _foreign_time(os.stat(path).st_mtime)


_HEADING = re.compile(r" {0,3}#{1,6}(?:\s|$)")
_RULE = re.compile(r" {0,3}(?:(?:\*\s*){3,}|(?:_\s*){3,}|(?:-\s*){3,}|=+\s*)$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LINE = re.compile(r"^(?!\Z).*", re.M)  # lines one at a time: a list is many times the text's size


def _blocks(text):
    """(kind, text) of the blocks of a markdown text, in order: "item" (a list item, with
    the lines that go on from it), "paragraph", "quote" (> lines) and "code" (a fenced
    block, fences and all); headings and blank lines part them and are left out."""
    kind, lines, fence = None, [], None
    for line in (found.group() for found in _LINE.finditer(text)):
        if fence:
            lines.append(line)
            if line.strip().startswith(fence):
                yield "code", "\n".join(lines)
                kind, lines, fence = None, [], None
            continue
        opened = _FENCE.match(line)
        item = _LIST_ITEM.match(line)
        quote = line.lstrip().startswith(">")
        rule = _RULE.match(line)
        if lines and (opened or not line.strip() or _HEADING.match(line) or item or rule
                      or quote != (kind == "quote")):
            if not (rule and line.strip()[0] in "=-" and kind == "paragraph"):
                yield kind, (" " if kind != "quote" else "\n").join(lines)
            kind, lines = None, []  # else the paragraph was a heading, underlined
        if opened:
            kind, lines, fence = "code", [line], opened.group(1)
        elif item and not rule:
            kind, lines = "item", [item.group(1) or ""]
        elif line.strip() and not _HEADING.match(line) and not rule:
            kind = kind or ("quote" if quote else "paragraph")
            lines.append(line.strip().lstrip(">").strip() if quote else line.strip())
    if lines:
        yield kind, ("\n" if kind in ("code", "quote") else " ").join(lines)


# basic-memory's markdown/plugins.py, as of 0.23: a category is [text] but for a clock
# time and a task's mark; a relation's type is one word, or quoted.
_OBSERVATION = re.compile(r"\[([^\[\]()]+)\]\s+(.+)", re.S)
_CLOCK = re.compile(r"\d{1,3}:\d{2}(?::\d{2})?(?:[.,]\d{1,3})?"
                    r"(?:\s+-\s+\d{1,3}:\d{2}(?::\d{2})?(?:[.,]\d{1,3})?)?")
_WIKI_LINK = re.compile(r"\[\[([^\[\]]+)\]\]")
_LINKS_TO = re.compile(r"(?<!\s)\s+#bm:links_to\s*$")


def _note_parts(body):
    """([(category, text, context, tags)], [(relation type, target)]) of a note's text, as
    basic-memory's parser reads them: an observation is a list item or paragraph starting
    with [category] or holding a #tag (not a task); a relation a list item "type [[Target]]
    (context)", any other [[Target]] one of type links_to. Quoted blocks hold no observation."""
    observations, relations = [], []
    for kind, text in _blocks(body):
        if kind == "code":
            continue
        bare = _LINKS_TO.sub("", text.strip())
        explicit = _explicit_relation(bare) if kind == "item" and bare == text.strip() else None
        if explicit:
            relations.append(explicit)
        else:
            relations += (("links_to", t.strip()) for t in _WIKI_LINK.findall(bare) if t.strip())
        observation = _observation(bare) if kind != "quote" else None
        if observation:
            observations.append(observation)
    return observations, relations


def _explicit_relation(text):
    """(type, target) of the relation "type [[Target]] (context)", or None."""
    before, link, rest = text.partition("[[")
    target, closed, after = rest.partition("]]")
    before, target, after = before.strip(), target.strip(), after.strip()
    if not (link and closed and before and target):
        return None
    if len(before) > 1 and before[0] in "'\"" and before[-1] == before[0]:
        before = before[1:-1].strip()
    elif any(c.isspace() for c in before):
        return None  # a sentence holding a link (its links are links_to)
    # After the link, nothing, or a context: a ( that closes at the last character.
    depths = list(itertools.accumulate((c == "(") - (c == ")") for c in after))
    if after and not (after[0] == "(" and 0 in depths and depths.index(0) == len(after) - 1):
        return None
    return (before, target) if before else None


def _observation(text):
    """(category, text, context, #tags) of an observation, or None if `text` is none."""
    if text.startswith(("[ ]", "[x]", "[-]")) or len(text) >= 4 and (  # or a link alone
            text[:2] == "[[" and text[-2:] == "]]" or
            text[0] == "[" and text[-1] == ")" and "](" in text[1:-1]):
        return None
    found = _OBSERVATION.match(text)
    category = found.group(1).strip() if found else ""
    if found and (_CLOCK.fullmatch(category) or len(category) == 1 and (
            category in "xX" or not category.isalnum())):
        found, category = None, ""
    if not found and not any(part.startswith("#") for part in text.split()):
        return None
    content = found.group(2).strip() if found else re.sub(r"^\[\]\s+", "", text)
    context = None
    if content.endswith(")") and "(" in content:
        start = content.rfind("(")
        content, context = content[:start].strip(), content[start + 1:-1].strip() or None
    tags = [t for part in content.split() if part.startswith("#") for t in part.split("#") if t]
    return (category, content, context, tags) if content else None


def basic_memory_records(folder, maker):
    """The Records of basic-memory's notes under `folder`: an observation ("- [category] text
    #tag (context)") a memory "Title: text", tagged with the note's tags and its own, a note
    with none a memory of its text; a relation ("- type [[Target]]", [[links]] in the text) a
    memory linked as the official import links one. Key: permalink, category and text."""
    report = maker.report
    maker.source("basic-memory", folder)
    # [(permalink, title, created, reach, relations)]; name -> note; permalink -> suffixes
    notes, named, taken = [], {}, {}
    for relative, fields, body, created in _notes(folder, report, ("attachment", "attachments")):
        report["note", "notes"] += 1
        stem = relative[:-3]
        title = _field_text(fields.get("title")) or stem.rsplit("/", 1)[-1]
        permalink = _field_text(fields.get("permalink")) or re.sub(r"[\s_]+", "-", stem.lower())
        if permalink in taken:  # another note's: made unique, as basic-memory makes it
            report["changed", "note", "notes", "with another's permalink (given one of its "
                   "own, as basic-memory gives it)"] += 1
            base = permalink
            while permalink in taken:
                taken[base] += 1
                permalink = f"{base}-{taken[base]}"
        taken[permalink] = 0
        tags = _field_tags(fields.get("tags"))
        observations, relations = _note_parts(body)
        report["observation", "observations"] += len(observations)
        hub = len(observations) > OFFICIAL_LINKED
        own = None
        if hub or not observations:
            # Its text, but for a first heading that only repeats the title.
            body = re.sub(r"\A\s*#[ \t]+(\S.*)\n", lambda m: "" if m.group(1).strip() == title
                          else m.group(0), body)
            own = maker.record((permalink,), f"{title}: {body.strip()}" if body.strip() and
                               not hub else title, tags, created)
            yield own  # None if skipped (_SpooledRecords drops it)
        reach = {}
        for category, content, context, own_tags in observations:
            record = maker.record((permalink, category, content), f"{title}: {content}" + (
                f" ({context})" if context else ""), tags + own_tags, created,
                [own.id] if own else ())
            if record:
                reach[record.id] = None
                yield record
        note = (permalink, title, created, [own.id] if own else list(reach), relations)
        notes.append(note)
        for name in (title, permalink, permalink.split("/", 1)[-1], stem, stem.rsplit("/")[-1]):
            named.setdefault(name.casefold(), note)
    for permalink, title, created, reach, relations in notes:
        for kind, target in relations:
            other = named.get(target.casefold()) or named.get(
                re.sub(r"[\s_]+", "-", target.casefold()))
            report["relation", "relations"] += 1
            if other is None:
                report["skipped", "relation", "relations", "to a note not in the folder"] += 1
                continue
            yield maker.record((permalink, kind, other[0]),
                               f"{title} {kind.replace('_', ' ')} {other[1]}", [kind],
                               created, dict.fromkeys(reach + other[3]))


def claude_code_folders(path):
    """The Claude Code memory folders at `path`: itself when it holds MEMORY.md, its memory
    folder (a project's), or those of the projects under it (~/.claude/projects, ~/.claude)."""
    import glob
    for pattern in ("", "memory", os.path.join("*", "memory"),
                    os.path.join("projects", "*", "memory")):
        found = [p for p in glob.glob(os.path.join(glob.escape(path), pattern))
                 if os.path.isfile(os.path.join(p, "MEMORY.md"))]
        if found:
            return sorted(found)
    return []


def _claude_project(memory_folder):
    """A project's name from its folder in ~/.claude/projects, which is the project's path
    with each character other than a letter or digit made "-": without the home folder's
    part (/home/kim/, /Users/kim/, C:\\Users\\kim\\), so that it holds no absolute path."""
    slug = os.path.basename(os.path.dirname(os.path.abspath(memory_folder)))
    home = re.sub(r"[^A-Za-z0-9]", "-", os.path.expanduser("~"))
    if slug == home:
        return "home"
    if slug.startswith(home + "-"):
        return slug[len(home) + 1:]
    return re.sub(r"^(?:[A-Za-z]--|-)(?:Users|home)-[^-]+-(?=.)|^-root-(?=.)", "", slug)


_MARKDOWN_LINK = re.compile(  # no bracket within: each character is tried by one link only
    r"\[([^\[\]]+)\]\(<?([^()<>\[\]]+?\.md)>?\)|\[\[([^\[\]|]+)(?:\|[^\[\]]*)?\]\]")


def claude_code_records(path, maker):
    """The Records of the Claude Code memory folders at `path` (topic files with front matter;
    MEMORY.md read for its links' titles), one a statement. Key: project, file, statement."""
    import urllib.parse
    report = maker.report
    for folder in claude_code_folders(path) or [path]:
        project = _claude_project(folder)
        maker.source("claude-code", folder, f"claude-code: {project}")
        titles = {}  # file name -> the title MEMORY.md's link gives it
        index = _markdown(os.path.join(folder, "MEMORY.md"), collections.Counter())
        for text, target, wiki in _MARKDOWN_LINK.findall(index or ""):
            name = urllib.parse.unquote(target or wiki + ".md").strip().lstrip("./")
            titles.setdefault(name, text.strip() or name[:-3])
        found = set()
        for relative, fields, body, created in _notes(folder, report, (
                "file other than a topic file", "files other than topic files"), "MEMORY.md"):
            found.add(relative)
            report["topic file", "topic files"] += 1
            metadata = fields.get("metadata") if isinstance(fields.get("metadata"), dict) else {}
            kind = _field_text(fields.get("type")) or _field_text(metadata.get("type"))
            title = _field_text(fields.get("name")) or titles.get(relative) or relative[:-3]
            statements = [s for kind_of, s in _blocks(body) if s.strip()] or \
                [_field_text(fields.get("description")) or ""]
            first = None
            for statement in statements:
                record = maker.record((project, relative, statement.strip()),
                                      f"{title}: {statement.strip()}", [kind or "", project],
                                      created, [first] if first else ())
                if record:
                    first = first or record.id
                    yield record
        report["skipped", "link of MEMORY.md", "links of MEMORY.md", "to a file not in the "
               "folder"] += len(titles.keys() - found)


def gemini_records(path, maker):
    """The Records of the "## Gemini Added Memories" items of the GEMINI.md at or in `path`.
    Key: the project, the file's name and the item."""
    file = os.path.join(path, "GEMINI.md") if os.path.isdir(path) else path
    text = _markdown(file, maker.report)
    if text is None:
        raise InvalidInput(f"{os.path.basename(file)} cannot be read as UTF-8 text")
    section = _GEMINI_SECTION.search(text)
    if not section:
        raise InvalidInput(f'{os.path.basename(file)} has no "## Gemini Added Memories" '
                           f'section: it holds nothing that Gemini CLI\'s save_memory saved')
    folder = os.path.basename(os.path.dirname(os.path.abspath(file)))
    project = "global" if folder == ".gemini" else folder
    maker.source("gemini", file)
    created = _mtime(file)
    for kind, item in _blocks(section.group(1)):
        if kind == "item" and item.strip():
            maker.report["memory", "memories"] += 1
            yield maker.record((project, os.path.basename(file), item.strip()), item,
                               ["gemini"] + [project] * (project != "global"), created)


_GEMINI_SECTION = re.compile(r"^## Gemini Added Memories[ \t]*\n(.*?)(?=^#{1,2}\s|\Z)",
                             re.S | re.M)


FORMATS = {  # --format NAME: what it reads
    "flood": "Flood Memory's export",
    "official": "the official memory server's memory.jsonl",
    "mcp-memory-service": "mcp-memory-service's sqlite_vec.db, or its JSON export",
    "basic-memory": "a folder of basic-memory's notes",
    "openmemory": "OpenMemory's export zip",
    "claude-code": "Claude Code's memory folders",
    "gemini": "Gemini CLI's GEMINI.md",
}
_EXPORT_START = re.compile(rb'(?:\xef\xbb\xbf)?\s*\{\s*"(?:export_metadata|memories)"\s*:')


def _folder_format(path):
    """The format of the folder `path`, told from what it holds."""
    if claude_code_folders(path):
        return "claude-code"
    if os.path.isfile(os.path.join(path, "sqlite_vec.db")):
        return "mcp-memory-service"
    if os.path.isfile(os.path.join(path, "GEMINI.md")):
        return "gemini"
    if any({"title", "type", "permalink"} <= fields.keys()  # basic-memory's front matter
           for _, fields, _, _ in _notes(path, collections.Counter(), ("file", "files"))):
        return "basic-memory"
    raise InvalidInput(f"{os.path.basename(os.path.abspath(path))} is a folder of no kind "
                       f"import reads: expected a folder of basic-memory's notes (front "
                       f"matter with title, type and permalink), a Claude Code memory folder "
                       f"(with MEMORY.md), or one holding mcp-memory-service's sqlite_vec.db "
                       f"or Gemini CLI's GEMINI.md")


def _import_source(args, stack):
    """(format, what it is, its Records, the _RecordMaker whose report counts what was held,
    skipped and changed) of what `store.py import` reads: its --format, else told."""
    path, format_name, maker = args.file, args.format, _RecordMaker()
    readers = {"basic-memory": basic_memory_records, "claude-code": claude_code_records,
               "gemini": gemini_records, "openmemory": openmemory_records}  # of a path
    if path != "-" and os.path.isdir(path):
        format_name = format_name or _folder_format(path)
        if format_name in ("basic-memory", "claude-code", "gemini"):
            return format_name, FORMATS[format_name], readers[format_name](path, maker), maker
        if format_name != "mcp-memory-service":
            raise InvalidInput(f"{args.file} is a folder: --format {format_name} reads a file")
        path = os.path.join(path, "sqlite_vec.db")
    if path == "-" and sys.stdin is None:
        raise StoreError("standard input is closed: give the FILE to import")
    source = stack.enter_context(sys.stdin.buffer if path == "-" else open(path, "rb"))
    head = source.peek(512)[:512]
    database, archive = head.startswith(b"SQLite format 3\0"), head.startswith(b"PK")
    if head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):  # as PowerShell writes text
        head = head[:len(head) // 2 * 2].decode("utf-16", "replace").encode()
    if format_name in (None, "mcp-memory-service") and (database or _EXPORT_START.match(head)):
        format_name = "mcp-memory-service"
    elif format_name is None and archive:
        format_name = "openmemory"
    elif format_name is None and path.lower().endswith((".md", ".markdown")):
        format_name = "gemini"
    if path == "-" and (database or archive or format_name in ("openmemory", "gemini")):
        raise InvalidInput("a database, a zip or a GEMINI.md cannot be read from standard "
                           "input: give its path")
    name, report = "standard input" if path == "-" else os.path.basename(path), maker.report
    if format_name == "mcp-memory-service" and database:
        return (format_name, "mcp-memory-service's database",
                mcp_memory_service_records(path, maker), maker)
    if format_name == "mcp-memory-service":
        return (format_name, "mcp-memory-service's export",
                _json_export_records(source, path, maker), maker)
    if format_name in ("basic-memory", "claude-code"):
        raise InvalidInput(f"--format {format_name} reads a folder, and {args.file} is a file")
    if format_name in ("openmemory", "gemini"):
        return format_name, FORMATS[format_name], readers[format_name](path, maker), maker
    try:  # a file that is none of the formats fails here, at its first value
        graph, entries = read_entries(utf8_lines(source))
        first = next(entries, None)
        if format_name is None and first and not graph and not is_official(first[1]) and \
                not (isinstance(first[1], dict) and {"id", "content"} & first[1].keys()):
            _record(first[1], 1)  # not a memory: says why
    except InvalidInput as exc:
        raise InvalidInput(f"{exc}: expected {'; '.join(FORMATS.values())}"
                           if format_name is None else exc)
    entries = itertools.chain([first] if first else [], entries)
    if format_name == "official" or format_name is None and (
            graph or first and is_official(first[1])):
        return "official", FORMATS["official"], official_records(entries, name, report), maker
    return "flood", FORMATS["flood"], _checked(value for _, value in entries), maker


def _memories(n):
    return f"{n:,} memory" if n == 1 else f"{n:,} memories"


class _SpooledRecords:
    """An import's checked `records` (None dropped) kept on disk in the binary file `file`,
    not in memory, in marshal's form (faster to read than JSON), and read back once."""

    def __init__(self, records, file):
        import marshal
        self.file, self.n, self.loads = file, 0, marshal.loads
        self.first = []  # the first three, for samples
        for self.n, record in enumerate(filter(None, records), 1):
            data = marshal.dumps(tuple(record))
            if self.n <= 3:
                self.first.append(record)
            try:
                file.write(len(data).to_bytes(4, "little") + data)
            except OSError as exc:
                raise StoreError(f"cannot write a temporary file: {exc.strerror}") from exc

    def __iter__(self):
        self.file.seek(0)
        read = self.file.read
        for _ in range(self.n):
            yield Record(*self.loads(read(int.from_bytes(read(4), "little"))))


def _export_to(store, target):
    """Export to a file, written beside it and renamed into place once complete."""
    with store.written_beside(target, "the export") as (_, partial), \
            open(partial, "w", encoding="utf-8", newline="\n") as out:
        return export(store, out)


def _parser():
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # in one line
            self.exit(2, f"flood-memory: {self.prog.removeprefix('store.py ')}: {message} (see "
                         f"{self.prog} --help)\n")

    parser = Parser(prog="store.py", description=(
        "Your memories, from the terminal: look through them, correct them, forget them, and "
        "copy them. The database is memory.db in $FLOOD_MEMORY_DIR (default ~/flood/memory); "
        "every command is safe while servers run, and looking is not an access."))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = commands.choices  # for a mistake found after a command's own parse

    flags = {"json": "print JSON, for scripts",
             "yes": "go ahead without asking (needed off a terminal: a script, Git Bash)"}

    def command(name, about, *options):
        sub = commands.add_parser(name, help=about, description=about)
        for option in options:
            sub.add_argument(f"--{option}", action="store_true", help=flags[option])
        return sub

    def file_name(text):
        if not text.strip():
            raise argparse.ArgumentTypeError("the file name is empty")
        return text

    def filters(sub, limit):
        sub.add_argument("--tag", action="append", default=[], metavar="T",
                         help="only memories carrying T (whatever its case); may be repeated")
        sub.add_argument("--limit", type=int, default=limit, metavar="N",
                         help=f"at most N memories (default {limit})")

    sub = command("list", "the newest memories, one a line", "json")
    filters(sub, 20)
    sub.add_argument("--since", metavar="D", help="created at or after D (2026-11-23, ...)")
    sub.add_argument("--until", metavar="D", help="created before D")
    sub = command("search", "memories matching words, ranked as recall ranks them", "json")
    sub.add_argument("words", nargs="+", metavar="WORDS")
    filters(sub, 10)
    sub = command("show", "one memory, whole, with the memories it links to", "json")
    sub.add_argument("id", metavar="ID", help="its id, or its first 4 characters or more")
    sub = command("edit", "change a memory: its content in your editor ($VISUAL or $EDITOR), "
                          "or what the options give")
    sub.add_argument("id", metavar="ID")
    sub.add_argument("--content", metavar="TEXT", help="the new content")
    tags = sub.add_mutually_exclusive_group()
    tags.add_argument("--tag", action="append", metavar="T",
                      help="its tags become the --tag options given")
    tags.add_argument("--no-tags", action="store_true", help="take every tag away")
    sub = command("forget", "delete memories, and every link to them", "yes")
    sub.add_argument("ids", nargs="+", metavar="ID")
    command("tags", "every tag, with how many memories carry it, most used first", "json")
    command("stats", "how many memories, links and tags; the database's path and size", "json")
    sub = command("check", "check the database and its indexes (reads every memory); "
                           "exit status 0 when all is well")
    sub.add_argument("--repair", action="store_true",
                     help="then make the indexes, statistics and links right again")
    sub = command("export", "every memory as a JSON line, oldest first, keys in a fixed order")
    sub.add_argument("file", nargs="?", default="-", metavar="FILE", type=file_name,
                     help="where to write them (standard output without it, or with -)")
    sub = command("import", "load memories from an export, the official memory server's "
                            "memory.jsonl or another memory server's data (see --format); all "
                            "of it is read first, and what is stored already is skipped")
    sub.add_argument("file", metavar="PATH", type=file_name,
                     help="the file or folder (- reads standard input)")
    sub.add_argument("--format", choices=tuple(FORMATS),
                     help="its format (told from its content otherwise): " + "; ".join(
                         f"{name}: {what}" for name, what in FORMATS.items()))
    sub.add_argument("--dry-run", action="store_true",
                     help="say what it holds, with three samples, and write nothing")
    sub.add_argument("--update", action="store_true",
                     help="memories stored already that the file gives otherwise take its "
                          "content and tags (skipped otherwise); another memory server's "
                          "data updates what changed there since, unless changed here")
    sub = command("backup", "copy the database, consistently, while servers keep writing")
    sub.add_argument("file", metavar="FILE", type=file_name)
    sub = command("restore", "replace every memory with those of a backup, checked first; "
                             "what it replaces is kept as a copy in the data directory", "yes")
    sub.add_argument("file", metavar="FILE", type=file_name)
    return parser


def _json_out(value):
    """`value` as JSON for standard output: characters as they are where its encoding holds
    them all, else \\uXXXX escapes (a redirect on Windows writes in the ANSI code page)."""
    text = json.dumps(value, ensure_ascii=False, indent=1)
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return json.dumps(value, indent=1)
    return text


def _say(text=""):
    print(text, file=sys.stderr)


def _asked(question, undone):
    """Whether the person at the terminal answers yes to `question` (on standard error); off
    a terminal (a script, Git Bash's mintty), InvalidInput: nothing was `undone`, say --yes."""
    if sys.stdin is None or not sys.stdin.isatty():
        raise InvalidInput(f"standard input is not a terminal, so nobody can be asked: "
                           f"nothing was {undone}; give --yes to go ahead without asking")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _one_id(store, given):
    """The id of the one memory `given` (an id or its start) names, else StoreError saying why."""
    found = store.resolve(given)
    if not found:
        raise NotFound(f"no memory's id is or starts with {given.strip()!r}")
    if len(found) > 1:
        more = " and more" if len(found) > 10 else ""
        raise InvalidInput(f"{given.strip()!r} starts the ids of several memories: "
                           f"{', '.join(found[:10])}{more}; give more of it")
    return found[0]


# Characters that a terminal obeys rather than shows (escape sequences can retitle it, hide
# lines or set the clipboard), and those that reverse the text's direction.
_UNSEEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(text):
    return _UNSEEN.sub(lambda m: ascii(m.group())[1:-1], text)


def _width():
    return max(60, min(200, shutil.get_terminal_size((120, 24)).columns))


def _one_line(text, width, head=""):
    """`head` and `text` in one line of at most `width` characters, as a terminal shows it."""
    text = _visible(head + " ".join(text.split()))
    return text if len(text) <= width else text[:width - 3] + "..."


def _line(short, node, width):
    """A memory in one line of at most `width` characters."""
    tags = f" [{', '.join(node['tags'])}]" if node["tags"] else ""
    return _one_line(node["content"], width, f"{short}  {node['created_at'][:10]}{tags}  ")


def _list(store, args):
    """list and search: a line a memory (or JSON), or what to try when none matches."""
    searched = {}
    nodes = store.newest(args.tag, args.since, args.until, args.limit) if args.command == \
        "list" else store.search(" ".join(args.words), args.tag, args.limit, count=False,
                                 report=searched)
    if searched.get("cut"):
        _say(f"flood-memory: search: only the first {MAX_QUERY_WORDS} words were searched for")
    if args.json:
        print(_json_out(nodes))
        return
    shorts, width = store.short_ids([n["id"] for n in nodes]), _width()
    for node in nodes:
        print(_line(shorts[node["id"]], node, width))
    if nodes:
        return
    _say("flood-memory: no memory matches")
    for tag in store.nothing_found(args.tag)["tags"]:
        if not tag["memories"]:
            closest = f"; the closest tags are {', '.join(tag['closest'])}" \
                if tag["closest"] else ""
            _say(_visible(f"flood-memory: no memory carries the tag {tag['tag']}{closest}"))


def _forgotten_meanwhile(node_id):
    return f"{node_id} was forgotten meanwhile (by a server or another command)"


def _show(store, args):
    node_id = _one_id(store, args.id)
    node = store.peek([node_id]).get(node_id)
    if node is None:
        raise NotFound(_forgotten_meanwhile(node_id))
    linked = store.peek(node["links"][:50])
    if args.json:
        print(_json_out(dict(node, linked={i: linked[i]["content"][:100] for i in linked})))
        return
    accesses = node["access_count"]
    print(f"id:            {node['id']}")
    print(f"created:       {node['created_at']}")
    print(f"last accessed: {node['last_accessed']} ({accesses:,} "
          f"access{'' if accesses == 1 else 'es'})")
    print(_visible(f"tags:          {', '.join(node['tags']) or '(none)'}"))
    print(_visible(f"source:        {node['source'] or '(none)'}"))
    print(f"links:         {len(node['links']):,}")
    shorts, width = store.short_ids(list(linked)), _width()
    for target in node["links"][:50]:
        if target in linked:
            print(_line("  " + shorts[target], linked[target], width))
    if len(node["links"]) > 50:
        print(f"  ... and {len(node['links']) - 50:,} more ({store_py_command()} show --json "
              f"ID lists them all)")
    print("\n" + _visible(node["content"]))  # _visible keeps line breaks


def split_command(text, system=None):
    """The words of the command line `text` (an EDITOR) as a POSIX shell reads it, or on
    Windows (`system`, os.name, "nt") as CommandLineToArgvW: "" inside quotes is a quote,
    backslashes literal but before a quote. ValueError for a quote left open."""
    if (system or os.name) != "nt":
        import shlex
        return shlex.split(text)
    words, word, quoted = [], None, False  # word: None between words
    tokens = re.finditer(r'(\\*)"|\\+|[ \t]|[^\\" \t]+', text)
    for token in tokens:
        slashes = token.group(1)
        if token.group() in (" ", "\t") and not quoted:
            if word is not None:
                words.append(word)
            word = None
        elif slashes is None:
            word = (word or "") + token.group()
        else:
            # Before a quote, a pair of backslashes is one, and one left over makes the
            # quote a character rather than a delimiter.
            word = (word or "") + "\\" * (len(slashes) // 2)
            if len(slashes) % 2:
                word += '"'
            elif quoted and text.startswith('"', token.end()):  # "" inside quotes: a quote
                word += '"'
                next(tokens)
            else:
                quoted = not quoted
    if quoted:
        raise ValueError("No closing quotation")
    return words + ([] if word is None else [word])


# The editors tried, in order, when neither VISUAL nor EDITOR is set, as git does: Debian's
# choice of the system's editor, then two that almost every Unix has.
SYSTEM_EDITORS = ("editor", "nano", "vi")


def editor_command(environ, system=None, which=shutil.which):
    """The editor to run, as words, chosen as git chooses: VISUAL, EDITOR, else Notepad on
    Windows (`system`, os.name, "nt") or the first of SYSTEM_EDITORS; looked up on `environ`'s
    PATH with `which`, as a shell would (PATHEXT finds VS Code's code.cmd). InvalidInput if
    the setting is not a command, or there is no editor."""
    system = system or os.name
    path = environ.get("PATH", os.defpath)
    setting = (environ.get("VISUAL") or "").strip() or (environ.get("EDITOR") or "").strip()
    try:
        words = split_command(setting, system)
    except ValueError as exc:
        raise InvalidInput(f"cannot read the editor command {setting!r} ({exc}); set VISUAL "
                           f"or EDITOR to a command") from None
    if not words:
        words = [n for n in (("notepad",) if system == "nt" else SYSTEM_EDITORS)
                 if which(n, path=path)][:1]
    if not words and system == "nt":
        raise InvalidInput("no editor is set, and Notepad is not on PATH: set EDITOR (in "
                           "PowerShell: $env:EDITOR = 'notepad'; in cmd.exe: set "
                           "EDITOR=notepad), or give the new text with --content")
    if not words:
        raise InvalidInput(f"no editor is set, and none of {', '.join(SYSTEM_EDITORS)} is on "
                           f"PATH: set VISUAL or EDITOR (for example export EDITOR=nano), or "
                           f"give the new text with --content")
    return [which(words[0], path=path) or words[0], *words[1:]]


def _edit(store, args):
    node_id = _one_id(store, args.id)
    before = store.get(node_id)["content"]
    if args.content is not None or args.tag is not None or args.no_tags:
        tags = [] if args.no_tags else args.tag
        if args.content in (None, before) and tags is None:
            _say("flood-memory: edit: the content is unchanged; nothing was saved")
            return
        store.update(node_id, content=args.content, tags=tags)
        _say(f"flood-memory: edit: saved {node_id}")
        return
    import subprocess
    command = editor_command(args.environ)
    handle, path = tempfile.mkstemp(prefix="flood-memory-", suffix=".txt")
    kept = False  # whether the file stays, holding what the person wrote
    try:
        with open(handle, "w", encoding="utf-8", newline="") as f:
            f.write(before)
        try:
            done = subprocess.run([*command, path])
        except OSError as exc:
            raise StoreError(f"cannot run the editor {command[0]}: {exc.strerror}; set VISUAL "
                             f"or EDITOR to one that is installed") from None
        if done.returncode:
            raise StoreError(f"the editor ({command[0]}) exited with status {done.returncode}; "
                             f"nothing was saved")
        try:
            with open(path, encoding="utf-8", newline="") as f:
                after = f.read()
        except FileNotFoundError:
            raise StoreError(f"the editor removed {path}; nothing was saved") from None
        except UnicodeDecodeError:
            kept = True
            raise StoreError(f"the editor saved text that is not UTF-8; nothing was saved "
                             f"(what it saved is in {path})") from None
        end = "\r\n" if after.endswith("\r\n") else "\n"  # as most editors close a file
        if after.endswith(end) and not before.endswith(end):
            after = after[:-len(end)]
        if after == before:
            _say("flood-memory: edit: the content is unchanged; nothing was saved")
        elif not after.strip():
            _say(f"flood-memory: edit: the content was emptied; nothing was saved "
                 f"({store_py_command()} forget ID deletes a memory)")
        else:
            kept = True
            try:
                if store.get(node_id)["content"] != before:
                    raise StoreError(f"{node_id} was changed meanwhile (by a server or another "
                                     f"command): run the edit again")
                store.update(node_id, content=after)
            except StoreError as exc:
                said = _forgotten_meanwhile(node_id) if isinstance(exc, NotFound) else exc
                raise type(exc)(f"{said}; nothing was saved, and your text is in {path}") from None
            kept = False
            _say(f"flood-memory: edit: saved {node_id}")
    finally:
        if not kept:
            with contextlib.suppress(OSError):
                os.remove(path)


def _forget(store, args):
    ids = list(dict.fromkeys(_one_id(store, given) for given in args.ids))
    nodes = store.peek(ids)
    for node_id in ids:
        if node_id not in nodes:
            _say(f"flood-memory: forget: {_forgotten_meanwhile(node_id)}")
    ids = [node_id for node_id in ids if node_id in nodes]
    if not ids:
        return
    shorts, width = store.short_ids(ids), _width()
    for node_id in ids:
        _say(_line(shorts[node_id], nodes[node_id], width))
    if not args.yes and not _asked(f"Forget {_memories(len(ids))}, and every link to "
                                   f"{'it' if len(ids) == 1 else 'them'}?", "forgotten"):
        _say("flood-memory: forget: nothing was forgotten")
        return 1
    gone = set()
    for node_id in ids:
        try:
            store.delete(node_id)
        except NotFound:
            _say(f"flood-memory: forget: {_forgotten_meanwhile(node_id)}")
        else:
            links = sum(1 for t in nodes[node_id]["links"] if t not in gone)  # each link once
            _say(f"flood-memory: forgot {node_id}" +
                 (f" and its {links:,} link{'s' if links > 1 else ''}" if links else ""))
        gone.add(node_id)


def _check(store, args):
    problems = store.check()
    if problems and args.repair:
        store.repair()
        _say(f"flood-memory: check: repaired what could be; it found: {'; '.join(problems)}")
        problems = store.check()
    if not problems:
        print("ok")
        return 0
    for problem in problems:
        print(f"problem: {problem}")
    if not args.repair:
        print(f"Run: {store_py_command()} check --repair (it makes the indexes again, mends "
              f"the tags, the links and rows no tool would write; the rest says what to do)")
    elif any(p.startswith("SQLite's integrity check") for p in problems):
        print(f"The database file is damaged: restore it from a backup ({store_py_command()} "
              f"restore FILE), or ask SQLite to salvage it (sqlite3 memory.db .recover).")
    return 1


def _restore(store, args):
    def confirm(count):  # once the backup has passed its checks
        return args.yes or _asked(
            f"Replace all {_memories(store.count())} with the {_memories(count)} of "
            f"{args.file}? A copy of what is replaced is kept in {args.directory}.", "restored")

    done = store.restore(args.file, confirm)
    if done is None:
        _say("flood-memory: restore: nothing was restored")
        return 1
    n, kept = done
    _say(f"flood-memory: restored {_memories(n)} from {args.file}; what it replaced is in {kept}")


_READ_IN = {"official": "the file", "basic-memory": "the folder", "claude-code": "the folders"}


def _say_what_was_read(format_name, kind, records, report):
    """Say what an import read: its kind, memories, three samples and what `report` counts as
    held (singular, plural) or as (what: "skipped", "changed"..., singular, plural, why)."""
    _say(f"flood-memory: found {kind}: {_memories(records.n)}" +
         (", such as:" if records.first else ""))
    for record in records.first:
        _say(_one_line(record.content, _width() - 2, "  "))
    if format_name == "flood":
        return
    said = {"held": [], "skipped": [], "changed": [], "kept as text only": []}
    for key, n in report.items():
        what, one, many, why = key if len(key) == 4 else ("held", *key, "")
        if n or what == "held":
            said[what].append(f"{n:,} {one if n == 1 else many}" + (f" {why}" if why else ""))
    _say(f"flood-memory: {_READ_IN.get(format_name, 'it')} held "
         f"{', '.join(said.pop('held')) or 'nothing'}" + "".join(
        f"; {what}: {'; '.join(items)}" for what, items in said.items() if items))


def _import(store, args):
    peer, dry = args.peer, args.dry_run  # another memory server's data; say what it would do
    done = store.load(args.records, checked=True, update=args.update or peer and "changed",
                      dry_run=dry)
    differ, kept, left = done["differ"], done["kept"], "would be left" if dry else "left"
    _say(f"flood-memory: {'would import' if dry else 'imported'} {_memories(done['loaded'])}, "
         f"{'skip' if dry else 'skipped'} {done['skipped']:,} stored already" +
         ("" if done["loaded"] or differ else ": nothing new"))
    if differ and (args.update or peer):
        _say(f"flood-memory: {_memories(len(differ))} stored already "
             f"{'would take' if dry else 'took'} the {'source' if peer else 'file'}'s content "
             f"and tags")
    _listed(store, [] if args.update or peer else differ, f"{_memories(len(differ))} stored "
            f"already differ in the file, {left} as they are: import it again with --update "
            f"to apply the file's content and tags, or change them one by one with "
            f"{store_py_command()} edit ID:")
    _listed(store, kept, f"{_memories(len(kept))} stored already, changed here since the "
            f"source gave them, {left} as they are (--update takes the source's):")
    _listed(store, done["unsaid"], f"{_memories(len(done['unsaid']))} stored already, imported "
            f"before Flood Memory kept what the source said, {left} as they are (--update takes "
            f"the source's):")
    if peer:  # what earlier imports of these sources stored that they hold no more is kept
        labels, seen = args.maker.labels, args.maker.seen
        gone = [i for i in store.ids_from(labels) if _id_number(i) not in seen]
        _listed(store, gone, f"{_memories(len(gone))} imported before from "
                f"{', '.join(sorted(labels))} {'is' if len(gone) == 1 else 'are'} no "
                f"longer there; kept (forget with {store_py_command()} forget ID):")
    if dry:
        _say("flood-memory: a dry run: nothing was written")


def _listed(store, ids, title):
    """Say `title`, then the first ten of the memories `ids`, by short id and text."""
    if not ids:
        return
    shown = store.peek(ids[:10])
    shorts = store.short_ids(list(shown))
    _say(f"flood-memory: {title}")
    for node_id, node in shown.items():
        _say(_one_line(node["content"], _width(), f"  {shorts[node_id]:<10}  "))
    if len(ids) > len(shown):
        _say(f"  and {len(ids) - len(shown):,} more")


def _tag_list(store, args):
    counts = store.tag_counts()
    if args.json:
        print(_json_out([{"tag": t, "memories": n} for t, n in counts]))
        return
    for tag, n in counts:
        print(_visible(f"{n:>8,}  {tag}"))
    if not counts:
        _say("flood-memory: no memory carries a tag")


def _stats(store, args):
    stats = store.stats()
    print(json.dumps(stats, indent=1) if args.json else "\n".join(
        f"{k + ':':<10} {v:,}" if isinstance(v, int) else
        f"{k + ':':<10} {'(none)' if v is None else v}" for k, v in stats.items()))


def _export(store, args):
    if args.file != "-":
        n = _export_to(store, args.file)
        _say(f"flood-memory: exported {_memories(n)} to {args.file}")
        return
    if sys.stdout is None:
        raise StoreError("standard output is closed: give a FILE to export to")
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
    n = export(store, out)
    out.flush()
    _say(f"flood-memory: exported {_memories(n)}")


def _backup(store, args):
    _say(f"flood-memory: backed up {_memories(store.backup(args.file))} to {args.file}")


# What each command does once the store is open: (store, args) -> exit status (None: 0).
COMMANDS = {"list": _list, "search": _list, "show": _show, "edit": _edit, "forget": _forget,
            "tags": _tag_list, "stats": _stats, "check": _check, "export": _export,
            "import": _import, "backup": _backup, "restore": _restore}
PRINTING = ("list", "search", "show", "tags", "stats", "check")  # text to standard output


def main(argv=None, environ=None):
    parser = _parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra:  # said by the command's parser, which names the command and its --help
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    environ = os.environ if environ is None else environ
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="flood-memory: %(levelname)s: %(message)s")
    command, failed, args.environ = args.command, "read", environ
    if command in PRINTING and hasattr(sys.stdout, "reconfigure"):
        # A redirect or pipe on Windows writes in the ANSI code page: a character it does not
        # hold is written as an escape (\u65e5) rather than ending the command.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        args.directory, litestream = data_settings(environ)
        if command != "import" and not os.path.exists(os.path.join(args.directory, DB_NAME)):
            raise StoreError(f"there is no memory database in {args.directory}")
        with contextlib.ExitStack() as stack:
            if command == "import":
                # An import makes a million objects that live to its end, and no garbage
                # cycles: the collector's passes over them would find nothing to free.
                import gc
                gc.disable()
                stack.callback(gc.enable)
                # All the source is read and checked before the store is opened, so that a
                # wrong or broken one creates nothing and servers never wait for the parsing.
                failed = "write a temporary file"
                spool = stack.enter_context(tempfile.TemporaryFile())
                failed = "read"
                format_name, kind, records, args.maker = _import_source(args, stack)
                args.records = _SpooledRecords(records, spool)
                args.peer = format_name not in ("flood", "official")
                _say_what_was_read(format_name, kind, args.records, args.maker.report)
                if args.dry_run and not os.path.exists(os.path.join(args.directory, DB_NAME)):
                    _say("flood-memory: a dry run: nothing was written")
                    return 0
            failed = "open the database"
            store = stack.enter_context(open_directory(args.directory, litestream))
            failed = "write"
            return COMMANDS[command](store, args) or 0
    except OSError as exc:
        if reader_gone(exc):
            # Whoever read the output stopped reading. Standard output goes to the null
            # device, or Python's flush of what is left at exit fails on the pipe once more.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        what = f" {exc.filename}" if exc.filename else ""
        _say(f"flood-memory: {command}: cannot {failed}{what}: {exc.strerror or exc}")
        return 1
    except StoreError as exc:
        _say(f"flood-memory: {command}: {exc}")
        return 1
    except KeyboardInterrupt:
        _say(f"flood-memory: {command}: interrupted")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
