"""The memory store: one SQLite file holding the memories, their full-text index, the link
graph, and the statistics that rank a search. Only this module speaks SQL.

`Store` is the whole persistence API: callers hand it plain Python values and get plain dicts
and lists back. The module reads top down:

- schema: `SCHEMA`, its version, and `MIGRATIONS`, one function per step from an older file
- limits: how much one memory or one call may hold
- errors: `StoreError` and its kinds, and `_translated`, the one place where SQLite's errors
  become messages a user can act on
- words: FTS5's `porter` tokenizer redone in Python (unicode61 splitting and folding, then
  Porter stemming), so that a search knows which terms the index holds for a text
- values: the checks every argument passes before anything is written
- connections: `Database`, the per-thread connections, the read and write transactions, and
  the background thread that does the upkeep a write leaves for later
- ranking index: `RankingIndex`, the term statistics BM25 needs and the impact lists of
  common terms, kept from a log of changes (`pending`)
- search: `Search`, one search's two stages, exact BM25 (`top`) then re-scoring (`rerank`)
- store: `Store`, links both ways, traversal, access counting, backup and restore
- command line: `python3 store.py export | import | backup | restore`
"""

import argparse
import array
import codecs
import collections
import contextlib
import errno
import functools
import gc
import glob
import hashlib
import heapq
import io
import itertools
import json
import logging
import marshal
import math
import os
import re
import shlex
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone

log = logging.getLogger("flood-memory.store")

# ----------------------------------------------------------------------------- schema

SCHEMA = """
-- One row per memory. `rowid` is implicit; the full-text index and the tables below point at it.
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

-- External-content index over nodes.content: the text lives once, in nodes.
CREATE VIRTUAL TABLE nodes_fts USING fts5(
    content, content=nodes, content_rowid=rowid, tokenize='porter'
);

-- The index follows the table through these triggers and nothing else.
CREATE TRIGGER nodes_ai AFTER INSERT ON nodes BEGIN
    INSERT INTO nodes_fts(rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER nodes_ad AFTER DELETE ON nodes BEGIN
    INSERT INTO nodes_fts(nodes_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;
-- Only new content is re-indexed: counting an access or editing links leaves the index alone.
CREATE TRIGGER nodes_au AFTER UPDATE OF content ON nodes BEGIN
    INSERT INTO nodes_fts(nodes_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO nodes_fts(rowid, content) VALUES (new.rowid, new.content);
END;

-- Tag index, one row per tag of a memory, kept by triggers: tag filters read no JSON.
CREATE TABLE node_tags (
    tag TEXT NOT NULL,
    node INTEGER NOT NULL,       -- nodes.rowid
    created_at TEXT NOT NULL,    -- the memory's
    PRIMARY KEY (tag, node)      -- whether a memory carries a tag: asked of every match
) WITHOUT ROWID;
-- A tag's memories newest first, and within a window, straight from an index range. (The
-- primary key stays (tag, node): a ranked search asks whether a memory carries a tag.)
CREATE INDEX node_tags_created ON node_tags (tag, created_at);
CREATE TRIGGER node_tags_ai AFTER INSERT ON nodes BEGIN
    INSERT OR IGNORE INTO node_tags (tag, node, created_at)
        SELECT value, new.rowid, new.created_at FROM json_each(new.tags) WHERE type = 'text';
END;
CREATE TRIGGER node_tags_ad AFTER DELETE ON nodes BEGIN
    DELETE FROM node_tags
        WHERE node = old.rowid AND tag IN (SELECT value FROM json_each(old.tags));
END;
CREATE TRIGGER node_tags_au AFTER UPDATE OF tags, created_at ON nodes BEGIN
    DELETE FROM node_tags
        WHERE node = old.rowid AND tag IN (SELECT value FROM json_each(old.tags));
    INSERT OR IGNORE INTO node_tags (tag, node, created_at)
        SELECT value, new.rowid, new.created_at FROM json_each(new.tags) WHERE type = 'text';
END;

-- Every tag in use, with how many memories carry it and its case-folded form, kept by
-- triggers: a tag filter matches by that form ("Maria", "maria" and "MARIA" alike), and a
-- recall that finds nothing names the tags closest to the one asked.
CREATE TABLE tags (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a process reads only the new ones
    tag TEXT NOT NULL UNIQUE,    -- as the memories spell it
    folded TEXT NOT NULL,        -- tag.casefold(): lower() here folds ASCII, and the Store
                                 -- the rest (see _fold_tags)
    memories INTEGER NOT NULL
);
CREATE INDEX tags_folded ON tags (folded);
CREATE INDEX tags_used ON tags (memories);  -- the most used, for a recall that found nothing
CREATE TRIGGER tags_ai AFTER INSERT ON node_tags BEGIN
    INSERT INTO tags (tag, folded, memories) VALUES (new.tag, lower(new.tag), 1)
        ON CONFLICT (tag) DO UPDATE SET memories = memories + 1;
END;
CREATE TRIGGER tags_ad AFTER DELETE ON node_tags BEGIN
    UPDATE tags SET memories = memories - 1 WHERE tag = old.tag;
    DELETE FROM tags WHERE tag = old.tag AND memories <= 0;
END;

-- Which memories hold the same text and tags, for remember to find an exact duplicate.
CREATE TABLE fingerprints (
    hash INTEGER NOT NULL,       -- 64 bits of BLAKE2b over the content with its whitespace
                                 -- collapsed and the sorted folded tags (see _fingerprint)
    node INTEGER NOT NULL,       -- nodes.rowid
    PRIMARY KEY (hash, node)
) WITHOUT ROWID;

-- How many memories hold each term the index holds (a porter stem), as of the last fold of
-- `pending`: a lookup by primary key, where FTS5's fts5vocab would scan its index.
CREATE TABLE terms (
    term TEXT PRIMARY KEY,
    df INTEGER NOT NULL,
    nodes TEXT                   -- while df <= RARE: the rowids of the memories holding the
                                 -- term, space-separated (remember's near-duplicate hint)
) WITHOUT ROWID;

-- Terms so common ("hot") that ranking them through FTS5 would read much of the index. Each
-- has an impact list in hot_postings holding the memories whose impact exceeds `floor`.
CREATE TABLE hot_terms (
    term TEXT PRIMARY KEY,
    floor REAL NOT NULL,         -- every memory with a larger impact is in hot_postings
    avgdl REAL NOT NULL,         -- average memory length (tokens) the impacts were taken at
    size INTEGER NOT NULL        -- rows in hot_postings for the term
) WITHOUT ROWID;

CREATE TABLE hot_postings (
    term TEXT NOT NULL,
    impact REAL NOT NULL,        -- BM25's term-frequency part: tf(k1+1) / (tf + k1(1-b+b dl/avgdl))
    node INTEGER NOT NULL,       -- nodes.rowid
    PRIMARY KEY (term, impact, node)
) WITHOUT ROWID;
CREATE INDEX hot_postings_node ON hot_postings (node);

-- Memories added or removed since terms and the impact lists were last brought up to date,
-- in order. A write appends one row here instead of updating a row of `terms` per word of
-- the memory (some 40 pages of the log per remember, against 1); the background thread folds
-- them in, and a search counts the rows still here (see RankingIndex).
CREATE TABLE pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order of the changes
    node INTEGER NOT NULL,       -- nodes.rowid
    sign INTEGER NOT NULL,       -- +1: the memory was added; -1: removed (or its content replaced)
    counts TEXT NOT NULL,        -- JSON object: term -> occurrences in the memory
    length INTEGER NOT NULL      -- tokens in the memory, as FTS5 counts them
);

-- Work a load has left to do, set in the transaction that leaves it, cleared once done.
-- 'count': memories were inserted without counting their terms, to count them all at once
-- at the load's end; until then a search does not find them. 'links': memories were given
-- links whose back-links come after. An interrupted load leaves it, and the next process to
-- look (an open, a load, a server's upkeep) does the work (for 'links', it makes every link
-- two-way), once its owner has not beaten for OWED_LEASE seconds.
CREATE TABLE owed (
    work TEXT PRIMARY KEY,
    beat REAL NOT NULL           -- when its owner last wrote, in Unix time
) WITHOUT ROWID;
"""

# Versions of SCHEMA, kept in PRAGMA user_version:
# 1: nodes, nodes_fts and its three triggers, as SPEC.md gives them.
# 2: nodes_au fires on content only; node_tags; terms, hot_terms and hot_postings for ranking.
# 3: no new tables: terms re-counted where memories hold non-ASCII text, whose words version 2
#    folded differently from unicode61 (Hangul split into letters, Greek accents dropped).
# 4: pending, the log of changes the ranking statistics have yet to count.
# 5: time and duplicates: created_at in one UTC form and indexed (nodes_created), and in
#    node_tags (node_tags_created); fingerprints; terms.nodes, the holders of rare terms.
# 6: owed, the work an interrupted load left to do; tags, every tag with its folded form, and
#    fingerprints over folded tags.
SCHEMA_VERSION = 6


def _statements(script):
    """Split a schema script into statements (a trigger body holds `;` until its END)."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements


def _create(db, *names):
    """Run the CREATE statements of SCHEMA for the objects whose names start with `names`.

    A migration creates what its version added this way, so the DDL is written once. Should a
    later version change one of those objects, that migration must spell out its own DDL.
    """
    for statement in _statements(SCHEMA):
        words = statement.split()
        name = words[3] if words[1] == "VIRTUAL" else words[2]
        if name.startswith(names):
            db.execute(statement)


def _migrate_from_1(db):
    """SPEC.md's schema: the tag index and the ranking tables, links made two-way, terms
    counted."""
    db.execute("DROP TRIGGER nodes_au")
    _create(db, "nodes_au", "hot_")
    # node_tags and terms as version 2 had them; version 5 remakes them.
    db.execute("CREATE TABLE node_tags (tag TEXT NOT NULL, node INTEGER NOT NULL, "
               "PRIMARY KEY (tag, node)) WITHOUT ROWID")
    db.execute("CREATE TABLE terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID")
    _repair_links(db)  # written by tools that may not have mirrored them
    _recount(db)


def _migrate_from_2(db):
    """Version 2 folded non-ASCII words differently from unicode61: count them again."""
    if db.execute("SELECT 1 FROM nodes WHERE length(CAST(content AS BLOB)) <> length(content) "
                  "LIMIT 1").fetchone():
        _recount(db)


def _migrate_from_3(db):
    """The log of changes, so that a write no longer updates a row of terms per word."""
    _create(db, "pending")


def _migrate_from_4(db):
    """Time and duplicates: created_at in one UTC form, indexed, and in node_tags; the
    fingerprint of every memory; the holders of every rare term."""
    changed = []
    for rowid, created, accessed in db.execute(
            "SELECT rowid, created_at, last_accessed FROM nodes"):
        try:
            fixed = (_utc(created), _utc(accessed))
        except ValueError:
            continue  # not a time at all: left as it was, and outside every window
        if fixed != (created, accessed):
            changed.append((*fixed, rowid))
    db.executemany("UPDATE nodes SET created_at = ?, last_accessed = ? WHERE rowid = ?",
                   changed)
    for trigger in ("node_tags_ai", "node_tags_ad", "node_tags_au"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    db.execute("DROP TABLE node_tags")
    _create(db, "nodes_created", "node_tags", "fingerprints")
    db.execute("INSERT OR IGNORE INTO node_tags (tag, node, created_at) SELECT j.value, "
               "n.rowid, n.created_at FROM nodes n, json_each(n.tags) j "
               "WHERE json_valid(n.tags) AND j.type = 'text'")
    cursor = db.execute("SELECT rowid, content, tags FROM nodes")
    while rows := cursor.fetchmany(5000):
        db.executemany("INSERT OR IGNORE INTO fingerprints (hash, node) VALUES (?, ?)",
                       [(_fingerprint(content, _strings(tags)), rowid)
                        for rowid, content, tags in rows])
    db.execute("ALTER TABLE terms ADD COLUMN nodes TEXT")
    _list_rare(db)


def _owe(db, work):
    """Mark `work` as owed, or beat for it (see owed), inside a write transaction."""
    db.execute("INSERT INTO owed (work, beat) VALUES (?, ?) ON CONFLICT (work) "
               "DO UPDATE SET beat = excluded.beat", (work, time.time()))


def _claimed(database, work, claim):
    """Whether `work` is owed and this process may do it: without `claim`, whenever it is
    owed (its owner asks); with it, once its owner has stopped beating for OWED_LEASE
    seconds, and it is taken over (two processes cannot both)."""
    row = database.connection().execute("SELECT beat FROM owed WHERE work = ?",
                                        (work,)).fetchone()
    if row is None or not claim:
        return row is not None
    if row[0] > time.time() - OWED_LEASE:
        return False
    with database.write() as db:
        return db.execute("UPDATE owed SET beat = ? WHERE work = ? AND beat <= ?",
                          (time.time(), work, time.time() - OWED_LEASE)).rowcount == 1


def _migrate_from_5(db):
    """The work a load left to do (see owed); the tags with their folded forms, and the
    fingerprints of memories whose tags fold to other spellings."""
    _create(db, "owed", "tags")
    db.execute("INSERT INTO tags (tag, folded, memories) SELECT tag, lower(tag), count(*) "
               "FROM node_tags GROUP BY tag")
    _fold_tags(db, [t for (t,) in db.execute("SELECT tag FROM tags")])
    changed = []
    for rowid, content, tags in db.execute("SELECT rowid, content, tags FROM nodes "
                                           "WHERE tags NOT IN ('[]', '')"):
        tags = _strings(tags)
        if any(t != t.casefold() for t in tags):
            changed.append((rowid, _fingerprint(content, tags, fold=False),
                            _fingerprint(content, tags)))
    db.executemany("UPDATE fingerprints SET hash = ? WHERE node = ? AND hash = ?",
                   [(new, rowid, old) for rowid, old, new in changed])


# MIGRATIONS[v] takes a version-v database to version v + 1, inside the one transaction that
# also sets the new version. Impact lists a migration leaves missing are built after it.
MIGRATIONS = {1: _migrate_from_1, 2: _migrate_from_2, 3: _migrate_from_3, 4: _migrate_from_4,
              5: _migrate_from_5}

# The tables of SPEC.md's schema (version 1), FTS5's own included.
_SPEC_TABLES = {"nodes", "nodes_fts", "nodes_fts_data", "nodes_fts_idx", "nodes_fts_docsize",
                "nodes_fts_config"}


def _recount(db, rare=True):
    """Count every term again from FTS5's own vocabulary (SQLite counts in C what Python
    would have to tokenize again), and drop the impact lists, to be built anew. The lists of
    rare terms are made too, unless `rare` is false: then they stay unknown (NULL) until
    _list_rare makes them, range by range in short transactions."""
    log.info("counting the terms of every memory")
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.nodes_vocab "
               "USING fts5vocab(main, nodes_fts, row)")
    for table in ("terms", "hot_terms", "hot_postings"):
        db.execute(f"DELETE FROM {table}")
    db.execute("INSERT INTO terms (term, df) SELECT term, doc FROM temp.nodes_vocab")
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'pending'").fetchone():
        db.execute("DELETE FROM pending")
    if rare and "nodes" in {row[1] for row in db.execute("PRAGMA table_info(terms)")}:
        _list_rare(db)


def _list_rare(db, low="", high=None):
    """Fill terms.nodes for the rare terms from `low` up to (not including) `high`, from
    FTS5's own record of where each term is."""
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.nodes_vocab_instance "
               "USING fts5vocab(main, nodes_fts, instance)")
    within = "{0}term >= ?" + ("" if high is None else " AND {0}term < ?")  # {0}: a table
    bounds = (low,) if high is None else (low, high)
    # A rare term no memory holds any more (forgotten since the count; the log holds its
    # change, to be folded later) has an empty list, not an unknown one.
    holders = {term: set() for (term,) in db.execute(
        f"SELECT term FROM terms WHERE df <= {int(RARE)} AND nodes IS NULL AND "
        f"{within.format('')}", bounds)}
    # Each rare term looked up in the vocabulary, rather than every term of the range read
    # and the rare kept: the rare are few among the instances.
    for term, doc in db.execute(
            f"SELECT term, doc FROM temp.nodes_vocab_instance WHERE term IN (SELECT term "
            f"FROM terms WHERE df <= {int(RARE)} AND {within.format('')})", bounds):
        holders.setdefault(term, set()).add(doc)
    db.executemany("UPDATE terms SET nodes = ? WHERE term = ?",
                   [(_rowid_list(docs), term) for term, docs in holders.items()])


def _term_ranges(db, instances):
    """Bounds [(low, high)] splitting the terms into ranges holding about `instances`
    occurrences each (high None for the last)."""
    bounds, total = [""], 0
    for term, df in db.execute("SELECT term, df FROM terms ORDER BY term"):
        if total >= instances:
            bounds.append(term)
            total = 0
        total += df
    return list(zip(bounds, bounds[1:] + [None]))


def _link_problems(db):
    """Links that lead to no memory, or have no back-link, in words."""
    links = {i: set(_strings(text)) for i, text in db.execute("SELECT id, links FROM nodes")}
    nowhere = sum(1 for ts in links.values() for t in ts if t not in links)
    one_way = sum(1 for i, ts in links.items() for t in ts if t in links and i not in links[t])
    return ([f"{nowhere:,} link{'s lead' if nowhere > 1 else ' leads'} to no memory"]
            if nowhere else []) + \
        ([f"{one_way:,} link{'s have' if one_way > 1 else ' has'} no back-link"]
         if one_way else [])


def _repair_links(db):
    """Make every link two-way and drop links to missing memories and to themselves."""
    links = {}
    for node_id, text in db.execute("SELECT id, links FROM nodes"):
        try:
            value = json.loads(text or "[]")
        except ValueError:
            value = []
        links[node_id] = [i for i in value if isinstance(i, str)] if \
            isinstance(value, list) else []
    repaired = {i: list(dict.fromkeys(t for t in ts if t in links and t != i))
                for i, ts in links.items()}
    for node_id, targets in list(repaired.items()):
        for target in targets:
            if node_id not in repaired[target]:
                repaired[target].append(node_id)
    changed = [(_json(ts), i) for i, ts in repaired.items() if ts != links[i]]
    if changed:
        log.info("repairing the links of %d memories", len(changed))
        db.executemany("UPDATE nodes SET links = ? WHERE id = ?", changed)


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
LOAD_CHUNK = 4_000      # memories in a load's first transaction of inserts...
LOAD_TXN = 0.5          # ...and seconds the next aim at (see Store.load)
LOAD_PAUSE = 0.025      # seconds a load leaves the write lock free between two transactions
LOAD_INSTANCES = 250_000 # word occurrences whose rare terms one transaction lists
LOAD_STEP = 0.25        # seconds after which a load's step of impact lists ends
LINK_BATCH = 20_000     # links, or back-links, a load makes in one transaction
OWED_LEASE = 60.0       # seconds without a beat after which owed work is taken over
LOAD_CACHE_KIB = 65_536 # SQLite's page cache while loading (2 MB otherwise): random keys
BUSY_TIMEOUT = 5.0      # seconds a write waits for another writer before giving up
BUSY_POLL = 0.05        # seconds one try at a lock may wait (see Database._begin)
UPKEEP_EVERY = 128      # write transactions between two rounds of background upkeep...
UPKEEP_PAUSE = 1.0      # ...or seconds of quiet after a write
WAL_PAGES = 4096        # a commit checkpoints itself only once the log is this long...
WAL_BYTES = 16 << 20    # ...and a log restarted after that is cut back to this size
WAL_SOFT = 32 << 20     # under Litestream, a write first waits for it to checkpoint a longer log...
WAL_WAIT = 2.0          # ...for up to this many seconds, then checkpoints it itself...
WAL_UNHEARD = 60.0      # ...and for this long checkpoints without waiting (Litestream is not there)...
WAL_BOUND = 64 << 20    # ...and a commit checkpoints a log longer than this, whatever happens
LITESTREAM_ENV = "FLOOD_MEMORY_LITESTREAM"  # 1 or 0: whether Litestream replicates the file

DEFAULT_DIR = "~/flood/memory"
DB_NAME = "memory.db"
PRIVATE_DIR = 0o700     # a data directory this code makes
PRIVATE_FILE = 0o600    # the database, its -wal and -shm, backups and exports

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


def _translated(exc, doing, timeout, path=None):
    """The StoreError that says what SQLite's exception `exc` means for a user. SQLite says
    "disk I/O error" for a full disk or a file-size limit: with the database's `path`, the
    cause is looked for (see _write_trouble). Messages name no path (they reach clients)."""
    code = _code(exc)
    if path is not None and code in _CANNOT_WRITE:
        trouble = _write_trouble(path)
        if trouble is not None:
            return StoreError(f"could not {doing}: {trouble}")
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return Busy(f"could not {doing}: the database stayed locked by another process for "
                    f"more than {timeout:g} s")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
        return StoreError(f"could not {doing}: the memory store is shutting down")
    if code == sqlite3.SQLITE_FULL:
        return StoreError(f"could not {doing}: the disk is full")
    if code == sqlite3.SQLITE_READONLY:
        return StoreError(f"could not {doing}: the database cannot be written (memory.db or "
                          f"its directory is read-only)")
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return StoreError(f"could not {doing}: the database is damaged ({exc}); restore it "
                          f"from a backup")
    if code == sqlite3.SQLITE_CANTOPEN:
        return StoreError(f"could not {doing}: the database file cannot be opened ({exc})")
    return StoreError(f"could not {doing}: {exc}")


def _write_trouble(path):
    """Why the database at `path` and its companions cannot be written, when the reason can
    be seen: a full disk, this process's file-size limit, a read-only directory or file."""
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
# Python's side of what FTS5's `porter` tokenizer does: unicode61 splitting and folding,
# then the Porter stemmer exactly as fts5_tokenize.c applies it (on UTF-8 bytes, tokens of
# 3 to 64 bytes only). A "word" is a folded token; a "term" is what the index holds for it,
# the word's stem.

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


class _Folds(dict):
    """Code point -> what unicode61 makes of that character inside a word: its folded form
    ('' when it is a diacritic it drops), or a space when it separates words.

    unicode61 folds one character at a time, by tables of the Unicode version SQLite was
    built with, so the only faithful source is SQLite itself: the characters of a text not
    seen yet are looked up together, in one round trip whatever the table holds (looked up
    one at a time, a long text of new characters held writers up for seconds), by tokenizing
    each between two letters, and kept. A full table (MAX_FOLDS) starts again from ASCII.
    """

    def __init__(self):
        super().__init__(self._ascii())
        self._lock = threading.Lock()
        self._db = None

    @staticmethod
    def _ascii():
        return ((i, chr(i).lower() if chr(i).isalnum() else " ") for i in range(128))

    def fold(self, text):
        """`text` with each character folded, as unicode61 has it inside a word."""
        chars = set(text)
        new = [c for c in chars if ord(c) not in self]
        if not new:
            return text.translate(self)
        values = self._look_up(new)
        if len(chars) > MAX_FOLDS - 128:  # more than the table holds: for this text alone
            return text.translate(collections.ChainMap(values, self))
        if len(self) + len(values) > MAX_FOLDS:
            values.update((ord(c), self[ord(c)]) for c in chars if ord(c) in self)
            self.clear()
            self.update(self._ascii())
        self.update(values)
        return text.translate(self)

    def __missing__(self, code):
        # Only if another thread emptied the table between fold's look-up and its use.
        return self._look_up([chr(code)])[code]

    def _look_up(self, chars):
        """{code point: value} of `chars`, each tokenized between two letters, in one text."""
        with self._lock:
            if self._db is None:
                self._db = sqlite3.connect(":memory:", check_same_thread=False)
                # Contentless: emptied at once by delete-all (DELETE re-reads every row).
                self._db.execute("CREATE VIRTUAL TABLE t USING fts5(x, content='', "
                                 "tokenize='unicode61')")
                self._db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
            self._db.execute("INSERT INTO t (t) VALUES ('delete-all')")
            self._db.execute("INSERT INTO t (rowid, x) VALUES (1, ?)",
                             (" ".join(f"a{c}b" for c in chars),))
            terms = [t for (t,) in self._db.execute("SELECT term FROM v ORDER BY offset")]
        values, i = {}, 0
        for c in chars:  # "a" then "b" where c separates words, else one term
            values[ord(c)] = " " if terms[i] == "a" else terms[i][1:-1]
            i += 2 if terms[i] == "a" else 1
        return values


MAX_FOLDS = 100_000  # characters _Folds keeps: a hostile text may hold every code point there is
_folds = _Folds()


def tokenize(text):
    """The words of `text`, in order, split and folded as unicode61 does."""
    if text.isascii():
        return _TOKEN.findall(text.lower())
    return _folds.fold(text).split()


def _is_vowel(ch, y_is_vowel):
    return ch in "aeiou" or (y_is_vowel and ch == "y")


def _gobble_vc(s, prev_consonant):
    """One past the end of the first vowel-consonant run in s, or 0 if there is none."""
    consonant = prev_consonant
    i, n = 0, len(s)
    while i < n:
        consonant = not _is_vowel(s[i], consonant)
        if not consonant:
            break
        i += 1
    i += 1
    while i < n:
        consonant = not _is_vowel(s[i], consonant)
        if consonant:
            return i + 1
        i += 1
    return 0


def _m_gt0(s):
    return bool(_gobble_vc(s, False))


def _m_gt1(s):
    n = _gobble_vc(s, False)
    return bool(n and _gobble_vc(s[n:], True))


def _m_eq1(s):
    n = _gobble_vc(s, False)
    return bool(n and not _gobble_vc(s[n:], True))


def _o_star(s):
    if s[-1] in "wxy":
        return False
    mask, consonant = 0, False
    for ch in s:
        consonant = not _is_vowel(ch, consonant)
        mask = (mask << 1) + consonant
    return mask & 7 == 5


def _has_vowel(s):
    return any(_is_vowel(ch, i > 0) for i, ch in enumerate(s))


def _m_gt1_s_or_t(s):
    return s[-1] in "st" and _m_gt1(s)


def _by_last_letter(rules):
    """Rules grouped by the last letter of their suffix, order kept: a word is only tried
    against the rules that can match it, not every one."""
    grouped = collections.defaultdict(list)
    for rule in rules:
        grouped[rule[0][-1]].append(rule)
    return dict(grouped)


# (suffix, condition on the stem, replacement), tried in order; the first suffix that
# matches a word longer than itself decides, whether or not its condition holds.
_STEP2 = [(suf, _m_gt0, rep) for suf, rep in (
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
    ("logi", "log"), ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"),
    ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"),
    ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"),
    ("iviti", "ive"), ("biliti", "ble"))]
_STEP3 = [(suf, _m_gt0, rep) for suf, rep in (
    ("ical", "ic"), ("ness", ""), ("icate", "ic"), ("iciti", "ic"), ("ful", ""), ("ative", ""),
    ("alize", "al"))]
_STEP4 = [(suf, _m_gt1_s_or_t if suf == "ion" else _m_gt1, "") for suf in (
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou",
    "ism", "ate", "iti", "ous", "ive", "ize")]


_STEP2, _STEP3, _STEP4 = map(_by_last_letter, (_STEP2, _STEP3, _STEP4))


def _apply(word, rules):
    for suffix, condition, replacement in rules.get(word[-1], ()):
        if len(word) > len(suffix) and word.endswith(suffix):
            stem = word[:-len(suffix)]
            return stem + replacement if condition(stem) else word
    return word


def _porter(w):
    # Step 1a
    if w[-1] == "s":
        if w[-2] == "e" and ((len(w) > 4 and w[-4:-2] == "ss") or (len(w) > 3 and w[-3] == "i")):
            w = w[:-2]
        elif w[-2] != "s":
            w = w[:-1]
    # Step 1b
    removed = False
    if len(w) > 3 and w.endswith("eed"):
        if _m_gt0(w[:-3]):
            w = w[:-1]
    elif len(w) > 2 and w.endswith("ed") and _has_vowel(w[:-2]):
        w, removed = w[:-2], True
    elif len(w) > 3 and w.endswith("ing") and _has_vowel(w[:-3]):
        w, removed = w[:-3], True
    if removed:
        if len(w) > 2 and w[-2:] in ("at", "bl", "iz"):
            w += "e"
        elif len(w) > 1 and not _is_vowel(w[-1], False) and w[-1] not in "lsz" and w[-1] == w[-2]:
            w = w[:-1]
        elif _m_eq1(w) and _o_star(w):
            w += "e"
    # Step 1c
    if w[-1] == "y" and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    # Steps 2 to 4
    w = _apply(_apply(_apply(w, _STEP2), _STEP3), _STEP4)
    # Step 5a
    if w[-1] == "e" and (_m_gt1(w[:-1]) or (_m_eq1(w[:-1]) and not _o_star(w[:-1]))):
        w = w[:-1]
    # Step 5b
    if len(w) > 1 and w.endswith("ll") and _m_gt1(w[:-1]):
        w = w[:-1]
    return w


class _Stems(dict):
    """word -> term, computed on first sight; looking up through it runs at C speed."""

    def __missing__(self, word):
        raw = word.encode("utf-8")
        if 3 <= len(raw) <= 64:
            # The C stemmer works on bytes; latin-1 maps each byte to one character.
            term = _porter(raw.decode("latin-1")).encode("latin-1").decode("utf-8", "replace")
        else:
            term = word
        if len(self) >= 200_000:  # bounded: unique words (numbers, codes) never stop coming
            self.clear()
        self[word] = term
        return term


# stem(word) -> the term FTS5's porter tokenizer indexes for that word.
stem = _Stems().__getitem__


def term_counts(text):
    """How often each term occurs in `text`: a Counter keyed by term."""
    return collections.Counter(map(stem, tokenize(text)))


def first_words(text, n=None):
    """The first `n` words of `text` (MAX_QUERY_WORDS by default), and whether it holds
    more. Only the start of a long text is tokenized: a query may be megabytes."""
    n = MAX_QUERY_WORDS if n is None else n
    size = 16 * n
    while True:
        words = tokenize(text[:size])
        if len(words) > n or size >= len(text):
            return words[:n], len(words) > n
        size *= 4


def query_words(text):
    """The words of a question that a search should look for, one per distinct term, from
    its first MAX_QUERY_WORDS words.

    Stopwords are dropped unless nothing else is left, so "what is it?" still searches.
    """
    return _meaningful(first_words(text)[0])


def _meaningful(words):
    """query_words of a query's `words`."""
    meaningful = [w for w in words if w not in STOPWORDS] or words
    seen, kept = set(), []
    for word in meaningful:
        term = stem(word)
        if term not in seen:
            seen.add(term)
            kept.append(word)
    return kept


def _distance(a, b, most=2):
    """The number of edits (a letter added, dropped or changed, or two neighbours swapped)
    that make `a` into `b`, or most + 1 if that is more than `most`: only the band of the
    table within `most` of its diagonal is filled."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    far = most + 1
    before, row = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        x, current, least = a[i - 1], [far] * (len(b) + 1), far
        current[0] = i
        for j in range(max(1, i - most), min(len(b), i + most) + 1):
            y = b[j - 1]
            cost = row[j - 1] + (x != y)
            if row[j] + 1 < cost:
                cost = row[j] + 1
            if current[j - 1] + 1 < cost:
                cost = current[j - 1] + 1
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y and before[j - 2] + 1 < cost:
                cost = before[j - 2] + 1
            current[j] = cost
            if cost < least:
                least = cost
        if least > most and i > most:
            return far
        before, row = row, current
    return min(row[-1], far)


def _letters(text):
    """The letters of `text` as bits of an integer, for a quick bound on how far apart two
    texts are (a letter's bit may stand for others too: the bound stays a bound)."""
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


_STORED_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _utc(value):
    """An ISO 8601 date or date-time, in UTC unless it gives an offset, in the stored form;
    ValueError if it is not one."""
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
    if value is None:
        return None
    _text(value, name)
    try:
        return _utc(value)
    except ValueError:
        raise InvalidInput(f"{name} must be {TIME_FORMS}; got {_shorten(value)}") from None


def _fingerprint(content, tags, fold=True):
    """What makes two memories exact duplicates, as a signed 64-bit integer: the content with
    its whitespace trimmed and collapsed, and the set of tags, whatever their case (not
    folded: as version 5 made it)."""
    key = " ".join(content.split()) + "\0" + "\0".join(
        sorted({t.casefold() if fold else t for t in tags if isinstance(t, str)}))
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _strings(text):
    """The strings of a JSON array (a `tags` or `links` column value), as a list: nothing,
    for a value that is not one."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def _rowid_list(rowids):
    return " ".join(map(str, sorted(rowids)))


def _kind(value):
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _shorten(value, n=60):
    text = repr(value)
    return text if len(text) <= n else text[:n - 4] + "...'"


_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _node_id(value, name="node_id"):
    """`value` as a canonical memory id, or InvalidInput naming the argument."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {_kind(value)}")
    if _CANONICAL_ID.fullmatch(value):
        # Canonical already, as every stored id is: no uuid.UUID to build, which an import
        # asks for every id and link.
        return value
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise InvalidInput(f"{name} {_shorten(value)} is not a memory id (ids look like "
                           f"'{uuid.UUID(int=0)}')") from None
    return str(parsed)


def _text(value, name, *, allow_empty=True):
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not valid Unicode text (it holds a lone surrogate)") from None
    if not allow_empty and not value.strip():
        raise InvalidInput(f"{name} must not be empty")
    return value


def _content(value):
    value = _text(value, "content", allow_empty=False)
    if len(value) > MAX_CONTENT:
        raise InvalidInput(f"content may have at most {MAX_CONTENT:,} characters, got "
                           f"{len(value):,}; split it into several linked memories")
    return value


def _tags(values):
    """Tags stripped of surrounding space, duplicates whatever their case dropped (the first
    spelling kept), order kept."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(f"tags must be an array of strings, got {_kind(values)}")
    tags = {}  # in order, each once (a dict: asking a list grows with the square)
    for value in values:
        if not isinstance(value, str):
            raise InvalidInput(f"tags must be an array of strings, and holds {_kind(value)}")
        tag = _text(value, "each tag").strip()
        if not tag:
            raise InvalidInput("tags must not be empty strings")
        if _CONTROL.search(tag):
            # SQLite's JSON functions cut a string at NUL: the tag index would lose it.
            raise InvalidInput(f"a tag must not hold control characters, got {_shorten(tag)}")
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidInput(f"a tag may have at most {MAX_TAG_LENGTH} characters, "
                               f"got one of {len(tag)}")
        tags.setdefault(tag.casefold(), tag)
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a memory may have at most {MAX_TAGS} tags, got {len(tags)}")
    return list(tags.values())


def _fold_tags(db, tags):
    """Give the tags among `tags` whose case-folded form SQLite's lower() gets wrong (it
    folds ASCII only) their form in the tags table."""
    db.executemany("UPDATE tags SET folded = ? WHERE tag = ? AND folded <> ?",
                   [(t.casefold(), t, t.casefold()) for t in tags if not t.isascii()])


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

NOT_AN_ID = "not a memory id"
NO_SUCH_MEMORY = "no memory has this id"
ITSELF = "a memory cannot link to itself"


def _link_ids(values, limit=MAX_LINKS, skipped=None):
    """Canonical ids from a links argument, duplicates dropped. Values that are not ids are
    left out and, when `skipped` is a list, added to it as {"id": value, "reason": ...}."""
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


def _timestamp(value, name):
    """An imported time in the stored form (UTC, milliseconds, Z)."""
    _text(value, name)
    try:
        return _utc(value)
    except ValueError:
        raise InvalidInput(f"{name} must be {TIME_FORMS}, got {_shorten(value)}") from None


# A memory as an import file gives it, checked and completed.
Record = collections.namedtuple("Record", "id content tags links source created_at "
                                          "last_accessed access_count")


def _record(value, number):
    """The memory object `value` (record `number` of an import), checked: a Record."""
    if not isinstance(value, dict):
        raise InvalidInput(f"record {number}: a memory must be a JSON object")
    try:
        if "id" not in value or "content" not in value:
            raise InvalidInput("a memory needs an id and content")
        created = _timestamp(value.get("created_at") or _now(), "created_at")
        count = value.get("access_count", 0)
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_INT:
            raise InvalidInput(f"access_count must be a whole number from 0 to {MAX_INT}")
        return Record(_node_id(value["id"], "id"), _content(value["content"]),
                      _tags(value.get("tags", [])), _link_ids(value.get("links", []), None),
                      _source(value.get("source", "")), created,
                      _timestamp(value.get("last_accessed") or created, "last_accessed"), count)
    except InvalidInput as exc:
        raise InvalidInput(f"record {number}: {exc}") from None


def check_records(values):
    """The memory objects `values`, checked, as a list of Records (see _checked)."""
    return list(_checked(values))


def _checked(values):
    """Records from memory objects, one by one; InvalidInput naming the first bad one, or an
    id that an earlier record has too."""
    first = {}  # id -> the number of the record that gave it
    for number, value in enumerate(values, 1):
        record = _record(value, number)
        if record.id in first:
            raise InvalidInput(f"record {number}: id {record.id} is also record "
                               f"{first[record.id]}: each memory may come once")
        first[record.id] = number
        yield record


def _source(value):
    value = _text(value, "source")
    if len(value) > MAX_SOURCE:
        raise InvalidInput(f"source may have at most {MAX_SOURCE:,} characters, got "
                           f"{len(value):,}")
    return value


_COLUMNS = "id, content, tags, links, source, created_at, last_accessed, access_count"


def _node(row):
    """A memory as callers get it, from a row of _COLUMNS."""
    return {
        "id": row[0],
        "content": row[1],
        "tags": json.loads(row[2] or "[]"),
        "links": json.loads(row[3] or "[]"),
        "source": row[4] or "",
        "created_at": row[5],
        "last_accessed": row[6],
        # A float here was left by a version whose count overflowed past MAX_INT.
        "access_count": int(min(row[7] or 0, MAX_INT)),
    }


_ENCODER = json.JSONEncoder(ensure_ascii=False)  # json.dumps with options makes one a call


def _json(value):
    return _ENCODER.encode(value)


def _id_list(ids):
    """A list of memory ids as _json writes it: ids hold nothing JSON would escape, so
    joining them is the same text, without the encoder's work on a hub's thousands."""
    return '["' + '", "'.join(ids) + '"]' if ids else "[]"


def _folded(tags):
    """Tags as a filter compares them: a frozenset of their case-folded forms."""
    return frozenset(t.casefold() for t in tags)


@functools.lru_cache(maxsize=1024)
def _folded_tags(tags_json):
    """The tags of a `tags` column value, folded (see _folded)."""
    return _folded(_strings(tags_json))


def _chunks(items, size=500):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _marks(items):
    return ",".join("?" * len(items))


def _carrying(tags, column):
    """(SQL, parameters) joining node_tags so that only memories at `column` carrying every
    tag of `tags` remain, each given as the list of its spellings (see Store._spellings).
    One join per tag up to three; the rest are looked up one memory at a time in the last
    join's condition, since many joins exhaust SQLite's planner (and FTS5's MATCH with it:
    16 tags made it refuse, 64 hit the join limit)."""
    joined, rest = tags[:3], tags[3:]
    sql = "".join(f" JOIN node_tags t{i} ON t{i}.node = {column} AND t{i}.tag IN ({_marks(s)})"
                  for i, s in enumerate(joined))
    sql += "".join(f" AND EXISTS (SELECT 1 FROM node_tags x{i} WHERE x{i}.tag IN "
                   f"({_marks(s)}) AND x{i}.node = {column})" for i, s in enumerate(rest))
    return sql, [t for spellings in (*joined, *rest) for t in spellings]


# ----------------------------------------------------------------------------- connections


class WriteQueue:
    """The writers of this process, first come first served, and the small changes handed
    over to whichever of them writes next. A plain lock lets the thread that releases it take
    it again at once, and SQLite's own wait polls with sleeps: under many HTTP clients either
    let some writes wait past any bound. Each waiting thread blocks on a lock of its own, and
    the turn goes to the first alone (waking them all woke every waiting thread a write)."""

    def __init__(self):
        self._lock = threading.Lock()          # guards the fields below
        self._taken = False
        self._waiting = collections.deque()    # one held lock per waiting thread, in order
        self._handed = []                      # changes for the next write transaction

    def take(self, timeout):
        """True once it is the caller's turn to write; False, and out of the queue, after
        `timeout` seconds."""
        with self._lock:
            if not self._taken:
                self._taken = True
                return True
            if timeout <= 0:
                return False
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

    def hand_over(self, change):
        """Keep change(db) for the next write transaction to make."""
        with self._lock:
            self._handed.append(change)

    def handed(self):
        """The changes handed over so far, taken out of the queue."""
        with self._lock:
            handed, self._handed = self._handed, []
        return handed

    def hand_back(self, changes):
        """Changes a transaction took and could not commit: for the next one."""
        with self._lock:
            self._handed[:0] = changes

    def __bool__(self):
        return bool(self._handed)


# Connections this process has open, by the real path of their file (see _check_file).
_connected = collections.Counter()
_connected_lock = threading.Lock()


def _count_connections(path, change):
    with _connected_lock:
        _connected[os.path.realpath(path)] += change


def replicated(path):
    """Whether Litestream replicates the database at `path`: FLOOD_MEMORY_LITESTREAM says so
    (1 or 0); unset, the directory Litestream keeps beside the file does (.memory.db-litestream,
    made by 0.3.x and 0.5.x alike on their first sync; it stays after Litestream stops)."""
    value = os.environ.get(LITESTREAM_ENV, "").strip()
    if value in ("0", "1"):
        return value == "1"
    if path == ":memory:" or path.startswith("file:"):
        return False
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.isdir(os.path.join(directory, f".{name}-litestream"))


def _log_bytes(path):
    """How long the log of the database at `path` is, in bytes: the frames written since it
    last started over, which carry the salt of its header (older ones after them carry older
    salts; sqlite.org/fileformat2.html#walformat). The -wal file's size says only how long
    it has ever been. Read from the -wal, never the -shm: closing a file that SQLite locks
    in this process would drop its locks. 0 when there is no log."""
    try:
        with open(path + "-wal", "rb") as f:
            header = f.read(32)
            if len(header) < 32:
                return 0
            frame = struct.unpack(">I", header[8:12])[0] + 24
            low, high = 0, (os.fstat(f.fileno()).st_size - 32) // frame
            while low < high:  # the first frame without the header's salt
                middle = (low + high) // 2
                f.seek(32 + middle * frame + 8)
                if f.read(8) == header[16:24]:
                    low = middle + 1
                else:
                    high = middle
            return 32 + low * frame
    except OSError:
        return 0


class Database:
    """The SQLite file as this process uses it: the connections (one per thread, each set up
    the same way), the read and write transactions, SQLite's errors in words, and a
    background thread that, after UPKEEP_EVERY writes or a quiet UPKEEP_PAUSE, runs `upkeep`
    (work a write leaves for later) and checkpoints the log, so that no request waits for
    either. Compare coverage.py's SqliteDb and datasette's Database."""

    def __init__(self, path, timeout=BUSY_TIMEOUT, upkeep=None):
        self.path = path
        self.timeout = timeout
        self.upkeep = upkeep            # upkeep() -> True while it has more to do
        self._local = threading.local()
        self._lock = threading.Lock()   # guards the fields below
        self._open = set()
        self._writes = 0                # write transactions since the last upkeep
        self._worker = None             # the background thread, while it runs
        self._wake = threading.Event()
        self._closing = False
        self.queue = WriteQueue()       # one writer at a time within this process
        self._unheard = 0.0             # until when Litestream is taken not to be running

    def connection(self):
        """The calling thread's connection, opened on first use."""
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                # SQLite's own wait is kept short: write() waits for the write lock itself.
                db = sqlite3.connect(self.path, timeout=BUSY_POLL, isolation_level=None,
                                     check_same_thread=False)
                db.execute("PRAGMA foreign_keys=ON")
                # In WAL mode NORMAL keeps every committed transaction across a killed process.
                db.execute("PRAGMA synchronous=NORMAL")
                # Checkpoints run in the background, not in a commit, unless writes come so
                # fast that the log outgrows WAL_PAGES: a background checkpoint racing a
                # stream of writes never finishes, and only a finished one lets the log
                # start over (test_the_log_stays_bounded_under_back_to_back_writes).
                self._set_log(db, replicated(self.path))
            except sqlite3.Error as exc:
                raise _translated(exc, "open the memory database", self.timeout,
                                  self.path) from exc
            self._local.db = db
            with self._lock:
                self._open.add(db)
            _count_connections(self.path, 1)
        return db

    def _set_log(self, db, replicated):
        """How `db` checkpoints. Under Litestream, checkpoints are Litestream's, and the log
        is never cut short: a cut takes frames that Litestream 0.3.x has not copied yet (its
        replicas came back corrupt) or makes it start a new generation. A commit still
        checkpoints past WAL_BOUND, in case the sign of Litestream is stale."""
        if replicated:
            page = db.execute("PRAGMA page_size").fetchone()[0]
            db.execute(f"PRAGMA wal_autocheckpoint={int(WAL_BOUND // page)}")
            db.execute("PRAGMA journal_size_limit=-1")
        else:
            db.execute(f"PRAGMA wal_autocheckpoint={int(WAL_PAGES)}")
            db.execute(f"PRAGMA journal_size_limit={int(WAL_BYTES)}")
        self._local.replicated = replicated

    def _make_room(self, db):
        """Before a write under Litestream: while the log is longer than WAL_SOFT, wait for
        Litestream to checkpoint it (it does after each sync, every second), so that the log
        stays short; if it has not within WAL_WAIT seconds, it is not running (its directory
        outlives it): checkpoint here, and for WAL_UNHEARD seconds without waiting first.
        (A stream of remembers alone writes up to 60 MB of log a second.)"""
        now = replicated(self.path)
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
    def write(self, doing="write to the memory database"):
        """One write transaction: IMMEDIATE, so that it waits for other writers up front.

        The threads of this process take turns first (see WriteQueue), so that SQLite's wait
        of `timeout` seconds only ever waits for another process; a thread that cannot get
        its turn in twice that long gives up, saying the cause was this server's own load.
        """
        if not self.queue.take(2 * self.timeout):
            raise Busy(f"could not {doing}: this server had more writes queued than it could "
                       f"do in {2 * self.timeout:g} s")
        try:
            with self._transaction() as db:
                yield db
        finally:
            self.queue.give()
        self._wrote()

    def write_soon(self, change):
        """Make the small write change(db) in a transaction of its own if no other thread
        of this process is writing; else hand it over to the transaction that writes next,
        and return at once. For counting accesses: a recall need not wait its turn behind
        every remember queued, only to add one to a few counters."""
        if self.queue.take(0):
            try:
                with self._transaction() as db:
                    change(db)
            finally:
                self.queue.give()
            self._wrote()
            return
        self.queue.hand_over(change)
        self.wake()  # in case no other write comes: the background thread writes it

    @contextlib.contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE, the caller's statements, the changes handed over (see
        write_soon), COMMIT; all rolled back if one of the caller's fails."""
        db = self.connection()
        self._make_room(db)
        self._begin(db)
        handed = []
        try:
            yield db
            handed = self.queue.handed()
            for change in handed:
                db.execute("SAVEPOINT handed")
                try:
                    change(db)
                except sqlite3.Error as exc:  # it fails alone
                    log.debug("a change handed over failed: %s", exc)
                    db.execute("ROLLBACK TO handed")
                db.execute("RELEASE handed")
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            self.queue.hand_back(handed)
            raise

    def _begin(self, db):
        """BEGIN IMMEDIATE, waiting up to `timeout` for another process's write to end.

        SQLite's own wait sleeps longer and longer between tries, and a process writing in bursts
        (an import) leaves shorter gaps, so a writer could wait out its whole timeout between
        them. Each try here waits BUSY_POLL at most, so the next one comes soon enough.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if _code(exc) not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or \
                        time.monotonic() >= deadline:
                    raise

    @contextlib.contextmanager
    def errors(self, doing):
        """Turn SQLite's exceptions inside the block into StoreErrors saying what failed."""
        try:
            yield
        except sqlite3.ProgrammingError as exc:
            if "closed" not in str(exc):
                raise  # a bug, for the transport to log
            raise _translated(exc, doing, self.timeout) from exc
        except sqlite3.Error as exc:
            raise _translated(exc, doing, self.timeout, self.path) from exc

    def use_wal(self, db):
        """WAL, so that readers never block the writer; the mode persists in the file.

        Switching takes a moment of sole use and does not wait for it as other statements
        do: when another process is opening the same new file, try again until `timeout`.
        """
        deadline = time.monotonic() + self.timeout
        while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                db.execute("PRAGMA journal_mode=WAL")
                return  # WAL, or a mode this file cannot leave (":memory:")
            except sqlite3.OperationalError as exc:
                if _code(exc) not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or \
                        time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @property
    def closing(self):
        """Whether close() has begun: long upkeep stops at its next step."""
        return self._closing

    def wake(self):
        """Have the background thread run soon, as after a write."""
        self._wrote(UPKEEP_EVERY)

    def close_thread(self):
        """Close the calling thread's connection, if it has one."""
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            with self._lock:
                self._open.discard(db)
            db.close()
            _count_connections(self.path, -1)

    def write_handed(self):
        """Write the changes handed over that no transaction has taken yet."""
        if self.queue:
            with self.write():
                pass

    def close(self):
        """Close every connection this process opened here. Using it again reopens it."""
        with contextlib.suppress(sqlite3.Error, StoreError):
            self.write_handed()
        with self._lock:
            self._closing = True
            worker = self._worker
        if worker is not None:
            self._wake.set()
            worker.join()
        with self._lock:
            connections, self._open = self._open, set()
            self._closing = False
        for db in connections:
            db.close()  # the last connection to the file checkpoints it and removes the log
            _count_connections(self.path, -1)
        self._local = threading.local()

    def _wrote(self, n=1):
        """Count committed writes; start the background thread if it is not running, and
        wake it every UPKEEP_EVERY writes."""
        with self._lock:
            self._writes += n
            if self._worker is None and not self._closing:
                self._worker = threading.Thread(target=self._background, daemon=True,
                                                name="flood-memory upkeep")
                self._worker.start()
            due = self._writes >= UPKEEP_EVERY
        if due:
            self._wake.set()

    def _background(self):
        """Upkeep, then a PASSIVE checkpoint (it never blocks readers or writers, and copies
        what they allow), whenever woken or after a quiet UPKEEP_PAUSE. The thread ends after
        a quiet spell with nothing to do; the next write starts another."""
        try:
            while True:
                self._wake.wait(UPKEEP_PAUSE)
                self._wake.clear()
                with self._lock:
                    pending, self._writes = self._writes, 0
                    if self._closing or not pending:
                        self._worker = None
                        return
                try:
                    while self.upkeep is not None and not self._closing and self.upkeep():
                        pass
                    self.write_handed()
                    if not replicated(self.path):  # else Litestream checkpoints
                        self.connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except (sqlite3.Error, StoreError) as exc:
                    # The next write wakes it again; a closing store ends it.
                    log.debug("background upkeep skipped: %s", exc)
        finally:
            self.close_thread()


# ----------------------------------------------------------------------------- ranking index
#
# The words of ranking, from here to the end of the search section:
#
# - term: what the index holds for a word, its porter stem. df: how many memories hold a
#   term; N: how many memories there are; idf = log((N - df + 0.5) / (df + 0.5)), as in
#   FTS5's bm25(), which floors it at TINY_IDF.
# - impact: BM25's term-frequency part for one term in one memory (_impact). A memory's
#   score is the sum, over the query's terms, of idf times impact.
# - hot term: one so common (HOT_MIN_DF memories, and 1 in HOT_SHARE of them) that FTS5 would
#   score thousands of memories for it. It keeps an impact list: the memories where it
#   weighs most, best first, down to a floor. A cold term is any other: FTS5 finds its few
#   memories quickly.
# - faint term: one that half the memories or more hold; bm25 weighs it TINY_IDF, so it only
#   breaks ties. A strong term is a hot term that is not faint.
# - slack: the most the faint terms of a query can add to a score. When the query has other
#   words, a memory scoring no more than that holds faint terms only, and is no match.
# - theta: the n-th best score found so far. A class of memories whose bound stays below it
#   cannot enter the top n, so its search stops.
# - peak: the largest impact in a hot term's list. drift: how much impacts may have grown
#   since the list was made, as the average memory length grew.
# - pending: memories added or removed since the statistics were last brought up to date;
#   fold: count them in. fresh: pending memories that a search must score itself, as no
#   impact list holds them yet.
# - lender, follower: in stage two, one of the best matches lends a share of its score to
#   the memories stored right after it (its followers).

K1, B = 1.2, 0.75               # FTS5's bm25() constants
RERANK_K1, RERANK_B = 0.6, 0.3  # stage two: a long memory is penalised less for its length
RERANK_DEPTH = 25               # stage-one results that stage two re-scores
FOLLOWERS = (0.3, 0.3)          # share of a match's score lent to the next two memories...
PRECEDER = 0.2                  # ...and to the one memory stored just before it
WHEN = 0.3                      # stage two: asked "when", one that says when weighs this much more
LENDERS = 10                    # stage-two matches that lend
HOT_MIN_DF = 500                # a term is hot once this many memories hold it...
HOT_SHARE = 50                  # ...and at least 1 in HOT_SHARE of them do
HOT_LIST = 1000                 # length of a hot term's impact list
TINY_IDF = 1e-6                 # FTS5's idf for a term that half the memories or more hold
TIE_EXTRA = 64                  # results beyond a cut fetched to settle ties there
TAG_SCAN_COST = 10              # scoring a memory in Python costs this many FTS5 matches
FOLD_BATCH = 64                 # pending changes folded in one transaction
PENDING_MAX = 512               # a write folds a batch itself once the log holds this many
FOLD_BUILDS = 2                 # impact lists a fold makes at most
RARE = 16                       # terms.nodes lists the memories of a term held by this few
NEAR_JACCARD = 0.42             # remember's hint: distinctive terms this similar...
NEAR_SHARED = 2                 # ...and at least this many of them in common
NEAR_RARE = 2                   # rare terms a memory must share to be compared at all...
NEAR_CANDIDATES = 3             # ...and the memories sharing the most of them that are
NEAR_LISTED = 3                 # similar memories listed at most...
NEAR_SHOWN = 120                # ...each with this many characters of its content


def _idf(df, n):
    """FTS5's inverse document frequency, floored at TINY_IDF as bm25() floors it."""
    value = math.log((n - df + 0.5) / (df + 0.5))
    return value if value > 0 else TINY_IDF


def _impact(tf, dl, avgdl, k1=K1, b=B):
    """BM25's term-frequency part for `tf` occurrences in a memory of `dl` tokens."""
    return tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))


def _varint(data, i=0):
    """The SQLite varint in `data` at `i`, and the index after it."""
    value = 0
    for j in range(i, i + 8):
        value = (value << 7) | (data[j] & 0x7F)
        if data[j] < 0x80:
            return value, j + 1
    return (value << 8) | data[i + 8], i + 9


# A memory's text as the ranking index counts it: {term: [occurrences, a word of the text
# that stems to it]}, how many tokens FTS5 counts in it, and its distinctive terms (those of
# its words that are not stopwords; all its terms if it has no other words), which the
# near-duplicate hint compares. One pass over the words gives all three.
Counted = collections.namedtuple("Counted", "counts length distinctive")

_COUNTS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _counted(text, distinctive=False):
    """The Counted record of a memory's text (its distinctive terms None unless asked for:
    a load does without them)."""
    counts, mine = {}, set()
    words = tokenize(text)
    for word in words:
        term = stem(word)
        entry = counts.get(term)
        if entry is None:
            counts[term] = [1, word]
        else:
            entry[0] += 1
        if distinctive and word not in STOPWORDS:
            mine.add(term)
    return Counted(counts, len(words), (mine or set(counts)) if distinctive else None)


# A hot term's entry: its list's floor, the average length its impacts were taken at, how
# many memories the list holds, and (when asked for) its largest impact.
HotTerm = collections.namedtuple("HotTerm", "floor avgdl size peak")


class RankingIndex:
    """The statistics a search ranks by: how many memories hold each term (`terms`), the
    impact lists of hot terms (`hot_terms`, `hot_postings`), and the log of changes not yet
    counted in them (`pending`); every read of FTS5's internal tables is here. A write only
    appends to the log (note), the background thread folds it in (fold), and a search adds
    what is still in it (pending): ranking is always exact. `hot_min_df` and `hot_list`
    tune it (tests make them small)."""

    def __init__(self, hot_min_df=HOT_MIN_DF, hot_list=HOT_LIST):
        self.hot_min_df = hot_min_df
        self.hot_list = hot_list
        self._common = set()  # terms seen held by more than RARE memories (see holders)
        self._parsed = {}     # a log row's counts (JSON) -> its terms (see _logged)
        self._writes = 0      # writes logged by this process (see keep_up)

    # -- FTS5's own records

    def averages(self, db):
        """(memories, tokens) in the full-text index, from FTS5's own averages record."""
        row = db.execute("SELECT block FROM nodes_fts_data WHERE id = 1").fetchone()
        if not row or not row[0]:
            return 0, 0
        count, i = _varint(row[0])
        return count, _varint(row[0], i)[0]

    def lengths(self, db, rowids):
        """{rowid: tokens} as FTS5 counted them (its docsize table)."""
        out = {}
        for chunk in _chunks(rowids):
            out.update((r, _varint(size)[0]) for r, size in db.execute(
                f"SELECT id, sz FROM nodes_fts_docsize WHERE id IN ({_marks(chunk)})", chunk))
        return out

    # -- what a search reads

    def df(self, db, terms):
        """{term: df} as of the last fold, for the terms any memory holds."""
        out = {}
        for chunk in _chunks(list(terms)):
            out.update(db.execute(f"SELECT term, df FROM terms WHERE term IN ({_marks(chunk)})",
                                  chunk))
        return out

    def counted(self, db, terms):
        """({term: df} as of now: the last fold's, changed by the log; the rowids of the
        memories added since the last fold that hold one of `terms`)."""
        delta, fresh = self.pending(db, terms)
        df = self.df(db, terms)
        for term, change in delta.items():
            df[term] = df.get(term, 0) + change
        return df, fresh

    def pending(self, db, terms):
        """What the log adds for `terms`: (Counter of df changes, rowids of memories added
        since the last fold that hold one of the terms)."""
        delta, fresh = collections.Counter(), {}
        for node, sign, held in self._logged(db, frozenset(terms)):
            for term in held:
                delta[term] += sign
            if sign < 0:
                fresh.pop(node, None)
            else:
                fresh[node] = None
        return delta, list(fresh)

    def _logged(self, db, terms):
        """[(rowid, sign, terms held)] of the rows of the log holding one of `terms`, oldest
        first, as they are now: the log is short (the background thread folds it soon after
        the writes). Each row's terms are parsed once per process and kept by the row's
        text, which nothing can make stale (a restore brings other rows, under the same seqs
        maybe)."""
        out, parsed = [], self._parsed
        for node, sign, counts in db.execute("SELECT node, sign, counts FROM pending ORDER BY seq"):
            held = parsed.get(counts)
            if held is None:
                if len(parsed) >= 4096:
                    parsed.clear()
                held = parsed[counts] = frozenset(json.loads(counts))
            if not held.isdisjoint(terms):
                out.append((node, sign, held & terms))
        return out

    def hot_terms(self, db, terms, peaks=False):
        """{term: HotTerm} for the hot ones among `terms`; `peak` is None unless asked for."""
        peak = ("(SELECT max(impact) FROM hot_postings p WHERE p.term = h.term)" if peaks
                else "NULL")
        out = {}
        for chunk in _chunks(list(terms)):
            out.update((row[0], HotTerm(*row[1:])) for row in db.execute(
                f"SELECT term, floor, avgdl, size, {peak} FROM hot_terms h "
                f"WHERE term IN ({_marks(chunk)})", chunk))
        return out

    # -- upkeep

    def note(self, db, node, sign, counted):
        """Log that the memory at rowid `node` with this text (its Counted record) was added
        (+1) or is about to be removed or given new content (-1)."""
        db.execute("INSERT INTO pending (node, sign, counts, length) VALUES (?, ?, ?, ?)",
                   (node, sign, _COUNTS.encode(counted.counts), counted.length))

    def keep_up(self, db):
        """Fold a batch now, inside the caller's write, if the log has grown past PENDING_MAX
        (the background thread fell behind, or is not running). Looked at every 32nd write."""
        self._writes += 1
        if self._writes % 32:
            return
        span = db.execute("SELECT max(seq) - min(seq) FROM pending").fetchone()[0]
        if span is not None and span >= PENDING_MAX:
            self.fold(db)

    def fold(self, db, limit=FOLD_BATCH):
        """Count up to `limit` logged changes, oldest first, into terms and the impact lists
        (inside the caller's write transaction); how many it counted."""
        rows = db.execute("SELECT seq, node, sign, counts, length FROM pending ORDER BY seq "
                          "LIMIT ?", (limit,)).fetchall()
        if not rows:
            return 0
        delta, words, touched, added = collections.Counter(), {}, set(), {}
        held = collections.defaultdict(dict)  # term -> {rowid: sign of its last change}
        for _, node, sign, counts, length in rows:
            counts = json.loads(counts)
            for term, (_, word) in counts.items():
                delta[term] += sign
                words.setdefault(term, word)
                held[term][node] = sign
            touched.add(node)
            if sign < 0:
                added.pop(node, None)
            else:
                added[node] = (counts, length)
        self._count(db, delta, words, held, touched, added)
        db.execute("DELETE FROM pending WHERE seq <= ?", (rows[-1][0],))
        return len(rows)

    def count_loaded(self, db, docs):
        """Count memories just inserted in bulk, [(rowid, Counted)], straight in (no log)."""
        delta, words, added = collections.Counter(), {}, {}
        held = collections.defaultdict(dict)
        for rowid, (counts, length, _) in docs:
            added[rowid] = (counts, length)
            for term, (_, word) in counts.items():
                delta[term] += 1
                words.setdefault(term, word)
                held[term][rowid] = 1
        self._count(db, delta, words, held, (), added)

    def _count(self, db, delta, words, held, touched, added):
        """Apply df changes `delta` and the changes `held` ({term: {rowid: +1 or -1}}) to the
        holders of rare terms; drop the impacts of the memories at `touched`, add those of
        `added` ({rowid: (counts, length)}), and keep every impact list to size."""
        self._count_terms(db, delta, words, held)
        shrunk = collections.Counter()
        for chunk in _chunks(list(touched)):
            marks = _marks(chunk)
            shrunk.update(t for (t,) in db.execute(
                f"SELECT term FROM hot_postings WHERE node IN ({marks})", chunk))
            db.execute(f"DELETE FROM hot_postings WHERE node IN ({marks})", chunk)
        hot = self.hot_terms(db, delta.keys() | shrunk.keys())
        members, grown = [], collections.Counter()
        for rowid, (counts, length) in added.items():
            for term in counts.keys() & hot.keys():
                impact = _impact(counts[term][0], length, hot[term].avgdl)
                if impact > hot[term].floor:
                    members.append((term, impact, rowid))
                    grown[term] += 1
        db.executemany("INSERT INTO hot_postings (term, impact, node) VALUES (?, ?, ?)",
                       members)
        changed = grown.keys() | shrunk.keys()
        db.executemany("UPDATE hot_terms SET size = size + ? WHERE term = ?",
                       [(grown[t] - shrunk[t], t) for t in changed])
        for term in changed:
            size = hot[term].size + grown[term] - shrunk[term]
            if size > 2 * self.hot_list:
                self._trim(db, term)
            elif hot[term].floor > 0 and size < self.hot_list // 4:
                self._build(db, term, words.get(term, term))
        fresh = [t for t, n in delta.items() if n > 0 and t not in hot]
        if fresh:
            count, _ = self.averages(db)
            threshold = max(self.hot_min_df, count // HOT_SHARE)
            # A few per fold: after a recount, one memory's words could call for dozens, each
            # a search of its own, in one transaction. Until its list is made a term is
            # searched through FTS5 (exact, only slower), and a later fold makes it.
            due = [t for t, df in self.df(db, fresh).items() if df >= threshold]
            for term in due[:FOLD_BUILDS]:
                self._build(db, term, words[term])

    def _count_terms(self, db, delta, words, held):
        """New df of the terms in `delta`, and their holders while they are rare."""
        changed = list(held)  # a term's holders may change while its df stays the same
        before = {}
        for chunk in _chunks(changed):
            before.update((t, (df, nodes)) for t, df, nodes in db.execute(
                f"SELECT term, df, nodes FROM terms WHERE term IN ({_marks(chunk)})", chunk))
        rows, gone = [], []
        for term in changed:
            df, nodes = before.get(term, (0, ""))
            if not delta[term] and nodes is None:
                continue  # common before and after: nothing to write
            df += delta[term]
            if df <= 0:
                gone.append((term,))
                continue
            if df > RARE:
                nodes = None
            elif nodes is None:  # common until now: ask the index who holds it
                nodes = _rowid_list(r for (r,) in db.execute(
                    "SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ?",
                    (fts_query([words[term]]),)))
            else:
                holders = set(map(int, nodes.split()))
                for rowid, sign in held[term].items():
                    (holders.add if sign > 0 else holders.discard)(rowid)
                nodes = _rowid_list(holders)
            rows.append((term, df, nodes))
        db.executemany("INSERT INTO terms (term, df, nodes) VALUES (?, ?, ?) ON CONFLICT (term) "
                       "DO UPDATE SET df = excluded.df, nodes = excluded.nodes", rows)
        db.executemany("DELETE FROM terms WHERE term = ?", gone)

    def holders(self, db, terms):
        """{term: rowids of the memories holding it} for the rare ones among `terms` (held
        by RARE memories or fewer), the log included.

        Terms seen to be common are remembered for a while and not looked up again: most
        words of a memory are, and a remember asks for all of its words. One that turns rare
        again is missed until the memory of them is cleared.
        """
        out, common = {}, self._common
        asked = [t for t in terms if t not in common]
        for chunk in _chunks(asked):
            for term, nodes in db.execute(
                    f"SELECT term, nodes FROM terms WHERE term IN ({_marks(chunk)})", chunk):
                if nodes is None:
                    if len(common) >= 100_000:
                        common.clear()
                    common.add(term)
                else:
                    out[term] = set(map(int, nodes.split())) if nodes else set()
        for node, sign, held in self._logged(db, frozenset(terms) - common):
            for term in held:
                holders = out.setdefault(term, set())
                (holders.add if sign > 0 else holders.discard)(node)
        return {t: h for t, h in out.items() if 0 < len(h) <= RARE}

    def build_missing(self, db, deadline=None):
        """Make the impact lists that terms common enough lack (after a recount), the most
        common first; past time.monotonic() `deadline`, stop, saying True if some are left."""
        count, _ = self.averages(db)
        threshold = max(self.hot_min_df, count // HOT_SHARE)
        missing = [t for (t,) in db.execute(
            "SELECT term FROM terms WHERE df >= ? AND term NOT IN (SELECT term FROM hot_terms) "
            "ORDER BY df DESC", (threshold,))]
        if missing:
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.nodes_vocab_instance "
                       "USING fts5vocab(main, nodes_fts, instance)")
        for n, term in enumerate(missing):
            if n and deadline is not None and time.monotonic() > deadline:
                return True
            row = db.execute("SELECT doc FROM temp.nodes_vocab_instance WHERE term = ? LIMIT 1",
                             (term,)).fetchone()
            text = db.execute("SELECT content FROM nodes WHERE rowid = ?", (row[0],)).fetchone()
            # A word of that memory that stems to the term, for FTS5 to look the term up by.
            word = next((w for w in tokenize(text[0]) if stem(w) == term), term)
            self._build(db, term, word)
        return False

    def _build(self, db, term, word):
        """Make the impact list of `term` (which `word` stems to) from the index."""
        count, tokens = self.averages(db)
        if not count:
            return
        avgdl = tokens / count
        query = fts_query([word])
        found = db.execute(
            "SELECT rowid, -bm25(nodes_fts) FROM nodes_fts WHERE nodes_fts MATCH ? "
            "ORDER BY bm25(nodes_fts) LIMIT ?", (query, self.hot_list + 1)).fetchall()
        lengths = self.lengths(db, [r for r, _ in found])
        # FTS5's score of a memory for the one term is idf times its impact: the term's
        # occurrences in it follow, and the impact is taken from them as ever, without
        # reading and tokenizing the memories. A memory whose score does not give a whole
        # number of occurrences (none seen) is read.
        df = db.execute("SELECT count(*) FROM nodes_fts WHERE nodes_fts MATCH ?",
                        (query,)).fetchone()[0]
        idf = _idf(df, count)
        impacts, unsure = [], []
        for rowid, score in found:
            dl, share = lengths[rowid], score / idf
            spread = K1 * (1 - B + B * dl / avgdl)
            tf = round(share * spread / (K1 + 1 - share)) if 0 < share < K1 + 1 else 0
            impact = _impact(tf, dl, avgdl) if tf > 0 else None
            if impact is not None and abs(impact - share) <= 1e-9 * share:
                impacts.append((impact, rowid))
            else:
                unsure.append(rowid)
        prefix = term[:max(1, len(term) - 3)]  # only such words can stem to the term
        for chunk in _chunks(unsure):
            for rowid, content in db.execute(
                    f"SELECT rowid, content FROM nodes WHERE rowid IN ({_marks(chunk)})", chunk):
                tf = sum(1 for w in tokenize(content) if w.startswith(prefix) and stem(w) == term)
                if tf:
                    impacts.append((_impact(tf, lengths[rowid], avgdl), rowid))
        impacts.sort(reverse=True)
        floor = impacts[self.hot_list][0] if len(impacts) > self.hot_list else 0.0
        members = [(term, impact, rowid) for impact, rowid in impacts if impact > floor]
        db.execute("DELETE FROM hot_postings WHERE term = ?", (term,))
        db.executemany("INSERT INTO hot_postings (term, impact, node) VALUES (?, ?, ?)", members)
        db.execute("INSERT OR REPLACE INTO hot_terms (term, floor, avgdl, size) "
                   "VALUES (?, ?, ?, ?)", (term, floor, avgdl, len(members)))

    def _trim(self, db, term):
        """Raise the floor of an impact list grown too long, back to `hot_list` members."""
        row = db.execute("SELECT impact FROM hot_postings WHERE term = ? ORDER BY impact DESC "
                         "LIMIT 1 OFFSET ?", (term, self.hot_list)).fetchone()
        if row is None:
            return
        db.execute("DELETE FROM hot_postings WHERE term = ? AND impact <= ?", (term, row[0]))
        size = db.execute("SELECT count(*) FROM hot_postings WHERE term = ?", (term,)).fetchone()[0]
        db.execute("UPDATE hot_terms SET floor = max(floor, ?), size = ? WHERE term = ?",
                   (row[0], size, term))

    # -- checking

    def problems(self, db):
        """Ways the statistics disagree with the memories, in words; [] when they agree.

        Reads every memory: for tests and for checking a database by hand.
        """
        problems = []
        counted = {rowid: term_counts(text) for rowid, text in
                   db.execute("SELECT rowid, content FROM nodes")}
        df = collections.Counter(t for counts in counted.values() for t in counts)
        now = collections.Counter(dict(db.execute("SELECT term, df FROM terms")))
        logged = set()
        for node, sign, counts in db.execute("SELECT node, sign, counts FROM pending"):
            now.update({t: sign for t in json.loads(counts)})
            logged.add(node)
        now = {t: n for t, n in now.items() if n}
        if now != dict(df):
            wrong = sorted(set(now.items()) ^ set(df.items()))[:5]
            problems.append(f"terms and the log disagree with the memories: {wrong}")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.nodes_vocab "
                   "USING fts5vocab(main, nodes_fts, row)")
        if dict(db.execute("SELECT term, doc FROM temp.nodes_vocab")) != dict(df):
            problems.append("the terms of the memories disagree with FTS5's vocabulary")
        stored = db.execute("SELECT rowid, content, tags, created_at FROM nodes").fetchall()
        tags = {(t, created, rowid) for rowid, _, tagged, created in stored
                for t in _strings(tagged)}
        if set(db.execute("SELECT tag, created_at, node FROM node_tags")) != tags:
            problems.append("node_tags disagrees with nodes.tags")
        used = collections.Counter(t for t, _, _ in tags)
        if set(db.execute("SELECT tag, folded, memories FROM tags")) != \
                {(t, t.casefold(), n) for t, n in used.items()}:
            problems.append("the tags table disagrees with the memories' tags")
        prints = {(_fingerprint(text, _strings(tagged)), rowid)
                  for rowid, text, tagged, _ in stored}
        if set(db.execute("SELECT hash, node FROM fingerprints")) != prints:
            problems.append("fingerprints disagree with the memories")
        holders = collections.defaultdict(set)
        for rowid, counts in counted.items():
            for term in counts:
                holders[term].add(rowid)
        listed = {t: nodes for t, df, nodes in db.execute("SELECT term, df, nodes FROM terms")
                  if df <= RARE or nodes is not None}
        if any(nodes is None for nodes in listed.values()):
            problems.append("a rare term has no list of its memories")
        found = self.holders(db, [t for t, nodes in listed.items() if nodes is not None])
        wrong = [t for t in found if found[t] != holders[t]]
        if wrong:
            problems.append(f"the lists of rare terms are wrong for {sorted(wrong)[:5]}")
        lengths = self.lengths(db, list(counted))
        for term, floor, avgdl, size in db.execute("SELECT * FROM hot_terms").fetchall():
            members = {r for (r,) in db.execute("SELECT node FROM hot_postings WHERE term = ?",
                                                (term,))}
            if len(members) != size:
                problems.append(f"impact list of {term!r} has {len(members)} rows, says {size}")
            strays = [r for r in members - logged if not counted.get(r, {}).get(term)]
            if strays:
                problems.append(f"impact list of {term!r} holds memories without it: {strays[:5]}")
            for rowid, counts in counted.items():
                if counts[term] and rowid not in logged and \
                        (_impact(counts[term], lengths[rowid], avgdl) > floor) != (rowid in members):
                    problems.append(f"impact list of {term!r} is wrong about memory {rowid}")
                    break
        return problems


# ----------------------------------------------------------------------------- search

# What a search reads of one memory: occurrences of each of its terms (in Search.terms
# order), the memory's length in tokens, its tags column (JSON), its created_at, and whether
# it asks something (holds a "?").
Features = collections.namedtuple("Features", "counts length tags created asks")

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


# What says when something happened, in English: a year or decade, a date, a month, a day of
# the week, a time of day, or a time relative to now ("last week", "two days ago",
# "recently"). "May" and "March" count only next to a number (they are words too), and
# month abbreviations only before one. For lowered text (cheaper than asking the expression
# to ignore case). Asked when, the answer is likely a memory that gives a time:
# 47% of the facts and 82% of the dialog turns that answer a LoCoMo dev question asking
# when match, against 13% and 16% of all. They weigh WHEN more in stage two (temporal
# questions' recall@5: facts 0.806 -> 0.814, dialog 0.780 -> 0.812).
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


class _ScanInstead(Exception):
    """Raised inside stage one when scoring every tagged memory costs less than going on."""


class Search:
    """One search, inside one read transaction: its words, their statistics, and every
    memory it has read. Stage one (`top`) finds the best memories by BM25 exactly as FTS5's
    bm25() scores them, without FTS5 scoring every memory that holds a common word; stage two
    (`rerank`) re-scores those few with flatter length normalisation and lets a strong match
    lend weight to the memories stored next to it. `trace(path)` hears which way stage one
    answered (for the benchmark)."""

    def __init__(self, db, index, words, tags=(), trace=None, since=None, until=None,
                 when=False):
        self.db = db
        self.when = when  # the question asks when: stage two favours memories that say when
        self.index = index
        self.tags = list(tags)  # the spellings of each tag asked
        self.wanted = frozenset(s[0].casefold() for s in self.tags)  # the tags, folded
        self.since, self.until = since, until  # created_at window, in the stored form
        self.filtered = bool(self.tags) or since is not None or until is not None
        self.trace = trace or (lambda path: None)
        self.count, tokens = index.averages(db)
        self.avgdl = tokens / self.count if self.count else 1.0
        terms = [stem(w) for w in words]
        self.word_of = dict(zip(terms, words))
        df, self.fresh = index.counted(db, terms)
        self.terms = [t for t in dict.fromkeys(terms) if df.get(t)]
        self.df = df
        self.idf = {t: _idf(df[t], self.count) for t in self.terms}
        # Porter rewrites at most the last few letters of a word, so only words starting
        # like a term can stem to it: the others need no stemming.
        self.prefixes = tuple(t[:max(1, len(t) - 3)] for t in self.terms)
        # In ASCII text a word is a run of [a-z0-9] once lowered (as tokenize has it): the
        # words starting like a term are found by one regular expression, in C, instead of
        # splitting every word out and asking each (a scan of many memories spends its time
        # there).
        ascii_prefixes = sorted({re.escape(p) for p in self.prefixes if p.isascii()})
        self.ascii_words = re.compile(
            f"(?<![a-z0-9])(?:{'|'.join(ascii_prefixes)})[a-z0-9]*") if ascii_prefixes else None
        self.features = {}   # rowid -> Features, for both stages
        self.scored = {}     # stage one: rowid -> score, None when it lacks the tags
        self.best = []       # stage one: the n best so far, as (-score, rowid)
        self.kept = None     # how many memories pass the filter (at most what matters), once asked
        self.span = None     # the rowids the window spans, once asked (see _span)

    # -- reading memories

    def _bm25(self, words, limit, within=None, margin=0.0):
        """[(score, rowid)] of FTS5's best `limit` for the words OR-ed, within the tags.

        With `within`, only memories holding one of those words too count, and they score
        for both. With a margin, results scoring within `margin` of the last one come too
        (up to TIE_EXTRA more), so that words left out of the expression can still decide
        between them.
        """
        expression = fts_query(words)
        if within:
            expression = f"({fts_query(within)}) AND ({expression})"
        joins, carrying = self._where("nodes_fts.rowid")
        extra = TIE_EXTRA if margin else 0
        rows = self.db.execute(
            f"SELECT -bm25(nodes_fts), nodes_fts.rowid FROM nodes_fts{joins} "
            f"WHERE nodes_fts MATCH ? ORDER BY bm25(nodes_fts), nodes_fts.rowid LIMIT ?",
            (*carrying, expression, limit + extra)).fetchall()
        if len(rows) > limit:
            cut = rows[limit - 1][0] - margin
            rows = rows[:limit] + [row for row in rows[limit:] if row[0] >= cut]
        return rows

    def _where(self, column):
        """(SQL, parameters) of joins that keep only the memories at `column` that carry the
        tags and were created in the window."""
        sql, parameters = _carrying(self.tags, column)
        if self.since is not None or self.until is not None:
            sql += f" JOIN nodes w ON w.rowid = {column}"
            for bound, op in ((self.since, ">="), (self.until, "<")):
                if bound is not None:
                    sql += f" AND w.created_at {op} ?"
                    parameters.append(bound)
            sql += f" AND {column} BETWEEN ? AND ?"
            parameters.extend(self._span())
        return sql, parameters

    def _span(self):
        """(first, last) rowid of the memories created in the window, and the share of all
        rowids that range covers. FTS5 skips to the range instead of scoring every memory
        that holds a word and then dropping those of other times; memories are mostly
        stored in time order, so the range is narrow."""
        if self.span is None:
            first, last, top = self.db.execute(
                f"SELECT min(rowid), max(rowid), (SELECT max(rowid) FROM nodes) FROM nodes "
                f"WHERE 1{' AND created_at >= ?' if self.since is not None else ''}"
                f"{' AND created_at < ?' if self.until is not None else ''}",
                [b for b in (self.since, self.until) if b is not None]).fetchone()
            share = (last - first + 1) / top if first is not None else 0.0
            self.span = (first, last, share)
        return self.span[:2]

    def _in_window(self, created):
        return (self.since is None or created >= self.since) and \
            (self.until is None or created < self.until)

    def _read(self, rowids, tagged=False, window=False):
        """{rowid: Features} of the memories at `rowids` (that carry every tag asked, with
        `tagged`, and were created in the window, with `window`); each memory is read once
        per search."""
        known, terms, prefixes = self.features, self.terms, self.prefixes
        missing = [r for r in rowids if r not in known]
        none = [0] * len(terms)  # shared by the memories holding no term: never changed
        for chunk in _chunks(missing):
            for rowid, content, tagged, created, size in self.db.execute(
                    f"SELECT n.rowid, n.content, n.tags, n.created_at, d.sz FROM nodes n LEFT "
                    f"JOIN nodes_fts_docsize d ON d.id = n.rowid "
                    f"WHERE n.rowid IN ({_marks(chunk)})", chunk):
                if not content.isascii():
                    words = [w for w in tokenize(content) if w.startswith(prefixes)]
                else:
                    lowered = content.lower()
                    words = self.ascii_words.findall(lowered) if any(
                        p in lowered for p in prefixes) else ()
                if words:
                    found = collections.Counter(map(stem, words))
                    counts = [found[t] for t in terms]
                else:
                    counts = none
                known[rowid] = Features(counts,
                                        _varint(size)[0] if size else 0, tagged or "[]",
                                        created, "?" in content)
        wanted = self.wanted if tagged else ()
        return {r: known[r] for r in rowids if r in known and
                (not wanted or wanted <= _folded_tags(known[r].tags)) and
                (not window or self._in_window(known[r].created))}

    # -- stage one

    def top(self, n):
        """Stage one: the `n` best memories by FTS5's bm25() of the words OR-ed, exactly, as
        [(score, rowid)], best first, ties to the older memory.

        One exception to bm25: a faint word only breaks ties, so when the query has other
        words, a memory holding nothing but faint words is no match.

        Scoring every memory that holds a common word would read much of the index, so the
        memories are taken class by class, by which query terms they hold: those holding a
        cold term through FTS5; those holding one hot term and nothing rarer from its impact
        list; those holding two or more hot terms through FTS5 AND queries. A class's search
        stops as soon as a bound shows that the rest of it cannot reach theta. When tags
        leave so few memories that scoring them all is cheaper, that is done instead.
        """
        if not self.terms:
            return []
        self.n = n
        idf, word_of = self.idf, self.word_of
        faint = [t for t in self.terms if idf[t] == TINY_IDF]
        self.slack = (K1 + 1) * TINY_IDF * len(faint) if len(faint) < len(self.terms) else 0.0
        self.hot = self.index.hot_terms(self.db, self.terms, peaks=True)
        if not self.hot:
            self.trace("plain")
            return self._matches(self._bm25([word_of[t] for t in self.terms], n))
        cold = [t for t in self.terms if t not in self.hot]
        strong = sorted((t for t in self.hot if idf[t] > TINY_IDF), key=lambda t: -idf[t])
        faint = [t for t in self.hot if idf[t] == TINY_IDF]
        self.drift = {t: max(1.0, self.avgdl / h.avgdl) for t, h in self.hot.items()}
        self.peak = {t: idf[t] * self.drift[t] * max(h.peak or 0.0, h.floor)
                     for t, h in self.hot.items()}
        self._score(self.fresh)  # logged since the last fold: in no impact list yet
        if cold:
            self._cold_class(cold, strong)
        try:
            self._search_hot(strong, self.slack)
            if not self.slack:  # a query of faint words alone: they are all there is
                if len(faint) > 1 and self._heads_of_lists(faint):
                    self.trace("faint words")
                    return self._matches(self._ranked())
                self._search_hot(faint, 0.0)
        except _ScanInstead:
            self.trace("tag scan")
            self._scan()
        else:
            self.trace("classes")
        return self._matches(self._ranked())

    def _matches(self, results):
        """The first n of `results` that hold more than faint words."""
        return [(s, r) for s, r in results if s > self.slack * (1 + 1e-9)][:self.n]

    def _ranked(self):
        return [(-s, r) for s, r in self.best]

    def _score(self, rowids):
        """Score the memories at `rowids` in full, and keep the n best of all scored."""
        idf, avgdl = self.idf, self.avgdl
        rowids = [r for r in rowids if r not in self.scored]
        for rowid, features in self._read(rowids, tagged=True, window=True).items():
            self.scored[rowid] = sum(idf[t] * _impact(tf, features.length, avgdl)
                                     for t, tf in zip(self.terms, features.counts) if tf)
        for rowid in rowids:
            self.scored.setdefault(rowid, None)
        self.best = heapq.nsmallest(self.n, ((-s, r) for r, s in self.scored.items()
                                             if s is not None))

    def _theta(self):
        return -self.best[-1][0] if len(self.best) >= self.n else 0.0

    def _cold_class(self, cold, strong):
        """Memories holding a cold term: first by their cold part alone, then, if those
        holding a strong term too could still rise, FTS5 scores them whole."""
        word_of, n, slack = self.word_of, self.n, self.slack
        cold_words = [word_of[t] for t in cold]
        depth = max(n, 32)
        rows = self._bm25(cold_words, depth, margin=slack)
        self._score([r for _, r in rows])
        if strong and len(rows) >= depth and self._theta() < \
                rows[depth - 1][0] + sum(self.peak[t] for t in strong) + slack:
            self._score([r for _, r in self._bm25([word_of[t] for t in strong], n,
                                                  within=cold_words, margin=slack)])

    def _postings(self, term, limit=-1):
        """The impact list of `term`, best first, less memories without the tags."""
        joins, carrying = self._where("p.node")
        return self.db.execute(f"SELECT p.node, p.impact FROM hot_postings p{joins} WHERE "
                               f"p.term = ? ORDER BY p.impact DESC, p.node DESC LIMIT ?",
                               (*carrying, term, limit))

    def _scan_if_cheaper(self, matches):
        """With tags or a window: raise _ScanInstead when scoring every memory they keep
        costs less than FTS5 scoring `matches` memories (it costs some ten times more per
        memory). In a window FTS5 reads only the rowids it spans (see _span)."""
        if not self.filtered:
            return
        if self.since is not None or self.until is not None:
            self._span()
            matches *= self.span[2]
        if self.kept is None:
            # Counted only as far as the largest df could make a scan worth it.
            cap = max(self.df[t] for t in self.terms) // TAG_SCAN_COST + 1
            self.kept = min(self.db.execute(f"SELECT count(*) FROM ({sql} LIMIT ?)",
                                            (*parameters, cap)).fetchone()[0]
                            for sql, parameters in self._kept_sql())
        if self.kept * TAG_SCAN_COST < matches:
            raise _ScanInstead

    def _kept_sql(self):
        """[(SQL, parameters)] selecting the rowids of the memories with each tag (in the
        window), or of those in the window when there are no tags."""
        window, bounds = "", []
        for bound, op in ((self.since, ">="), (self.until, "<")):
            if bound is not None:
                window += f" AND created_at {op} ?"
                bounds.append(bound)
        if not self.tags:
            return [(f"SELECT rowid FROM nodes WHERE 1{window}", bounds)]
        return [(f"SELECT node FROM node_tags WHERE tag IN ({_marks(spellings)}){window}",
                 [*spellings, *bounds]) for spellings in self.tags]

    def _scan(self):
        """Score every memory the tags and window keep: then nothing is left to settle."""
        sql, parameters = self._kept_sql()[0]
        cursor = self.db.execute(sql, parameters)
        while rows := cursor.fetchmany(500):
            self._score([r for (r,) in rows])

    def _heads_of_lists(self, group):
        """Memories heading the impact lists of `group`, each scored in full; True if they
        are n at least. Not exhaustive: memories ranked lower in every list but holding
        several of the words may score higher. For words this common (bm25 gives each
        1e-6) that is not worth scoring most of the index for."""
        for term in group:
            limit = max(self.n, 50) if not self.tags else self.index.hot_list
            self._score([r for r, _ in self._postings(term, limit)])
        return len(self.best) >= self.n

    def _search_hot(self, group, margin):
        """The classes of memories holding hot terms of `group` and nothing rarer."""
        idf, hot, drift, word_of = self.idf, self.hot, self.drift, self.word_of
        for term in group:  # holding one of them: its impact list, best first
            cursor = self._postings(term)
            while rows := cursor.fetchmany(max(self.n, 16)):
                self._score([r for r, _ in rows])
                if idf[term] * rows[-1][1] * drift[term] + margin < self._theta():
                    break
            if idf[term] * hot[term].floor * drift[term] + margin > self._theta():
                # The list cannot settle the class (tags thin it out): FTS5 can, or when
                # the tagged memories are few, scoring them all.
                self._scan_if_cheaper(self.df[term])
                self.trace("single-term query")
                self._score([r for _, r in self._bm25([word_of[term]], self.n, margin=margin)])
        for i, term in enumerate(group):  # holding two or more: FTS5 AND queries
            rest = group[i + 1:]
            if not rest or sum(self.peak[u] for u in group[i:]) + margin <= self._theta():
                break
            self._scan_if_cheaper(self.df[term])
            self._score([r for _, r in self._bm25([word_of[u] for u in rest], self.n,
                                                  within=[word_of[term]], margin=margin)])

    # -- stage two

    def rerank(self, first, limit):
        """Stage two: re-score stage one's best, then let the LENDERS best lend weight.

        Scores use RERANK_K1/B, which judge a long memory less harshly by its length; asked
        when, a memory that says when weighs WHEN more (see _SAYS_WHEN). Then each of the best
        lends FOLLOWERS of its score to the next memories stored after it, and PRECEDER to
        the one stored just before it, where they carry the same tags: memories stored
        together share a context (in a conversation, the memory after a matching question
        is often its answer; notes written from one exchange sit next to each other). Only
        a memory holding a query term that is not faint gains, or one right after a memory
        that asks something ("?"): an answer need not repeat the question's words. Lent
        weight lifts a memory to just below the score of its strongest lender at most: a
        neighbour never overtakes the memory it is next to (it may pass a weaker lender, as
        the stronger one vouches for it). Returns [(score, rowid)], best first.
        """
        if not first:
            return []
        terms, idf, avgdl = self.terms, self.idf, self.avgdl

        def score(rowids):
            features = self._read(rowids)
            dated = {r for r, text in self._contents(features).items()
                     if _SAYS_WHEN.search(text.lower())} if self.when else ()
            return {r: (1 + WHEN if r in dated else 1) *
                    sum(idf[t] * _impact(tf, f.length, avgdl, RERANK_K1, RERANK_B)
                        for t, tf in zip(terms, f.counts) if tf)
                    for r, f in features.items()}, features

        scores, features = score([r for _, r in first])
        lenders = heapq.nsmallest(LENDERS, scores, key=lambda r: (-scores[r], r))
        ahead = 2 * len(FOLLOWERS)
        window = sorted({r + k for r in lenders for k in range(-2, ahead + 1) if k})
        stored = dict(self.db.execute(
            f"SELECT rowid, tags FROM nodes WHERE rowid IN ({_marks(window)})", window))
        lent = collections.Counter()
        cap = {}
        answers = set()  # memories right after one that asks: they need not match the query
        for lender in lenders:
            following = [r for r in range(lender + 1, lender + ahead + 1)
                         if r in stored][:len(FOLLOWERS)]
            if len(following) < len(FOLLOWERS):  # a gap: memories forgotten in between
                rows = self.db.execute("SELECT rowid, tags FROM nodes WHERE rowid > ? "
                                       "ORDER BY rowid LIMIT ?",
                                       (lender, len(FOLLOWERS))).fetchall()
                stored.update(rows)
                following = [r for r, _ in rows]
            before = [r for r in (lender - 1, lender - 2) if r in stored][:1]
            if not before:  # the first memory, or a gap
                rows = self.db.execute("SELECT rowid, tags FROM nodes WHERE rowid < ? "
                                       "ORDER BY rowid DESC LIMIT 1", (lender,)).fetchall()
                stored.update(rows)
                before = [r for r, _ in rows]
            context, asks = _folded_tags(features[lender].tags), features[lender].asks
            neighbours = [(share, r, asks) for share, r in zip(FOLLOWERS, following)]
            neighbours += [(PRECEDER, r, False) for r in before]
            for share, rowid, answer in neighbours:
                if _folded_tags(stored[rowid]) == context:
                    lent[rowid] += share * scores[lender]
                    # Just below the lender: one stored before it must not pass it on the
                    # tie-break (older first) either.
                    cap[rowid] = max(cap.get(rowid, 0.0), math.nextafter(scores[lender], 0.0))
                    if answer:
                        answers.add(rowid)
        extra_scores, extra_features = score([r for r in lent if r not in scores and
                                              r in self._read([r], window=True)])
        features.update(extra_features)
        scores.update(extra_scores)
        # Only a memory that matches the query itself gains: one holding a term that is not
        # faint (unless the query has nothing else), or one that follows a question.
        weighty = [i for i, t in enumerate(terms) if idf[t] > TINY_IDF] or range(len(terms))
        matched = {r for _, r in first}
        for rowid, extra in lent.items():
            if rowid in features and (any(features[rowid].counts[i] for i in weighty)
                                      or rowid in answers):
                scores[rowid] = max(scores[rowid], min(scores[rowid] + extra, cap[rowid]))
            elif rowid not in matched:
                scores.pop(rowid, None)
        return heapq.nsmallest(limit, ((s, r) for r, s in scores.items() if s > 0),
                               key=lambda sr: (-sr[0], sr[1]))

    def _contents(self, rowids):
        """{rowid: content} of the memories at `rowids`."""
        return {rowid: content for chunk in _chunks(list(rowids)) for rowid, content in
                self.db.execute(f"SELECT rowid, content FROM nodes WHERE rowid IN "
                                f"({_marks(chunk)})", chunk)}


# ----------------------------------------------------------------------------- store


class Store:
    """The memories in one SQLite database file: the public API the transports and the
    command line call. It owns the links (each written with its back-link), the traversal
    and access counting, and hands ranking to Search and RankingIndex, SQLite to Database.
    Threads may share it; processes may open the same file, and their writes wait for each
    other up to `timeout` seconds. `hot_min_df` and `hot_list` tune the ranking index;
    `trace(path)` hears how each search's stage one answered."""

    def __init__(self, path, *, timeout=BUSY_TIMEOUT, hot_min_df=HOT_MIN_DF, hot_list=HOT_LIST,
                 trace=None):
        self.path = os.fspath(path)
        self.index = RankingIndex(hot_min_df, hot_list)
        # The tags by length and by word, and how far they were read (see _closest_tags).
        self._tag_index = (0, collections.defaultdict(list), collections.defaultdict(list), 0)
        self.trace = trace
        self.db = Database(self.path, timeout, upkeep=self._upkeep)
        _check_file(self.path)
        if self.path != ":memory:" and not self.path.startswith("file:"):
            # SQLite would make it 0644 less the umask; its -wal and -shm copy this mode.
            with contextlib.suppress(OSError):
                _create_private(self.path)
        try:
            try:
                db = self.db.connection()
            except StoreError as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            self._prepare(db)
        except BaseException:
            self.close()
            raise

    @property
    def timeout(self):
        return self.db.timeout

    def close(self):
        """Close every connection this store opened. Using the store again reopens it."""
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
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                if _code(exc) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                    raise StoreError(f"{self.path} is damaged ({exc}); restore it from a "
                                     f"backup") from exc
                raise
            if version == SCHEMA_VERSION:
                if db.execute("SELECT 1 FROM pending UNION ALL SELECT 1 FROM owed").fetchone():
                    self.db.wake()  # left by a process that stopped before doing it
                return
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than the {SCHEMA_VERSION} "
                    f"this Flood Memory understands; upgrade Flood Memory to open it")
            self.db.use_wal(db)
            with self.db.write():
                self._migrate(db)

    def _migrate(self, db):
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            tables = {row[0] for row in db.execute(  # sqlite_stat1 and the like: SQLite's own
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")}
            if not tables:
                for statement in _statements(SCHEMA):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {int(SCHEMA_VERSION)}")
                return
            if "nodes" in tables and tables <= _SPEC_TABLES:
                version = 1  # made from SPEC.md's schema before versions were recorded
            else:
                raise StoreError(f"{self.path} is not a Flood Memory database (it holds "
                                 f"{', '.join(sorted(tables - _SPEC_TABLES)) or 'no nodes table'}"
                                 f"); refusing to touch it")
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](db)
            version += 1
        self.index.build_missing(db)
        db.execute(f"PRAGMA user_version = {int(version)}")

    # -- ranking upkeep

    def fold(self):
        """Count every logged change into the ranking statistics now; the background thread
        does it otherwise, soon after the writes."""
        while self._upkeep():
            pass

    def _upkeep(self):
        """The background thread's work: a count a load left owed, then one batch of the
        log folded in its own transaction; True if more may be left."""
        self._make_links_two_way(LOAD_PAUSE, stop=lambda: self.db.closing)
        self._count_owed(LOAD_PAUSE, stop=lambda: self.db.closing)
        with self.db.errors("update the ranking statistics"):
            if not self.db.connection().execute("SELECT 1 FROM pending LIMIT 1").fetchone():
                return False  # no write transaction, which would count as a write
            with self.db.write() as db:
                return self.index.fold(db) == FOLD_BATCH

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

    def records(self):
        """Every memory, oldest first, as dicts with keys in a fixed order; one snapshot.

        Read through a connection of its own: a caller may stop early and keep the rest
        unread, which must not leave the thread's connection inside a transaction (its next
        write failed)."""
        with self.db.errors("read the memories"):
            db = sqlite3.connect(self.path, isolation_level=None)
            try:
                db.execute("BEGIN")
                cursor = db.execute(f"SELECT {_COLUMNS} FROM nodes ORDER BY rowid")
                while rows := cursor.fetchmany(1000):
                    yield from map(_node, rows)
            finally:
                db.close()

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
            return {n["id"]: n for n in self._read_fitted(db, "id", list(ids), None, None)}

    def newest(self, tags=(), since=None, until=None, limit=20):
        """The newest memories carrying every one of `tags`, created in the window, not
        counted as accessed: what a person lists."""
        tags, limit = _tags(tags), _int(limit, "limit", 1, 1_000_000)
        since, until = _window_end(since, "since"), _window_end(until, "until")
        with self.db.errors("list the memories"):
            return self._read_counted("rowid", self._newest(tags, since, until, limit, 0),
                                      count=False)

    def tag_counts(self):
        """[(tag, how many memories carry it)], most used first."""
        with self.db.errors("read the tags"), self.db.read() as db:
            return db.execute("SELECT tag, memories FROM tags ORDER BY memories DESC, tag "
                              ).fetchall()

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
        """What is wrong with the database, in words ([] when nothing is): SQLite's own
        check, the full-text index against the memories (which reads them all, and holds
        the write lock meanwhile: FTS5's check is written as an insert), links that are not
        two-way or lead nowhere, the ranking statistics, and work an interrupted load left."""
        problems = []
        with self.db.errors("check the database"):
            db = self.db.connection()
            found = [r for (r,) in db.execute("PRAGMA integrity_check")]
            if found != ["ok"]:
                problems.append(f"SQLite's integrity check: {'; '.join(found[:3])}")
            with self.db.write() as db:
                try:
                    db.execute("INSERT INTO nodes_fts(nodes_fts, rank) VALUES "
                               "('integrity-check', 1)")
                except sqlite3.DatabaseError as exc:
                    problems.append(f"the full-text index disagrees with the memories ({exc})")
            with self.db.read() as db:
                problems += _link_problems(db)
                problems += self.index.problems(db)
                owed = [w for (w,) in db.execute("SELECT work FROM owed")]
            if owed:
                problems.append(f"an import was interrupted and left work owed "
                                f"({', '.join(owed)})")
        return problems

    def repair(self):
        """Make what check finds wrong right, where it can be (not SQLite's own damage: that
        is restored from a backup): the full-text index, the fingerprints and the ranking
        statistics are made again from the memories, the tags table from their tags, and
        every link two-way, dropping those that lead nowhere. One write transaction."""
        with self.db.errors("repair the database"), self.db.write() as db:
            db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES ('rebuild')")
            _repair_links(db)
            db.execute("DELETE FROM tags")
            db.execute("INSERT INTO tags (tag, folded, memories) SELECT tag, lower(tag), "
                       "count(*) FROM node_tags GROUP BY tag")
            _fold_tags(db, [t for (t,) in db.execute("SELECT tag FROM tags")])
            db.execute("DELETE FROM fingerprints")
            db.executemany("INSERT OR IGNORE INTO fingerprints (hash, node) VALUES (?, ?)",
                           [(_fingerprint(content, _strings(tags)), rowid) for rowid, content, tags
                            in db.execute("SELECT rowid, content, tags FROM nodes").fetchall()])
            _recount(db)
            self.index.build_missing(db)
            db.execute("DELETE FROM owed")

    def _row(self, db, node_id):
        row = db.execute(f"SELECT {_COLUMNS} FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        return _node(row)

    # -- writing

    def add(self, content, tags=(), links=(), source=""):
        """Store a new memory, linked both ways to the existing ids in `links`; the memory,
        with the links left out listed under "skipped_links" ({"id", "reason"}).

        An exact duplicate (the same content once whitespace is collapsed, the same tags in
        any order and case) is not stored again: the stored one comes back, marked
        "already_remembered" and given the links. Stored memories very close to a new one are
        listed under "similar" (see _similar), never merged.
        """
        content = _content(content)
        tags = _tags(tags)
        skipped = []
        links = _link_ids(links, skipped=skipped)
        source = _source(source)
        fingerprint = _fingerprint(content, tags)
        node_id, now = str(uuid.uuid4()), _now()
        counted = _counted(content, distinctive=True)
        with self.db.errors("save the memory"), self.db.write() as db:
            stored = self._exact_duplicate(db, fingerprint, content, tags)
            if stored is not None:
                node = self._add_links(db, stored, self._existing(db, links, skipped), skipped)
                node["already_remembered"] = True
                return _with_skipped(node, "remember", skipped)
            near = self._near_candidates(db, counted.distinctive)  # before the new memory is in
            # A new id is in nobody's links yet: each back-link is one append, and a target
            # that no memory has is the one the append finds nothing to change in.
            linked = [target for target in links if db.execute(
                "UPDATE nodes SET links = json_insert(coalesce(links, '[]'), '$[#]', ?) "
                "WHERE id = ?", (node_id, target)).rowcount]
            skipped += ({"id": i, "reason": NO_SUCH_MEMORY} for i in links if i not in linked)
            links = linked
            rowid = db.execute(
                "INSERT INTO nodes (id, content, tags, links, source, created_at, last_accessed, "
                "access_count) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                (node_id, content, _json(tags), _json(links), source, now, now)).lastrowid
            db.execute("INSERT INTO fingerprints (hash, node) VALUES (?, ?)", (fingerprint, rowid))
            _fold_tags(db, tags)
            self.index.note(db, rowid, +1, counted)
            self.index.keep_up(db)
        node = {"id": node_id, "content": content, "tags": tags, "links": links,
                "source": source, "created_at": now, "last_accessed": now, "access_count": 0}
        if near:
            similar = self._similar(near, content, counted.distinctive)
            if similar:
                node["similar"] = similar
        return _with_skipped(node, "remember", skipped)

    def _exact_duplicate(self, db, fingerprint, content, tags):
        """The id of the oldest stored memory that `content` and `tags` duplicate exactly
        (tags whatever their case)."""
        text, tagged = " ".join(content.split()), _folded(tags)
        for node_id, stored, stored_tags in db.execute(
                "SELECT n.id, n.content, n.tags FROM fingerprints f JOIN nodes n ON "
                "n.rowid = f.node WHERE f.hash = ? ORDER BY n.rowid", (fingerprint,)):
            if " ".join(stored.split()) == text and _folded_tags(stored_tags) == tagged:
                return node_id
        return None

    def _add_links(self, db, node_id, links, skipped):
        """The memory `node_id`, its links extended by `links` (both ways)."""
        node = self._row(db, node_id)
        if node_id in links:
            links.remove(node_id)
            skipped.append({"id": node_id, "reason": ITSELF})
        new = [i for i in links if i not in node["links"]]
        if new:
            node["links"] += new
            db.execute("UPDATE nodes SET links = ? WHERE id = ?", (_json(node["links"]), node_id))
            self._link_back_to(db, node_id, new)
        return node

    def _near_candidates(self, db, mine):
        """The stored memories that a new one with the distinctive terms `mine` may be very
        close to (see _similar): the NEAR_CANDIDATES that share the most rare terms with it
        (held by RARE memories or fewer), NEAR_RARE at least, as rowids."""
        if len(mine) < NEAR_SHARED:
            return []
        shared = collections.Counter(
            r for rowids in self.index.holders(db, mine).values() for r in rowids)
        return heapq.nlargest(NEAR_CANDIDATES, [r for r, n in shared.items() if n >= NEAR_RARE],
                              key=lambda r: (shared[r], r))

    def _similar(self, rowids, content, mine):
        """Those of the memories at `rowids` very close to `content` (whose distinctive terms
        are `mine`), closest first: [{"id", "content"}], the content cut to NEAR_SHOWN.

        Very close: the Jaccard similarity of their distinctive terms is NEAR_JACCARD or more,
        with NEAR_SHARED terms in common. On 1,210 LoCoMo facts labelled by hand, the hint
        fires on 5.3% of stores (2.1% with no restatement listed) and catches 28% of the
        restatements; on dialog turns it fires on 0.8%. Called after the new memory is
        written, outside its transaction: comparing may read long texts, and other writers
        need not wait for that. A hint that cannot be read is left out.
        """
        n = len(content)
        # Only a word that starts like one of ours can stem to one of our terms: stemming
        # the others (slow for words not seen before) can wait until their number matters.
        prefixes = tuple(t[:max(1, len(t) - 3)] for t in mine)
        try:
            rows = self.db.connection().execute(
                f"SELECT rowid, id, content FROM nodes WHERE rowid IN ({_marks(rowids)}) "
                f"AND length(content) BETWEEN ? AND ?", (*rowids, n // 4 - 40, 4 * n + 40)
            ).fetchall()
        except sqlite3.Error as exc:
            log.debug("the near-duplicate hint was skipped: %s", exc)
            return []
        close = []
        for rowid, node_id, text in rows:
            words = tokenize(text)
            words = {w for w in words if w not in STOPWORDS} or set(words)
            common = len(mine & {stem(w) for w in words if w.startswith(prefixes)})
            if common < NEAR_SHARED:
                continue
            # Their distinct words bound their distinct terms from above: stem them all only
            # when the bound cannot tell.
            most = common * (1 + NEAR_JACCARD) / NEAR_JACCARD - len(mine)
            size = len(words) if len(words) <= most else len(set(map(stem, words)))
            similarity = common / (len(mine) + size - common)
            if similarity >= NEAR_JACCARD:
                close.append((similarity, rowid, node_id, text))
        close.sort(reverse=True)
        return [{"id": node_id, "content": text[:NEAR_SHOWN]}
                for _, _, node_id, text in close[:NEAR_LISTED]]

    def load(self, records, *, checked=False, pause=LOAD_PAUSE, update=False):
        """Insert whole memories, ids and timestamps as given, for imports and benchmarks;
        {"loaded": n, "skipped": n, "differ": n, "differ_ids": [the first 10]}, `differ`
        counting the records stored already whose content or tags differ (with `update`,
        they take the record's).

        `records` is a list, or gives the records again each time it is iterated; each is
        checked before anything is written (unless `checked`: Records of check_records). The
        memories go in first, then the links (see _Load), in short transactions with `pause`
        seconds between them, so that other writers get their turns. A record stored already
        is skipped, but for its links; links to ids found nowhere are dropped, with a warning.
        A load at least as large as the store counts its terms at the end, from FTS5's own
        vocabulary, which costs half as much; until then the count is owed (see owed).
        """
        if not checked:
            records = check_records(records)
        elif iter(records) is records:
            records = list(records)  # a one-pass iterator: a load reads its records twice
        return _Load(self, records, pause, update).run()

    def _count_owed(self, pause, stop=lambda: False, claim=True):
        """Do the count a load left owed: count the terms of every memory from FTS5's
        vocabulary, then make the lists of rare terms and the impact lists, each step a
        transaction short enough that other writers keep their turns (in one, the lists held
        the lock for seconds after a large import). With `claim`, only once its owner
        has stopped beating (see owed); stops early, still owed, when stop()."""
        with self.db.errors("count the loaded memories"):
            if not _claimed(self.db, "count", claim):
                return
            with self.db.write() as db:
                _owe(db, "count")
                _recount(db, rare=False)
                ranges = _term_ranges(db, LOAD_INSTANCES)
            for low, high in ranges:
                time.sleep(pause)
                if stop():
                    return
                with self.db.write() as db:
                    _owe(db, "count")
                    _list_rare(db, low, high)
            more = True
            while more:
                time.sleep(pause)
                if stop():
                    return
                with self.db.write() as db:
                    more = self.index.build_missing(db, time.monotonic() + LOAD_STEP)
                    if more:
                        _owe(db, "count")
                    else:
                        db.execute("DELETE FROM owed WHERE work = 'count'")

    def _link_back(self, back, pause, stop=lambda: False, version=None):
        """Give the memories in `back` ({id: [ids of the memories that link to it]}) their
        back-links, in transactions of about LINK_BATCH, those of one memory in one (a
        memory thousands link to is written once, not once a transaction). Each is checked
        against the memories as they are now: a memory forgotten meanwhile gets none and
        keeps no link to one forgotten, and one whose links changed meanwhile gets a
        back-link only if it still links there; unless no other connection has written
        since SQLite's data_version was `version` (then the linking ones are as they were
        written, and are not read). Clears the links owed (see owed)."""
        targets, at = list(back), 0
        while at < len(targets):
            if stop():
                return
            group, size = [], 0
            while at < len(targets) and (not group or size + len(back[targets[at]]) <= LINK_BATCH):
                group.append(targets[at])
                size += len(back[targets[at]])
                at += 1
            with self.db.write() as db:
                _owe(db, "links")
                alone = version == db.execute("PRAGMA data_version").fetchone()[0]
                text = {}  # id -> its links as stored (JSON), for the memories involved
                ids = list(group if alone else {i: None for t in group for i in (t, *back[t])})
                for chunk in _chunks(ids):
                    text.update(db.execute(
                        f"SELECT id, links FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
                now, held = {}, {}  # id -> its links, and as a set, once one may change
                changed = {}
                for target in group:
                    for source in back.pop(target):
                        # An id holds no quote: a source links to the target if its links'
                        # text holds the quoted id, and most are not parsed at all.
                        if not alone and (source not in text or
                                          f'"{target}"' not in (text[source] or "")):
                            continue  # forgotten, or no longer linking there
                        changing = source if target not in text else target
                        if changing not in now:
                            now[changing] = json.loads(text[changing] or "[]")
                            held[changing] = set(now[changing])
                        if changing == source and target in held[source]:
                            held[source].discard(target)  # forgotten meanwhile: no link there
                            now[source].remove(target)
                            changed[source] = None
                        elif changing == target and source not in held[target]:
                            held[target].add(source)
                            now[target].append(source)
                            changed[target] = None
                db.executemany("UPDATE nodes SET links = ? WHERE id = ?",
                               [(_id_list(now[i]), i) for i in changed])
                if at == len(targets):
                    db.execute("DELETE FROM owed WHERE work = 'links'")
            time.sleep(pause)

    def _make_links_two_way(self, pause, stop=lambda: False):
        """Make every link two-way, once a load that owed back-links has stopped beating for
        them (see owed): it was interrupted between its links and their back-links."""
        with self.db.errors("link the loaded memories"):
            if not _claimed(self.db, "links", True):
                return
            back = collections.defaultdict(list)
            with self.db.read() as db:
                for node, text in db.execute("SELECT id, links FROM nodes"):
                    for target in json.loads(text or "[]"):
                        back[target].append(node)
            self._link_back(back, pause, stop)

    def update(self, node_id, content=None, tags=None, links=None):
        """Replace the given fields of a memory; links keep their back-links in step.

        Returns the memory; links left out are listed under "skipped_links", as for add.
        """
        node_id = _node_id(node_id)
        if content is None and tags is None and links is None:
            raise InvalidInput("nothing to update: give content, tags or links")
        if content is not None:
            content = _content(content)
        if tags is not None:
            tags = _tags(tags)
        skipped = []
        if links is not None:
            links = _link_ids(links, skipped=skipped)
            if node_id in links:
                links.remove(node_id)
                skipped.append({"id": node_id, "reason": ITSELF})

        def change(db, old, counted):
            changes = {}
            if content is not None and content != old["content"]:
                changes["content"] = content
            if tags is not None:
                changes["tags"] = _json(tags)
                _fold_tags(db, tags)
            if links is not None:
                made = self._existing(db, links, skipped)
                kept, had = set(made), set(old["links"])  # a hub holds thousands
                self._unlink_from(db, node_id, [t for t in old["links"] if t not in kept])
                self._link_back_to(db, node_id, [t for t in made if t not in had])
                changes["links"] = _json(made)
            if changes:
                rowid = db.execute("SELECT rowid FROM nodes WHERE id = ?", (node_id,)).fetchone()[0]
                db.execute(f"UPDATE nodes SET {', '.join(f'{k} = ?' for k in changes)} "
                           f"WHERE rowid = ?", (*changes.values(), rowid))
                if "content" in changes or "tags" in changes:
                    db.execute("DELETE FROM fingerprints WHERE hash = ? AND node = ?",
                               (_fingerprint(old["content"], old["tags"]), rowid))
                    db.execute("INSERT OR IGNORE INTO fingerprints (hash, node) VALUES (?, ?)",
                               (_fingerprint(content if content is not None else old["content"],
                                             tags if tags is not None else old["tags"]), rowid))
                if "content" in changes:
                    self.index.note(db, rowid, -1, counted)
                    self.index.note(db, rowid, +1, new)
                    self.index.keep_up(db)
            return self._row(db, node_id)

        new = _counted(content) if content is not None else None
        node = self._changing(node_id, "update the memory", change, count=content is not None)
        return _with_skipped(node, "update", skipped)

    def delete(self, node_id):
        """Delete a memory and every back-link to it."""
        node_id = _node_id(node_id)

        def change(db, node, counted):
            self._unlink_from(db, node_id, node["links"])
            rowid = db.execute("SELECT rowid FROM nodes WHERE id = ?", (node_id,)).fetchone()[0]
            db.execute("DELETE FROM nodes WHERE rowid = ?", (rowid,))
            db.execute("DELETE FROM fingerprints WHERE hash = ? AND node = ?",
                       (_fingerprint(node["content"], node["tags"]), rowid))
            self.index.note(db, rowid, -1, counted)
            self.index.keep_up(db)

        self._changing(node_id, "delete the memory", change)
        return {"id": node_id, "deleted": True}

    def _changing(self, node_id, doing, change, count=True):
        """change(db, old, counted) in one write transaction, and what it returns: `old` is
        the memory as stored, `counted` the Counted record of its content (None unless
        `count`). The content is tokenized before the write lock is taken, not while other
        writers wait for it, and again only if another writer changed it meanwhile."""
        for attempt in range(3):
            with self.db.errors(doing):
                row = self.db.connection().execute("SELECT content FROM nodes WHERE id = ?",
                                                   (node_id,)).fetchone()
            if row is None:
                raise NotFound(f"no memory has id {node_id}")
            counted = _counted(row[0]) if count else None
            with self.db.errors(doing), self.db.write() as db:
                old = self._row(db, node_id)
                if old["content"] == row[0]:
                    return change(db, old, counted)
                if attempt == 2:  # changed at every try: count it here
                    return change(db, old, _counted(old["content"]) if count else None)

    # -- links

    def _existing(self, db, ids, skipped):
        """The ids that name a memory, in order; the others are added to `skipped`."""
        found = set()
        for chunk in _chunks(ids):
            found.update(r[0] for r in db.execute(
                f"SELECT id FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
        skipped += ({"id": i, "reason": NO_SUCH_MEMORY} for i in ids if i not in found)
        return [i for i in ids if i in found]

    def _link_back_to(self, db, node_id, targets):
        """Add `node_id` to the links of each memory in `targets` that lacks it. In SQL, not
        read into Python: a memory thousands link to holds a long list."""
        for chunk in _chunks(list(targets)):
            db.execute(f"UPDATE nodes SET links = json_insert(coalesce(links, '[]'), '$[#]', ?1) "
                       f"WHERE instr(coalesce(links, ''), ?2) = 0 AND id IN ({_marks(chunk)})",
                       (node_id, f'"{node_id}"', *chunk))

    def _unlink_from(self, db, node_id, targets):
        """Remove `node_id` from the links of each memory in `targets`, in SQL, not one by one
        through Python: a hub's are thousands."""
        for chunk in _chunks(list(targets)):
            db.execute(f"UPDATE nodes SET links = (SELECT json_group_array(value) FROM "
                       f"json_each(nodes.links) WHERE value <> ?1) WHERE instr(links, ?2) AND "
                       f"id IN ({_marks(chunk)})", (node_id, f'"{node_id}"', *chunk))

    # -- search

    def search(self, query="", tags=(), limit=10, *, offset=0, since=None, until=None,
               fit=None, report=None, count=True):
        """The `limit` memories after `offset` matching the words of `query`, carrying every
        one of `tags`, created from `since` (inclusive) to `until` (exclusive): ranked by
        relevance with a query (see rank), newest first without.

        With `fit`, a function of the memories found, only the first fit(memories) come back
        (a caller's size budget). Each counts as accessed, unless not `count`. A dict
        `report` is told what was searched: "words", and "cut" (words past MAX_QUERY_WORDS
        were ignored).
        """
        query = _text(query, "query")
        tags = _tags(tags)
        limit = _int(limit, "limit", 1, MAX_LIMIT)
        offset = _int(offset, "offset", 0, MAX_OFFSET)
        since, until = _window_end(since, "since"), _window_end(until, "until")
        if since is not None and until is not None and since >= until:
            raise InvalidInput(f"since ({since}) must come before until ({until})")
        words, cut = first_words(query)
        words = _meaningful(words)
        if report is not None:
            report.update(words=words, cut=cut)
        if not words and query.strip():
            return []  # nothing searchable in it: punctuation or symbols only
        with self.db.errors("search the memories"):
            if words:
                when = _asks_when(query[:16 * MAX_QUERY_WORDS])
                rowids = [rowid for _, rowid in self.rank(
                    words, tags, offset + limit, since, until, when)][offset:]
            else:
                rowids = self._newest(tags, since, until, limit, offset)
            return self._read_counted("rowid", rowids, fit, count=count)

    def rank(self, words, tags=(), limit=10, since=None, until=None, when=False):
        """The best `limit` memories for query words, as [(score, rowid)], best first:
        stage one's exact bm25 (Search.top), re-scored by stage two (Search.rerank), which
        favours memories that say when if the question asks `when`."""
        with self.db.read() as db:
            spellings = self._spellings(db, tags)
            if not all(spellings):
                return []  # no memory carries one of the tags
            search = Search(db, self.index, words, spellings, self.trace, since, until, when)
            return search.rerank(search.top(max(limit, RERANK_DEPTH)), limit)

    def top(self, words, tags=(), limit=10, since=None, until=None):
        """Stage one alone: [(bm25 score, rowid)], as FTS5's bm25() would rank them."""
        with self.db.errors("search the memories"), self.db.read() as db:
            spellings = self._spellings(db, tags)
            if not all(spellings):
                return []
            return Search(db, self.index, words, spellings, self.trace, since,
                          until).top(limit)

    def _spellings(self, db, tags):
        """For each of `tags`, the spellings of it that memories carry, whatever the case:
        [[spelling, ...], ...], most used first."""
        return [[t for (t,) in db.execute("SELECT tag FROM tags WHERE folded = ? "
                                          "ORDER BY memories DESC", (tag.casefold(),))]
                for tag in tags]

    def nothing_found(self, tags=(), since=None, until=None):
        """What a recall that found nothing can tell the model about what there is: for each
        of `tags`, how many memories carry it and, when none does, up to CLOSEST_TAGS tags
        close to it (see _closest_tags); without tags, the CLOSEST_TAGS most used; with a
        window, how many memories were created in it. As {"tags": [{"tag", "memories",
        "closest"}], "most_used": [(tag, memories)], "in_window": n}, each key only when
        it applies."""
        tags = _tags(tags)
        since, until = _window_end(since, "since"), _window_end(until, "until")
        out = {}
        with self.db.errors("look at the tags"), self.db.read() as db:
            if since is not None or until is not None:
                out["in_window"] = db.execute(
                    "SELECT count(*) FROM nodes WHERE created_at >= ? AND created_at < ?",
                    (since or "", until or "~")).fetchone()[0]
            if not tags:
                out["most_used"] = db.execute("SELECT tag, memories FROM tags ORDER BY memories "
                                              "DESC LIMIT ?", (CLOSEST_TAGS,)).fetchall()
            out["tags"] = []
            for n, tag in enumerate(tags):
                held = db.execute("SELECT total(memories) FROM tags WHERE folded = ?",
                                  (tag.casefold(),)).fetchone()[0]
                closest = [] if held or n >= CLOSEST_TAGS else self._closest_tags(db, tag)
                out["tags"].append({"tag": tag, "memories": int(held), "closest": closest})
        return out

    def _closest_tags(self, db, tag):
        """Up to CLOSEST_TAGS tags close to `tag`, closest first: those an edit or two away
        (a swap of two neighbouring letters counting as one: "marai" for "maria"), then
        those sharing a word with it ("maria-garcia"), the most used first. This process
        keeps the tags by length and by word, reading only those added since (ids only
        grow), and from scratch when there are more than it holds (a restore)."""
        top, many = db.execute("SELECT max(id), count(*) FROM tags").fetchone()
        for fresh in (False, True):
            last, by_length, by_word, held = (0, collections.defaultdict(list),
                                              collections.defaultdict(list), 0) if fresh \
                else self._tag_index
            for last, spelling, folded, memories in db.execute(
                    "SELECT id, tag, folded, memories FROM tags WHERE id > ? ORDER BY id",
                    (last,)):
                entry = (folded, _letters(folded), memories, spelling)
                by_length[len(folded)].append(entry)
                for word in set(_TOKEN.findall(folded)):
                    by_word[word].append(entry)
                held += 1
            if top is None or last <= top and many <= held:
                break
        self._tag_index = (last, by_length, by_word, held)
        asked = tag.casefold()
        letters = _letters(asked)
        # Two edits change four letters at most: the tags whose letters differ less are
        # measured, those closest by their letters first, MEASURED at most.
        near = [[] for _ in range(5)]
        for length in range(len(asked) - 2, len(asked) + 3):
            for entry in by_length.get(length, ()):
                differ = (entry[1] ^ letters).bit_count()
                if differ <= 4:
                    near[differ].append(entry)
        found = {}  # spelling -> (how far, fewer memories first)
        for folded, _, memories, spelling in itertools.islice(itertools.chain(*near), MEASURED):
            far = _distance(asked, folded)
            if far <= 2:
                found[spelling] = (far, -memories)
        for word in set(_TOKEN.findall(asked)):
            for _, _, memories, spelling in by_word.get(word, ())[:4 * CLOSEST_TAGS]:
                found.setdefault(spelling, (3, -memories))
        ranked = sorted(found, key=found.get)
        there = set()  # those forgotten since are left out
        for chunk in _chunks(ranked[:4 * CLOSEST_TAGS]):
            there.update(t for (t,) in db.execute(
                f"SELECT tag FROM tags WHERE tag IN ({_marks(chunk)})", chunk))
        return [t for t in ranked if t in there][:CLOSEST_TAGS]

    def _newest(self, tags, since, until, limit, offset):
        """The rowids of the newest memories carrying every tag, created in the window.

        Both indexes are ordered by time: the rarest tag's entries in node_tags (the other
        tags checked per memory), or nodes_created without tags. Neither reads outside the
        window.
        """
        db = self.db.connection()
        window, bounds = "", []
        for bound, op in ((since, ">="), (until, "<")):
            if bound is not None:
                window += f" AND created_at {op} ?"
                bounds.append(bound)
        if not tags:
            return [r for (r,) in db.execute(
                f"SELECT rowid FROM nodes WHERE 1{window} ORDER BY created_at DESC, rowid DESC "
                f"LIMIT ? OFFSET ?", (*bounds, limit, offset))]
        spellings = self._spellings(db, tags)
        if not all(spellings):
            return []
        counts = sorted((db.execute(f"SELECT sum(memories) FROM tags WHERE tag IN ({_marks(s)})",
                                    s).fetchone()[0], s) for s in spellings)
        first, others = counts[0][1], [s for _, s in counts[1:]]
        sql = (f"SELECT DISTINCT node, created_at FROM node_tags a WHERE tag IN "
               f"({_marks(first)}){window}" +
               "".join(f" AND EXISTS (SELECT 1 FROM node_tags t{i} WHERE t{i}.node = a.node "
                       f"AND t{i}.tag IN ({_marks(s)}))" for i, s in enumerate(others)) +
               " ORDER BY created_at DESC, node DESC LIMIT ? OFFSET ?")
        return [r for r, _ in db.execute(sql, (*first, *bounds, *(t for s in others for t in s),
                                               limit, offset))]

    # -- traversal

    def neighbors(self, node_id, depth=1, *, offset=0, limit=MAX_NODES, fit=None):
        """The memory and those within `depth` links of it, nearest first, each once with its
        shortest `distance`: {"nodes": [...], "total": n, "exact": bool}, the nodes from
        `offset` on, `limit` at most (fewer if `fit` says so), each counted as accessed;
        `total` counted up to TRAVERSAL_CAP (`exact` is False past it)."""
        node_id = _node_id(node_id)
        depth = _int(depth, "depth", 0, MAX_DEPTH)
        offset = _int(offset, "offset", 0, TRAVERSAL_CAP)
        limit = _int(limit, "limit", 1, MAX_NODES)
        with self.db.errors("traverse the links"):
            with self.db.read() as db:
                distances = self._walk(db, node_id, depth)
            order = list(distances)[:TRAVERSAL_CAP]
            page = order[offset:offset + limit]
            nodes = self._read_counted("id", page, fit, {i: {"distance": distances[i]} for i in page})
        return {"nodes": nodes, "total": len(order), "exact": len(distances) <= TRAVERSAL_CAP}

    def _walk(self, db, node_id, depth):
        """{id: distance} of the memories within `depth` links of `node_id`, breadth first,
        in the order met (links in the order stored); one more than TRAVERSAL_CAP at most."""
        row = db.execute("SELECT links FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        distances = {node_id: 0}
        frontier = [row[0]]
        for distance in range(1, depth + 1):
            met = []
            for links in frontier:
                for target in json.loads(links or "[]"):
                    if target not in distances:
                        distances[target] = distance
                        met.append(target)
                if len(distances) > TRAVERSAL_CAP:
                    return distances
            if not met or distance == depth:
                break
            found = {}
            for chunk in _chunks(met):
                found.update(db.execute(
                    f"SELECT id, links FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
            frontier = [found[i] for i in met if i in found]
        return distances

    # -- access counting

    def _read_counted(self, column, keys, fit=None, extra=None, count=True):
        """The memories whose `column` ('rowid' or 'id') is in `keys`, in that order, with the
        fields of `extra[key]` added, cut to what `fit` allows, and counted as accessed
        (unless not `count`): by a write that waits for no other writer of this process (see
        Database.write_soon). When the count cannot be written (another process holds the
        lock past the timeout, a full disk), the memories come back uncounted, with a warning.
        """
        if not keys:
            return []
        now = _now()
        with self.db.read() as db:
            nodes = self._read_fitted(db, column, keys, fit, extra)
        if not count:
            return nodes
        ids = [node["id"] for node in nodes]

        def count(db):
            for chunk in _chunks(ids):
                # Past MAX_INT, SQLite's integers overflow into floats: the count stops there.
                db.execute(f"UPDATE nodes SET last_accessed = ?, access_count = access_count "
                           f"+ (access_count < {MAX_INT}) WHERE id IN ({_marks(chunk)})",
                           (now, *chunk))
        try:
            with self.db.errors("count the access"):
                self.db.write_soon(count)
        except StoreError as exc:  # locked by another process, a full disk, a read-only file
            _warn_once(f"accesses not counted: "
                       f"{str(exc).removeprefix('could not count the access: ')}")
            return nodes
        for node in nodes:
            node["last_accessed"] = now
            node["access_count"] = min(node["access_count"] + 1, MAX_INT)
        return nodes

    def _read_fitted(self, db, column, keys, fit, extra):
        """The memories whose `column` is in `keys`, in that order, `extra` added, cut to what
        `fit` allows."""
        found = {}
        for chunk in _chunks(keys):
            found.update((row[0], _node(row[1:])) for row in db.execute(
                f"SELECT {column}, {_COLUMNS} FROM nodes WHERE {column} IN ({_marks(chunk)})",
                chunk))
        nodes = []
        for key in keys:
            if key in found:  # a memory forgotten meanwhile is gone
                node = found[key]
                node.update(extra[key] if extra else ())
                nodes.append(node)
        if fit and nodes:
            nodes = nodes[:fit(nodes)]
        return nodes

    # -- the whole database

    def owns(self, path):
        """Whether `path` is this database file or one of its companions (log, index)."""
        return os.path.exists(path) and any(
            os.path.exists(own) and os.path.samefile(path, own)
            for own in (self.path, self.path + "-wal", self.path + "-shm"))

    def backup(self, target):
        """Copy the database, as one consistent snapshot, to the file `target`; return how
        many memories the copy holds.

        Writers go on meanwhile (WAL readers do not block them). The copy is made next to
        `target` and renamed over it only once complete and checked.
        """
        target = _target_file(target, "a backup")
        if self.owns(target):
            raise InvalidInput("the backup file must not be the database itself")
        directory = os.path.dirname(target)
        name = f".{os.path.basename(target)}."
        _remove_leftovers(directory, re.escape(name) + r"(\d+)\.part(-journal|-wal|-shm)?")
        partial = os.path.join(directory, f"{name}{os.getpid()}.part")
        try:
            with self.db.errors(f"back up the memories to {target}"):
                os.close(_open_private(partial))
                copy = sqlite3.connect(partial, isolation_level=None)
                try:
                    self.db.connection().backup(copy)
                    problem = copy.execute("PRAGMA quick_check").fetchone()[0]
                    if problem != "ok":
                        raise StoreError(f"the copy of {self.path} failed its check: {problem}")
                    copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                    count = copy.execute("SELECT count(*) FROM nodes").fetchone()[0]
                finally:
                    copy.close()
            _replace(partial, target)
        except OSError as exc:
            raise StoreError(f"cannot write the backup {target}: {exc.strerror}") from exc
        finally:
            for leftover in (partial, partial + "-journal", partial + "-wal", partial + "-shm"):
                with contextlib.suppress(OSError):
                    os.remove(leftover)
        return count

    def restore(self, source, confirm=None):
        """Replace every memory with those of the backup file `source`; how many. Once the
        backup has passed its checks, confirm(memories in it), if given, may say False: then
        nothing is restored, and None returned.

        The backup is checked and brought to this schema in a copy first, so a bad one
        changes nothing. Then SQLite's backup API writes the copy into the live database as
        one write transaction: running servers read the restored memories from their next
        transaction on, and cannot write the old pages back (as their log would over a file
        copied onto the database).
        """
        source = os.path.abspath(os.path.expanduser(os.fspath(source)))
        if self.owns(source):
            raise InvalidInput("the backup to restore must not be the database itself")
        if not os.path.isfile(source):
            raise InvalidInput(f"there is no backup file {source}")
        directory = os.path.dirname(self.path)
        _remove_leftovers(directory, _RESTORING)
        work = tempfile.mkdtemp(prefix=f".restore-{os.getpid()}-", dir=directory)
        try:
            copy = os.path.join(work, DB_NAME)
            try:
                _copy_private(source, copy)
                if os.path.exists(source + "-wal"):  # a live database's log holds pages too
                    _copy_private(source + "-wal", copy + "-wal")
            except OSError as exc:
                raise StoreError(f"cannot read the backup {source}: {exc.strerror}") from exc
            count = _checked_backup(copy, source, self._page_size())
            if confirm is not None and not confirm(count):
                return None
            with self.db.errors("restore the memories"):
                backup = sqlite3.connect(copy, isolation_level=None)
                deadline = time.monotonic() + self.timeout

                def waited(status, remaining, total):
                    if status in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) and \
                            time.monotonic() > deadline:
                        raise Busy(f"could not restore the memories: the database stayed "
                                   f"locked by another process for more than "
                                   f"{self.timeout:g} s")

                try:
                    backup.backup(self.db.connection(), progress=waited, sleep=0.02)
                finally:
                    backup.close()
                self.db.wake()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return count

    def _page_size(self):
        with self.db.errors("read the memory database"):
            return self.db.connection().execute("PRAGMA page_size").fetchone()[0]

    def problems(self):
        """Ways the ranking statistics disagree with the memories (RankingIndex.problems)."""
        with self.db.errors("check the memories"), self.db.read() as db:
            return self.index.problems(db)


class _Load:
    """One Store.load: its records, its progress and what it skipped, apart from the Store
    that other threads share."""

    def __init__(self, store, records, pause, update=False):
        self.store, self.db, self.index = store, store.db, store.index
        self.records = records
        self.pause = pause
        self.update = update
        self.inserted = bytearray(len(records))  # 1 where this load inserted the record
        self.differ = []  # positions of the records stored already, but otherwise
        self.loaded = self.skipped = 0
        self.dropped = []  # links to ids that no memory has: {"id", "reason"}

    def run(self):
        db = self.db.connection()
        cache = db.execute("PRAGMA cache_size").fetchone()[0]
        # A load touches pages all over (random ids, hashes): a larger cache for it.
        db.execute(f"PRAGMA cache_size = -{LOAD_CACHE_KIB}")
        try:
            with self.db.errors("load the memories"):
                owed = db.execute("SELECT 1 FROM owed").fetchone() is not None
                self.recount = owed or len(self.records) >= max(LOAD_CHUNK, self.store.count())
                self.insert_all()
                self.link_all()
            if self.recount:
                self.store._count_owed(self.pause, claim=False)
            if self.update and self.differ:
                differ = set(self.differ)
                for position, record in enumerate(self.records):
                    if position in differ:
                        self.store.update(record.id, content=record.content, tags=record.tags)
        finally:
            db.execute(f"PRAGMA cache_size = {int(cache)}")
        _log_skipped("import", self.dropped)
        first = sorted(self.differ)[:10]  # their ids, for the person importing to look at
        named = [record.id for position, record in enumerate(
            itertools.islice(self.records, first[-1] + 1) if first else ()) if position in first]
        return {"loaded": self.loaded, "skipped": self.skipped, "differ": len(self.differ),
                "differ_ids": named}

    def insert_all(self):
        """The memories, without their links, in chunks sized by their pace."""
        chunk, start, size = [], 0, LOAD_CHUNK
        for position, record in enumerate(self.records):
            chunk.append(record)
            if len(chunk) < size and position + 1 < len(self.records):
                continue
            if start:
                time.sleep(self.pause)  # another process's write may be waiting for its turn
            started, before = time.monotonic(), self.loaded
            self.insert(chunk, start)
            # The next chunk as large as LOAD_TXN seconds allow at this one's pace, within a
            # quarter and four times LOAD_CHUNK. Records stored already go fast: only those
            # inserted tell the pace.
            if self.loaded > before:
                pace = max(time.monotonic() - started, 1e-3) / (self.loaded - before)
                size = max(LOAD_CHUNK // 4, min(4 * LOAD_CHUNK, int(LOAD_TXN / pace)))
            start += len(chunk)
            chunk = []

    def insert(self, chunk, start):
        """Insert the records of `chunk` (from position `start`) not stored yet, in one
        transaction; their terms are counted now unless the load counts them at its end."""
        counted = None if self.recount else [_counted(r.content) for r in chunk]  # not locked
        with self.db.write() as db:
            if self.recount:
                _owe(db, "count")
            # Rowids given here, the next ones free, so that one executemany inserts them all;
            # a record whose id is stored already is skipped by the insert itself.
            first = db.execute("SELECT coalesce(max(rowid), 0) + 1 FROM nodes").fetchone()[0]
            tags = {}  # the same tags come again and again: each JSON made once
            # The triggers of the tag and full-text indexes are set aside for this transaction
            # only (a DROP rolls back with it; no other connection writes meanwhile, as this
            # one holds the write lock), and each index is written in one statement, or one
            # row a tag, instead of row by row.
            for trigger in ("node_tags_ai", "nodes_ai", "tags_ai"):
                db.execute(f"DROP TRIGGER {trigger}")
            inserted = db.executemany(
                "INSERT OR IGNORE INTO nodes (rowid, id, content, tags, links, source, "
                "created_at, last_accessed, access_count) VALUES (?, ?, ?, ?, '[]', ?, ?, ?, ?)",
                [(first + n, r.id, r.content, tags.get(tuple(r.tags)) or tags.setdefault(
                    tuple(r.tags), _json(r.tags)), r.source, r.created_at, r.last_accessed,
                  r.access_count) for n, r in enumerate(chunk)]).rowcount
            fresh = range(len(chunk)) if inserted == len(chunk) else [r - first for (r,) in (
                db.execute("SELECT rowid FROM nodes WHERE rowid >= ?", (first,)))]
            rows = {first + n: chunk[n] for n in fresh}
            db.executemany("INSERT INTO node_tags (tag, node, created_at) VALUES (?, ?, ?)",
                           sorted((t, rowid, r.created_at) for rowid, r in rows.items()
                                  for t in r.tags))
            used = collections.Counter(t for r in rows.values() for t in r.tags)
            db.executemany("INSERT INTO tags (tag, folded, memories) VALUES (?, ?, ?) ON "
                           "CONFLICT (tag) DO UPDATE SET memories = memories + excluded.memories",
                           [(t, t.casefold(), n) for t, n in used.items()])
            db.execute("INSERT INTO nodes_fts (rowid, content) SELECT rowid, content FROM nodes "
                       "WHERE rowid >= ?", (first,))
            _create(db, "node_tags_ai", "nodes_ai", "tags_ai")
            db.executemany("INSERT INTO fingerprints (hash, node) VALUES (?, ?)",
                           [(_fingerprint(r.content, r.tags), rowid) for rowid, r in rows.items()])
            if counted is not None:
                self.index.count_loaded(db, [(first + n, counted[n]) for n in fresh])
            stored = {chunk[n].id: n for n in set(range(len(chunk))) - set(fresh)}
            for ids in _chunks(list(stored)):
                self.differ += (start + stored[i] for i, content, tags in db.execute(
                    f"SELECT id, content, tags FROM nodes WHERE id IN ({_marks(ids)})", ids)
                    if content != chunk[stored[i]].content or
                    _strings(tags) != chunk[stored[i]].tags)
        for n in fresh:
            self.inserted[start + n] = 1
        self.loaded += len(fresh)
        self.skipped += len(chunk) - len(fresh)

    def link_all(self):
        """The links the records give, each record's own and the back-links it is owed by
        the records after it, LINK_BATCH at a time, the records taken last first: a memory
        many later ones link to (an entity of the official format) is written once, with
        them all. What is left (back-links to records that give no links, or to memories
        taken or stored before) is made after, each memory's together (see
        Store._link_back), in the order of the records. A record the load inserted gets its
        own links first, in their order, and back-links after them; a memory stored before
        gets the new ones after its own. Should the load stop in between, the links are
        owed (see owed)."""
        back = collections.defaultdict(list)  # target -> the records that link to it
        version = self.db.connection().execute("PRAGMA data_version").fetchone()[0]
        batch, size = [], 0
        for position, record in zip(range(len(self.records) - 1, -1, -1),
                                    reversed(self.records)):
            if record.links:
                batch.append((position, record))
                size += len(record.links) + len(back.get(record.id, ()))
            if batch and (size >= LINK_BATCH or position == 0):
                self.link(batch, back, version)
                batch, size = [], 0
                time.sleep(self.pause)
        for sources in back.values():
            sources.reverse()  # in the order of the records
        with self.db.errors("link the loaded memories"):
            self.store._link_back(back, self.pause, version=version)

    def link(self, batch, back, version):
        """The links of the records in `batch`, in one transaction: their own, and those
        they are owed by records already linked (unless another connection wrote since
        `version` of data_version: then they are left in `back`, to be checked). The
        back-links their own links call for are added to `back`."""
        with self.db.write() as db:
            _owe(db, "links")
            if self.recount:
                _owe(db, "count")
            alone = version == db.execute("PRAGMA data_version").fetchone()[0]
            exists = set()
            for chunk in _chunks(list({i: None for _, r in batch for i in (r.id, *r.links)})):
                exists.update(i for (i,) in db.execute(
                    f"SELECT id FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
            batch = [(p, r) for p, r in batch if r.id in exists]  # others forgot the rest
            added = {}  # record position -> the links it is to get, in order, each once
            for position, record in batch:  # last first
                mine = added[position] = {}
                for target in record.links:
                    if target not in exists:
                        self.dropped.append({"id": target, "reason": NO_SUCH_MEMORY})
                    elif target != record.id:
                        mine[target] = None
                if alone:  # owed by records after it, in their order
                    mine.update(dict.fromkeys(reversed(back.pop(record.id, ()))))
                for target in record.links:
                    if target in exists and target != record.id:
                        back[target].append(record.id)
            # A record this load inserted has no link yet, unless another writer gave it
            # one meanwhile: those are written straight, and the others read and merged.
            fresh = [(_id_list(added[p]), r.id) for p, r in batch if self.inserted[p]]
            written = db.executemany("UPDATE nodes SET links = ? WHERE id = ? AND links = '[]'",
                                     fresh).rowcount
            rest = [(p, r) for p, r in batch if not self.inserted[p]] if written == len(fresh) \
                else batch
            now = {}
            for chunk in _chunks([r.id for _, r in rest]):
                now.update((i, json.loads(text or "[]")) for i, text in db.execute(
                    f"SELECT id, links FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
            changed = []
            for position, record in rest:
                links, mine = now.get(record.id), added[position]
                if links is None:
                    del added[position]  # forgotten meanwhile by another writer
                    continue
                if self.inserted[position]:
                    merged = [*mine, *(t for t in links if t not in mine)]
                else:
                    had = set(links)
                    merged = links + [t for t in mine if t not in had]
                if merged != links:
                    changed.append((_id_list(merged), record.id))
            db.executemany("UPDATE nodes SET links = ? WHERE id = ?", changed)


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


def open_directory(directory):
    """The store in `directory` (`~` expanded), creating the directory if need be.

    A directory made here is private (0700), as is a database made in it (0600, and SQLite
    gives its -wal and -shm files the database's mode). A database that other users of the
    machine can read is warned about, with the command that fixes it.
    """
    directory = os.path.expanduser(directory)
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
    store = Store(path)
    exposed = [p for p in (path, path + "-wal", path + "-shm") if _shared_mode(p)]
    if exposed:
        log.warning("%s can be read by other users of this machine; to make it private, run: "
                    "chmod 700 %s && chmod 600 %s*", os.path.basename(exposed[0]),
                    _quoted(directory), _quoted(path))
    return store


def _shared_mode(path):
    """Whether users other than the owner may read or write the file at `path`."""
    if os.name != "posix":
        return False  # Windows keeps files private through ACLs, not mode bits
    try:
        return bool(os.stat(path).st_mode & 0o077)
    except OSError:
        return False


def _quoted(path):
    return path if re.fullmatch(r"[\w/.~+:@%-]+", path) else "'" + path.replace("'", "'\\''") + "'"


def _target_file(target, what):
    """The path `what` (a backup, an export) named `target` is written to: `target` made
    absolute, or the regular file it points at if it is a symbolic link (written through, so
    the link stays); InvalidInput for a directory, a device or any other kind of file, or a
    directory that does not exist.

    Only a link at the end is followed: the directories on the way stay as given, so that
    messages name the path the person gave (a Mac's temporary folder is reached through
    the link /var, and Windows would expand a short name such as FIRSTL~1)."""
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
    """Copy the file `source` to a new file `target` that only its owner may read."""
    with open(source, "rb") as f, open(_open_private(target), "wb") as out:
        shutil.copyfileobj(f, out)


_RESTORING = r"\.restore-(\d+)-\w+"  # a restore's work directory: its process's id, then random


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
    if pid == os.getpid():
        return True
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
    """os.replace(source, target). On Windows (`system`, os.name, says "nt") a target that
    another program holds open (an editor, a sync or backup tool, an antivirus scan) cannot
    be replaced ("Access is denied"), often for a moment only: the rename is tried again for
    a few seconds, then StoreError says what to close."""
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


def _create_private(path):
    """Create the empty file `path` readable by its owner only; False if it was there."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        return False
    return True


def _checked_backup(path, name, page_size):
    """Check the copy at `path` of the backup file `name` and bring it to this schema, in
    SQLite's page size `page_size`; how many memories it holds. InvalidInput if it is not an
    intact Flood Memory database."""
    with open(path, "rb") as f:
        if not f.read(16).startswith(b"SQLite format 3\0"):
            raise InvalidInput(f"{name} is not a backup of the memories: it is not an SQLite "
                               f"database")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        try:
            problem = db.execute("PRAGMA quick_check").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE "
                                               "type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise InvalidInput(f"{name} is damaged ({exc}); nothing was restored") from exc
        if problem != "ok":
            raise InvalidInput(f"{name} is damaged ({problem}); nothing was restored")
        if "nodes" not in tables:
            raise InvalidInput(f"{name} is not a backup of the memories: it has no nodes table")
        if version > SCHEMA_VERSION:
            raise InvalidInput(f"{name} has schema version {version}, newer than the "
                               f"{SCHEMA_VERSION} this Flood Memory understands; upgrade "
                               f"Flood Memory to restore it")
    finally:
        db.close()
    try:
        with Store(path) as copy:  # brings an older schema up to date
            db = copy.db.connection()
            db.execute("INSERT INTO nodes_fts(nodes_fts, rank) VALUES ('integrity-check', 1)")
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
    """Refuse a file that is not an SQLite database or has lost pages, before SQLite sees it.
    Not a file this process has open through SQLite already: closing any descriptor of a
    file drops every POSIX lock the process holds on it, SQLite's too, and another process
    could then take itself for the last user and remove the log and its index from under
    this one (test_a_second_store_in_one_process_keeps_the_first_ones_locks)."""
    with _connected_lock:
        if _connected[os.path.realpath(path)] > 0:
            return
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read the memory database {path}: {exc.strerror}") from exc
    links = os.stat(path).st_nlink
    if links > 1:
        raise StoreError(f"{path} has {links} names (hard links, as cp -al or rsync --link-dest "
                         f"make): SQLite locks the file by its name, so writes through the "
                         f"other names would be lost. Give it a name of its own, with the "
                         f"servers stopped: cp {path} {path}.copy && mv {path}.copy {path}")
    if not header:
        return  # empty: SQLite makes a new database in it
    if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
        raise StoreError(f"{path} is not an SQLite database (its header is wrong); "
                         f"move it away or set FLOOD_MEMORY_DIR elsewhere")
    with contextlib.suppress(OSError):
        if os.path.getsize(path + "-wal") > 0:
            return  # the write-ahead log may hold pages the file lacks; SQLite replays it
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is only current when its "valid for" counter matches.
    if header[92:96] == header[24:28] and page_size and pages and size < pages * page_size:
        raise StoreError(f"{path} is damaged: it should hold {pages * page_size} bytes but "
                         f"holds {size} (truncated); restore it from a backup")


# ----------------------------------------------------------------------------- command line

def reader_gone(exc, system=None):
    """Whether `exc`, raised by a write to standard output, says that its reader has gone:
    BrokenPipeError, or on Windows (`system`, os.name, says "nt") OSError EINVAL, which is
    what a write to a pipe closed at the other end raises there."""
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
    """(line number, record number, value) of each JSON line (bytes), blank lines skipped;
    a line that is not JSON is InvalidInput naming it."""
    number = 0
    for line_number, line in enumerate(lines, 1):
        if line_number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]  # a byte-order mark, as some editors write
        if not line.strip():
            continue
        number += 1
        try:
            yield line_number, number, json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInput(f"record {number} (line {line_number}) is not UTF-8 text") from None
        except (ValueError, RecursionError) as exc:
            raise InvalidInput(f"record {number} (line {line_number}) is not JSON: "
                               f"{exc}") from None


def read_entries(lines):
    """(graph, entries) for an import file (lines of bytes): (where, value) of each thing
    it gives, and whether they come from a knowledge graph given as one object.

    Mostly a file holds a JSON value a line ("line 3"). One whose first line is "{" alone
    or starts with "[", or is a whole graph, is read whole instead, as JSON values one after
    another ("line 3" where each starts: printed with indents, as `jq .` writes them). One
    array gives its items ("item 3"); one knowledge graph ({"entities": [...], "relations":
    [...]}, as the official memory server's read_graph gives it) its entities and relations
    ("entity 3"), each given its "type". What is not JSON is InvalidInput."""
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
        rest = ((f"line {line}", value) for line, _, value in parsed)
        if top and _is_graph(top[2]):
            return True, itertools.chain(_graph_entries(top[2]), rest)
        return False, itertools.chain([(f"line {top[0]}", top[2])] if top else [], rest)
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
    """The lines of the binary file `source`, as UTF-8 bytes. A file that starts with a UTF-16
    byte order mark, as Windows PowerShell 5.1's > and Out-File write text, is decoded."""
    head = source.read(2)
    if head not in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return itertools.chain(io.BytesIO(head + source.readline()), source)
    return _utf16_lines(head, source)


def _utf16_lines(head, source):
    decoder = codecs.getincrementaldecoder("utf-16")()  # the byte order mark picks LE or BE
    pending = [decoder.decode(head)]  # the line read so far, in pieces: one may be long
    try:
        for chunk in iter(lambda: source.read(1 << 16), b""):
            *ended, rest = decoder.decode(chunk).split("\n")
            for text in ended:
                pending.append(text)
                yield ("".join(pending) + "\n").encode("utf-8")
                pending = []
            pending.append(rest)
        pending.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the file starts as UTF-16 text but is not: {exc.reason}") from None
    last = "".join(pending)
    if last:
        yield last.encode("utf-8")


_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _json_values(text):
    """[(line, value)] of the JSON values in `text`, one after another, each with the line
    it starts on; InvalidInput naming where one is not JSON."""
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
# The reference MCP memory server ("Knowledge Graph Memory Server", memory.jsonl, older
# versions memory.json) keeps one JSON object a line: an entity {"type": "entity", "name",
# "entityType", "observations": [...]} or a relation {"type": "relation", "from", "to",
# "relationType"}. Forks add fields (createdAt, version, mtime); only createdAt is used.
# The same graph as one JSON document (read_graph's {"entities", "relations"}) is read as
# those lines (see read_entries).
#
# Each entity becomes a memory ("John_Smith is a person."), each observation one of its own
# that names its entity ("John_Smith: Speaks fluent Spanish"), both tagged with the entity's
# name and type, and linked. Each relation becomes a memory ("John_Smith works at Anthropic")
# tagged with both names and its type, and linked to both entities' memories; the two
# entities' own memories are linked too. So connections from any of John's memories reaches
# Anthropic's within two hops. Ids are made
# from what a memory says, so that importing a file again adds only what is new in it.
#
# An entity with more than OFFICIAL_LINKED observations (a file often has one such, the
# user) is linked to its relations by its own memory only: linked to every observation, each
# relation of it cost as many links: a user with 3,000 observations and 300 relations made
# 900,000 of them.
# From one of its observations, a related entity is two hops away and that entity's
# observations three; connections at depth 2 from it would list its thousands of
# neighbours first anyway.

OFFICIAL = uuid.UUID("5f3a2c8e-9b1d-4c6e-8a7f-0e4d2b1c3a59")  # namespace of those ids
OFFICIAL_LINKED = 20  # past this many observations, an entity meets its relations by its own memory
OFFICIAL_MAX_NAME = 10_000  # characters in a name, type or relation type of the file


def _official_id(key):
    """The text of uuid.uuid5(OFFICIAL, key), made without a UUID object (an import makes
    one a memory): the namespace is hashed once, and the version and variant are set in the
    hex digits."""
    digest = _OFFICIAL_SHA1.copy()
    digest.update(key.encode("utf-8"))
    h = digest.hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


_OFFICIAL_SHA1 = hashlib.sha1(OFFICIAL.bytes)
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}  # RFC 4122's, in one digit


def is_official(value):
    """Whether a file's first JSON object is an entity or relation of the official format."""
    return isinstance(value, dict) and value.get("type") in ("entity", "relation") and \
        "content" not in value


def official_records(entries, source, report):
    """The Records of the memories of an official memory file, as an iterator, whose parsed
    lines are `entries` ([(where, value)], where as "line 3"; see read_entries); `source`
    names the file in each memory. Every line is checked before this returns: a malformed
    one is InvalidInput naming it. `report`, a Counter, counts entities, observations and
    relations, and what was skipped and why."""
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
                created = _official_time(value)
                entity = entities.setdefault(name, {"type": kind_of, "observations": {},
                                                    "created": created})
                for observation in observations:
                    text = _text(observation, "an observation").strip()
                    if len(name) + 2 + len(text) > MAX_CONTENT:  # as "name: text"
                        raise InvalidInput(f"an observation of {_shorten(name)} may have at "
                                           f"most {MAX_CONTENT - len(name) - 2:,} characters, "
                                           f"got {len(text):,}")
                    if not text:
                        report["skipped", "empty observation", "empty observations", ""] += 1
                    elif text in entity["observations"]:
                        report["skipped", "repeated observation", "repeated observations",
                               ""] += 1
                    else:
                        entity["observations"][text] = created
            elif kind == "relation":
                key = tuple(_official_name(value, k) for k in ("from", "relationType", "to"))
                if key in relations:
                    report["skipped", "repeated relation", "repeated relations", ""] += 1
                relations.setdefault(key, _official_time(value))
            else:
                report["skipped", "line", "lines", "with no type" if kind is None else
                       f"of another type ({_shorten(kind, 30)})"] += 1
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None
    if not entities and not relations and report:  # lines, and none of them the format's
        raise InvalidInput("the file holds no entity and no relation: it is not the official "
                           "memory server's (--format flood reads Flood Memory's own)")
    report["entities"] = len(entities)
    report["observations"] = sum(len(e["observations"]) for e in entities.values())
    report["relations"] = len(relations)
    return _official_memories(entities, relations, source, report)


def _official_memories(entities, relations, source, report):
    """The Records of official_records, one by one: an import spools them to a file as they
    come instead of holding them all (a large file's records were many times its size)."""
    now = _now()
    seen = {}  # name -> its tag

    def tags_of(*names):
        """The names of the file as tags: as they are when remember takes them as tags, or
        else cut to MAX_TAG_LENGTH and cleared of control characters (counted, once a name),
        rather than refusing the file for them."""
        for name in names:
            if name not in seen:
                seen[name] = name
                if len(name) > MAX_TAG_LENGTH or _CONTROL.search(name):
                    seen[name] = _CONTROL.sub(" ", name).strip()[:MAX_TAG_LENGTH].rstrip()
                    report["changed", "name", "names", "made a shorter tag, or one without "
                           "control characters"] += 1
        return _tags([seen[name] for name in names])
    ids = {}  # entity name -> [its memory's id, ids of its observations' memories]
    for name, entity in entities.items():
        ids[name] = [_official_id(f"entity\0{name}")]
        ids[name] += (_official_id(f"observation\0{name}\0{text}")
                      for text in entity["observations"])
    # Related entities' own memories link too: from a memory of one relation of John's, the
    # other entities he is related to are two links away.
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


def _official_summary(report):
    """What an official import held, what it skipped and why, what it changed, and what it
    kept as text only, in one line. Each is counted under ("skipped", "changed" or "kept as
    text only", singular, plural, the rest of the reason)."""
    made = ", ".join(f"{report[k]:,} {k if report[k] != 1 else one}" for k, one in (
        ("entities", "entity"), ("observations", "observation"), ("relations", "relation")))
    said = {"skipped": [], "changed": [], "kept as text only": []}
    for key, n in report.items():
        if isinstance(key, tuple) and n:
            what, one, many, why = key
            said[what].append(f"{n:,} {one if n == 1 else many}" + (f" {why}" if why else ""))
    return f"flood-memory: the file held {made}" + "".join(
        f"; {what}: {'; '.join(items)}" for what, items in said.items() if items)


def _official_name(value, key):
    """The name, type or relation type `key` of a line, stripped; InvalidInput if it cannot
    be one (NUL separates the names in the keys of _official_id)."""
    text = value.get(key)
    if not isinstance(text, str) or not _CONTROL.sub("", text).strip():
        raise InvalidInput(f"{value.get('type')} needs {key}, a string that is not empty")
    _text(text, key)
    if "\0" in text:
        raise InvalidInput(f"{key} must not hold a NUL character")
    if len(text) > OFFICIAL_MAX_NAME:
        raise InvalidInput(f"{key} may have at most {OFFICIAL_MAX_NAME:,} characters, got "
                           f"{len(text):,}")
    return sys.intern(text.strip())  # one copy of a name the file repeats in many relations


def _official_time(value):
    """A fork's createdAt, in the stored form, or None."""
    created = value.get("createdAt")
    if created is None:
        return None
    try:
        return _utc(created) if isinstance(created, str) else _format_time(
            datetime.fromtimestamp(created / (1000 if created > 1e11 else 1), timezone.utc))
    except (ValueError, TypeError, OverflowError, OSError):
        return None  # a field of a fork in some other form: not ours to refuse the file for


def _memories(n):
    return f"{n:,} memory" if n == 1 else f"{n:,} memories"


class _Spool:
    """Records kept in the binary file `file` and read back as often as asked (a load reads
    them twice): an import's checked records wait here, on disk, rather than in memory.
    In marshal's form, which this same process reads back faster than JSON."""

    def __init__(self, records, file):
        self.file = file
        self.n = 0
        self.starts = array.array("Q")  # where each record starts, to read them last first
        for self.n, record in enumerate(records, 1):
            data = marshal.dumps(tuple(record))
            self.starts.append(file.tell())
            file.write(len(data).to_bytes(4, "little") + data)

    def __len__(self):
        return self.n

    def __iter__(self):
        return self._read(0, self.n)

    def __reversed__(self):
        """The records last first, read forwards a thousand at a time."""
        for start in reversed(range(0, self.n, 1000)):
            yield from reversed(list(self._read(start, min(1000, self.n - start))))

    def _read(self, start, n):
        self.file.seek(self.starts[start] if start < self.n else 0)
        read = self.file.read
        for _ in range(n):
            yield Record(*marshal.loads(read(int.from_bytes(read(4), "little"))))


def _export_to(store, target):
    """Export to a file, written beside it and renamed into place once complete."""
    named, target = target, _target_file(target, "an export")
    if store.owns(target):
        raise InvalidInput(f"{named} is the memory database itself; export to another file")
    _remove_leftovers(os.path.dirname(target), re.escape(os.path.basename(target)) +
                      r"\.(\d+)\.part")
    partial = f"{target}.{os.getpid()}.part"
    try:
        with open(_open_private(partial), "w", encoding="utf-8", newline="\n") as out:
            n = export(store, out)
        _replace(partial, target)
        return n
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.remove(partial)


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake said in one line."""

    def error(self, message):
        self.exit(2, f"flood-memory: {self.prog.removeprefix('store.py ')}: {message} (see "
                     f"{self.prog} --help)\n")


def _parser():
    parser = _Parser(prog="store.py", description=(
        "Your memories, from the terminal: look through them, correct them, forget them, "
        "and copy them. The database is memory.db in $FLOOD_MEMORY_DIR (default "
        "~/flood/memory); every command is safe while servers run, and looking is not an "
        "access."))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = commands.choices  # for a mistake found after a command's own parse

    def command(name, about):
        return commands.add_parser(name, help=about, description=about)

    def file_name(text):
        if not text.strip():
            raise argparse.ArgumentTypeError("the file name is empty")
        return text

    def filters(sub, limit):
        sub.add_argument("--tag", action="append", default=[], metavar="T",
                         help="only memories carrying T (whatever its case); may be repeated")
        sub.add_argument("--limit", type=int, default=limit, metavar="N",
                         help=f"at most N memories (default {limit})")
        sub.add_argument("--json", action="store_true", help="print JSON, for scripts")

    sub = command("list", "the newest memories, one a line")
    filters(sub, 20)
    sub.add_argument("--since", metavar="D", help="created at or after D (2026-11-23, ...)")
    sub.add_argument("--until", metavar="D", help="created before D")
    sub = command("search", "memories matching words, ranked as recall ranks them")
    sub.add_argument("words", nargs="+", metavar="WORDS")
    filters(sub, 10)
    sub = command("show", "one memory, whole, with the memories it links to")
    sub.add_argument("id", metavar="ID", help="its id, or its first 4 characters or more")
    sub.add_argument("--json", action="store_true", help="print JSON, for scripts")
    sub = command("edit", "change a memory: its content in your editor ($VISUAL or $EDITOR), "
                          "or what the options give")
    sub.add_argument("id", metavar="ID")
    sub.add_argument("--content", metavar="TEXT", help="the new content")
    tags = sub.add_mutually_exclusive_group()
    tags.add_argument("--tag", action="append", metavar="T",
                      help="its tags become the --tag options given")
    tags.add_argument("--no-tags", action="store_true", help="take every tag away")
    sub = command("forget", "delete memories, and every link to them")
    sub.add_argument("ids", nargs="+", metavar="ID")
    sub.add_argument("--yes", action="store_true",
                     help="go ahead without asking (needed off a terminal: a script, Git Bash)")
    sub = command("tags", "every tag, with how many memories carry it, most used first")
    sub.add_argument("--json", action="store_true", help="print JSON, for scripts")
    sub = command("stats", "how many memories, links and tags; the database's path and size")
    sub.add_argument("--json", action="store_true", help="print JSON, for scripts")
    sub = command("check", "check the database and its indexes (reads every memory); "
                           "exit status 0 when all is well")
    sub.add_argument("--repair", action="store_true",
                     help="then make the indexes, statistics and links right again")
    sub = command("export", "every memory as a JSON line, oldest first, keys in a fixed order")
    sub.add_argument("file", nargs="?", default="-", metavar="FILE", type=file_name,
                     help="where to write them (standard output without it, or with -)")
    sub = command("import", "load memories from an export, or from the official memory "
                            "server's memory.jsonl; the file is checked whole first, and what "
                            "is stored already is skipped")
    sub.add_argument("file", metavar="FILE", type=file_name,
                     help="the file (- reads standard input)")
    sub.add_argument("--format", choices=("flood", "official"),
                     help="the file's format (told from its content otherwise)")
    sub.add_argument("--update", action="store_true",
                     help="memories stored already that the file gives otherwise take its "
                          "content and tags (skipped otherwise)")
    sub = command("backup", "copy the database, consistently, while servers keep writing")
    sub.add_argument("file", metavar="FILE", type=file_name)
    sub = command("restore", "replace every memory with those of a backup, checked first; "
                             "what it replaces is kept as a copy in the data directory")
    sub.add_argument("file", metavar="FILE", type=file_name)
    sub.add_argument("--yes", action="store_true",
                     help="go ahead without asking (needed off a terminal: a script, Git Bash)")
    return parser


def _json_out(value, **options):
    """`value` as JSON for standard output: characters as they are where its encoding holds
    them all, else as \\uXXXX escapes. A redirect or pipe on Windows writes in the ANSI code
    page (cp1252, ...), which holds few of the world's characters."""
    text = json.dumps(value, ensure_ascii=False, **options)
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return json.dumps(value, **options)
    return text


def store_py_command(system=None):
    """store.py as a message gives it to type: after the py launcher on Windows (`system`,
    os.name, says "nt"), where python3 is often the Microsoft Store's alias, else python3."""
    return ("py" if (system or os.name) == "nt" else "python3") + " store.py"


def _say(text=""):
    print(text, file=sys.stderr)


def _asked(question, undone):
    """Whether the person at the terminal answers yes to `question` (asked on standard error,
    as standard output may be a file). Off a terminal nobody can answer: a script, or Git
    Bash's window (mintty), which Python sees as a pipe. Then InvalidInput says that
    nothing was `undone` ("forgotten"), and that --yes does it without asking."""
    if sys.stdin is None or not sys.stdin.isatty():
        raise InvalidInput(f"standard input is not a terminal, so nobody can be asked: "
                           f"nothing was {undone}; give --yes to go ahead without asking")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _one(store, given):
    """The id of the one memory `given` (an id or its start) names; StoreError naming the
    candidates when it is ambiguous, or saying that none has it."""
    found = store.resolve(given)
    if not found:
        raise NotFound(f"no memory's id is or starts with {given.strip()!r}")
    if len(found) > 1:
        more = " and more" if len(found) > 10 else ""
        raise InvalidInput(f"{given.strip()!r} starts the ids of several memories: "
                           f"{', '.join(found[:10])}{more}; give more of it")
    return found[0]


# Characters that a terminal obeys rather than shows (escape sequences can retitle it, hide
# lines or set the clipboard), and those that reverse the text's direction: a memory may
# hold text from anywhere.
_UNSEEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(text):
    return _UNSEEN.sub(lambda m: ascii(m.group())[1:-1], text)


def _width():
    """How wide a line to print: the terminal's width, within 60 and 200 characters."""
    return max(60, min(200, shutil.get_terminal_size((120, 24)).columns))


def _line(short, node, width):
    """A memory in one line of at most `width` characters."""
    tags = f" [{', '.join(node['tags'])}]" if node["tags"] else ""
    text = _visible(f"{short}  {node['created_at'][:10]}{tags}  "
                    f"{' '.join(node['content'].split())}")
    return text if len(text) <= width else text[:width - 3] + "..."


def _print_nodes(store, nodes, args):
    if args.json:
        print(_json_out(nodes, indent=1))
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
    node_id = _one(store, args.id)
    node = store.peek([node_id]).get(node_id)
    if node is None:
        raise NotFound(_forgotten_meanwhile(node_id))
    linked = store.peek(node["links"][:50])
    if args.json:
        print(_json_out(dict(node, linked={i: linked[i]["content"][:100] for i in linked}),
                        indent=1))
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
    print()
    print("\n".join(_visible(line) for line in node["content"].split("\n")))


def split_command(text, system=None):
    """The words of the command line `text` (an EDITOR), as its system's programs read one:
    a POSIX shell's quoting, or on Windows (`system`, os.name, says "nt") the C runtime's
    (CommandLineToArgvW): double quotes group, "" inside them is a quote, and backslashes
    are literal except before a quote, so that "C:\\Program Files\\x.exe" -n is two words.
    ValueError for a quote left open."""
    if (system or os.name) != "nt":
        return shlex.split(text)
    words, word, started, quoted, at = [], [], False, False, 0
    while at < len(text):
        char = text[at]
        if char == "\\":
            end = at
            while end < len(text) and text[end] == "\\":
                end += 1
            slashes = end - at
            if text[end:end + 1] == '"':
                # Before a quote, a pair of backslashes is one, and one left over makes
                # the quote a character rather than a delimiter.
                word.append("\\" * (slashes // 2))
                if slashes % 2:
                    word.append('"')
                    end += 1
            else:
                word.append("\\" * slashes)
            at, started = end, True
        elif char == '"':
            if quoted and text[at + 1:at + 2] == '"':
                word.append('"')
                at += 1
            else:
                quoted = not quoted
            at, started = at + 1, True
        elif char in " \t" and not quoted:
            if started:
                words.append("".join(word))
            word, started, at = [], False, at + 1
        else:
            word.append(char)
            at, started = at + 1, True
    if quoted:
        raise ValueError("No closing quotation")
    if started:
        words.append("".join(word))
    return words


# The editors tried, in order, when neither VISUAL nor EDITOR is set, as git does: Debian's
# choice of the system's editor, then two that almost every Unix has.
SYSTEM_EDITORS = ("editor", "nano", "vi")


def editor_command(environ, system=None, which=shutil.which):
    """The editor to run, as words, program first, chosen as git chooses: VISUAL, else
    EDITOR, else the system's (Notepad on Windows, where `system`, os.name, says "nt"; else
    the first of SYSTEM_EDITORS). The program is looked up on the PATH of `environ` with
    `which` (shutil.which), as a shell would: on Windows that finds a script by the
    extensions of PATHEXT (VS Code's `code` is code.cmd), which a start without a shell
    would miss. InvalidInput if the setting is not a command, or if there is no editor."""
    system = system or os.name
    path = environ.get("PATH", os.defpath)
    setting = (environ.get("VISUAL") or "").strip() or (environ.get("EDITOR") or "").strip()
    try:
        words = split_command(setting, system)
    except ValueError as exc:
        raise InvalidInput(f"cannot read the editor command {setting!r} ({exc}); set VISUAL "
                           f"or EDITOR to a command") from None
    if not words:
        found = [n for n in (("notepad",) if system == "nt" else SYSTEM_EDITORS)
                 if which(n, path=path)]
        words = found[:1]
    if not words and system == "nt":
        raise InvalidInput("no editor is set, and Notepad is not on PATH: set EDITOR (in "
                           "PowerShell: $env:EDITOR = 'notepad'; in cmd.exe: set "
                           "EDITOR=notepad), or give the new text with --content")
    if not words:
        raise InvalidInput(f"no editor is set, and none of {', '.join(SYSTEM_EDITORS)} is on "
                           f"PATH: set VISUAL or EDITOR (for example export EDITOR=nano), or "
                           f"give the new text with --content")
    return [which(words[0], path=path) or words[0], *words[1:]]


def _edit(store, args, environ):
    node_id = _one(store, args.id)
    before = store.get(node_id)["content"]
    if args.content is not None or args.tag is not None or args.no_tags:
        tags = [] if args.no_tags else args.tag
        if args.content in (None, before) and tags is None:
            _say("flood-memory: edit: the content is unchanged; nothing was saved")
            return 0
        store.update(node_id, content=args.content, tags=tags)
        _say(f"flood-memory: edit: saved {node_id}")
        return 0
    command = editor_command(environ)
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
        for end in ("\r\n", "\n"):  # the line end most editors close a file with
            if after.endswith(end) and not before.endswith(end):
                after = after[:-len(end)]
                break
        if after == before:
            _say("flood-memory: edit: the content is unchanged; nothing was saved")
        elif not after.strip():
            _say(f"flood-memory: edit: the content was emptied; nothing was saved "
                 f"({store_py_command()} forget ID deletes a memory)")
        else:
            kept = True
            try:
                current = store.get(node_id)["content"]
            except NotFound:
                raise NotFound(f"the memory was forgotten meanwhile (by a server or another "
                               f"command); nothing was saved, and your text is in "
                               f"{path}") from None
            if current != before:
                raise StoreError(f"the memory was changed meanwhile (by a server or another "
                                 f"command); nothing was saved, and your text is in {path}: "
                                 f"run the edit again")
            try:
                store.update(node_id, content=after)
            except StoreError as exc:
                raise type(exc)(f"{exc}; nothing was saved, and your text is in "
                                f"{path}") from None
            kept = False
            _say(f"flood-memory: edit: saved {node_id}")
    finally:
        if not kept:
            with contextlib.suppress(OSError):
                os.remove(path)
    return 0


def _forget(store, args):
    ids = list(dict.fromkeys(_one(store, given) for given in args.ids))
    nodes = store.peek(ids)
    for node_id in ids:
        if node_id not in nodes:
            _say(f"flood-memory: forget: {_forgotten_meanwhile(node_id)}")
    ids = [node_id for node_id in ids if node_id in nodes]
    if not ids:
        return 0
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
            gone.add(node_id)
            continue
        links = sum(1 for t in nodes[node_id]["links"] if t not in gone)  # each link once
        gone.add(node_id)
        _say(f"flood-memory: forgot {node_id}" +
             (f" and its {links:,} link{'s' if links > 1 else ''}" if links else ""))
    return 0


def _check(store, args):
    problems = store.check()
    if problems and args.repair:
        store.repair()
        _say(f"flood-memory: check: repaired; it found: {'; '.join(problems)}")
        problems = store.check()
    if not problems:
        print("ok")
        return 0
    for problem in problems:
        print(f"problem: {problem}")
    if any(p.startswith("SQLite's integrity check") for p in problems):
        print(f"The database file is damaged: restore it from a backup ({store_py_command()} "
              f"restore FILE), or ask SQLite to salvage it (sqlite3 memory.db .recover).")
    else:
        print(f"Run: {store_py_command()} check --repair")
    return 1


KEPT = 3  # copies of what restores replaced, kept in the data directory


def _restore(store, args, directory):
    source, directory = args.file, os.path.expanduser(directory)
    copy = os.path.join(directory, f"before-restore-{datetime.now():%Y%m%d-%H%M%S-%f}.db")

    def confirm(count):  # once the backup has passed its checks
        if not args.yes and not _asked(
                f"Replace all {_memories(store.count())} with the {_memories(count)} of "
                f"{source}? A copy of what is replaced is kept in {directory}.", "restored"):
            return False
        store.backup(copy)
        return True

    n = store.restore(source, confirm)
    if n is None:
        _say("flood-memory: restore: nothing was restored")
        return 1
    _say(f"flood-memory: restored {_memories(n)} from {source}; what it replaced is in {copy}")
    older = sorted(glob.glob(os.path.join(glob.escape(directory), "before-restore-*.db")))
    for path in older[:-KEPT]:
        with contextlib.suppress(OSError):
            os.remove(path)
    return 0


def _import(store, args, records, report):
    done = store.load(records, checked=True, update=args.update)
    _say(f"flood-memory: imported {_memories(done['loaded'])}, skipped {done['skipped']:,} "
         f"stored already")
    if done["differ"] and args.update:
        _say(f"flood-memory: {_memories(done['differ'])} stored already took the file's "
             f"content and tags")
    elif done["differ"]:
        shown = done["differ_ids"][:10]
        _say(f"flood-memory: {_memories(done['differ'])} stored already differ in the file "
             f"and were left as they are: import it again with --update to apply the file's "
             f"content and tags, or change them one by one with {store_py_command()} edit ID")
        _say("  " + " ".join(shown) + (f" and {done['differ'] - len(shown):,} more"
                                       if done["differ"] > len(shown) else ""))
    if report is not None:
        _say(_official_summary(report))
    return 0


PRINTING = ("list", "search", "show", "tags", "stats", "check")  # text to standard output


def main(argv=None, environ=None):
    parser = _parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra:  # said by the command's parser, which names the command and its --help
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    environ = os.environ if environ is None else environ
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="flood-memory: %(levelname)s: %(message)s")
    directory = environ.get("FLOOD_MEMORY_DIR") or DEFAULT_DIR
    command, failed = args.command, "read"
    if command in PRINTING and hasattr(sys.stdout, "reconfigure"):
        # A redirect or pipe on Windows writes in the ANSI code page: a character it does not
        # hold is written as an escape (\u65e5) rather than ending the command.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        if command != "import" and not os.path.exists(
                os.path.join(os.path.expanduser(directory), DB_NAME)):
            raise StoreError(f"there is no memory database in {directory}")
        with contextlib.ExitStack() as stack:
            records = report = None
            if command == "import":
                # An import makes a million objects that live to its end, and no garbage
                # cycles: the collector's passes over them would find nothing to free.
                gc.disable()
                stack.callback(gc.enable)
                # The whole file is read and checked before the store is opened, so that a
                # wrong or broken file creates nothing and servers never wait for the
                # parsing: the checked records wait in a temporary file.
                if args.file == "-" and sys.stdin is None:
                    raise StoreError("standard input is closed: give the FILE to import")
                source = stack.enter_context(sys.stdin.buffer if args.file == "-" else
                                             open(args.file, "rb"))
                failed = "write a temporary file"
                spool = stack.enter_context(tempfile.TemporaryFile())
                failed = "read"
                graph, entries = read_entries(utf8_lines(source))
                first = next(entries, None)
                entries = itertools.chain([first] if first else [], entries)
                if args.format == "official" or args.format is None and (
                        graph or first and is_official(first[1])):
                    report = collections.Counter()
                    name = "standard input" if args.file == "-" else os.path.basename(args.file)
                    records = official_records(entries, name, report)
                else:
                    records = _checked(value for _, value in entries)
                failed = "write a temporary file"
                records = _Spool(records, spool)
            failed = "open the database"
            store = stack.enter_context(open_directory(directory))
            failed = "write"
            if command == "import":
                return _import(store, args, records, report)
            if command in ("list", "search"):
                searched = {}
                nodes = store.newest(args.tag, args.since, args.until, args.limit) \
                    if command == "list" else store.search(" ".join(args.words), args.tag,
                                                           args.limit, count=False,
                                                           report=searched)
                if searched.get("cut"):
                    _say(f"flood-memory: search: only the first {MAX_QUERY_WORDS} words "
                         f"were searched for")
                _print_nodes(store, nodes, args)
            elif command == "show":
                _show(store, args)
            elif command == "edit":
                return _edit(store, args, environ)
            elif command == "forget":
                return _forget(store, args)
            elif command == "tags":
                counts = store.tag_counts()
                if args.json:
                    print(_json_out([{"tag": t, "memories": n} for t, n in counts], indent=1))
                for tag, n in [] if args.json else counts:
                    print(_visible(f"{n:>8,}  {tag}"))
                if not counts and not args.json:
                    _say("flood-memory: no memory carries a tag")
            elif command == "stats":
                stats = store.stats()
                print(json.dumps(stats, indent=1) if args.json else "\n".join(
                    f"{k + ':':<10} {v:,}" if isinstance(v, int) else
                    f"{k + ':':<10} {'(none)' if v is None else v}" for k, v in stats.items()))
            elif command == "check":
                return _check(store, args)
            elif command == "export" and args.file == "-":
                if sys.stdout is None:
                    raise StoreError("standard output is closed: give a FILE to export to")
                out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
                n = export(store, out)
                out.flush()
                _say(f"flood-memory: exported {_memories(n)}")
            elif command == "export":
                n = _export_to(store, args.file)
                _say(f"flood-memory: exported {_memories(n)} to {args.file}")
            elif command == "backup":
                n = store.backup(args.file)
                _say(f"flood-memory: backed up {_memories(n)} to {args.file}")
            elif command == "restore":
                return _restore(store, args, directory)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
