"""The memory store: one SQLite file, the `nodes` table, its FTS5 index and the link graph.

`Store` is the whole persistence API. Callers hand it plain Python values and get plain
dicts and lists back; only this module speaks SQL. It owns the schema and its migrations,
the triggers that keep the full-text index in step with the table, bidirectional links
(a link and its back-link are written in one transaction), breadth-first traversal and
access tracking.
"""

import collections
import contextlib
import functools
import heapq
import io
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- schema

SCHEMA = """
-- One row per memory. `rowid` is implicit; the full-text index and the tables below point at it.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,         -- uuid4, lower case
    content TEXT NOT NULL,       -- the memory itself, no length limit
    tags TEXT DEFAULT '[]',      -- JSON array of strings
    links TEXT DEFAULT '[]',     -- JSON array of node ids; every link has its back-link
    source TEXT DEFAULT '',      -- conversation label or id
    created_at TEXT NOT NULL,    -- ISO 8601, UTC
    last_accessed TEXT NOT NULL, -- ISO 8601, UTC; set by every recall or traversal hit
    access_count INTEGER DEFAULT 0
);

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
    PRIMARY KEY (tag, node)
) WITHOUT ROWID;
CREATE TRIGGER node_tags_ai AFTER INSERT ON nodes BEGIN
    INSERT OR IGNORE INTO node_tags (tag, node)
        SELECT value, new.rowid FROM json_each(new.tags) WHERE type = 'text';
END;
CREATE TRIGGER node_tags_ad AFTER DELETE ON nodes BEGIN
    DELETE FROM node_tags
        WHERE node = old.rowid AND tag IN (SELECT value FROM json_each(old.tags));
END;
CREATE TRIGGER node_tags_au AFTER UPDATE OF tags ON nodes BEGIN
    DELETE FROM node_tags
        WHERE node = old.rowid AND tag IN (SELECT value FROM json_each(old.tags));
    INSERT OR IGNORE INTO node_tags (tag, node)
        SELECT value, new.rowid FROM json_each(new.tags) WHERE type = 'text';
END;

-- How many memories hold each term the index holds (a porter stem). Store keeps it in the
-- transaction of every write; ranking reads document frequencies here instead of scanning.
CREATE TABLE terms (
    term TEXT PRIMARY KEY,
    df INTEGER NOT NULL
) WITHOUT ROWID;

-- Terms so common that ranking them through the index would read much of it. Each has an
-- impact list in hot_postings holding exactly the memories whose impact exceeds `floor`.
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
"""

# Versions of SCHEMA, kept in PRAGMA user_version:
# 1: nodes, nodes_fts and its three triggers, as SPEC.md gives them.
# 2: nodes_au fires on content only; node_tags; terms, hot_terms and hot_postings for ranking.
# 3: no new tables: terms re-counted where memories hold non-ASCII text, whose words version 2
#    folded differently from unicode61 (Hangul split into letters, Greek accents dropped).
SCHEMA_VERSION = 3



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


def _creating(script, *prefixes):
    """The CREATE statements of `script` whose object's name starts with one of `prefixes`."""
    found = []
    for statement in _statements(script):
        words = statement.split()
        name = words[3] if words[1] == "VIRTUAL" else words[2]
        if name.startswith(prefixes):
            found.append(statement)
    return found


# MIGRATIONS[v] holds the statements that take a version-v database to version v + 1.
MIGRATIONS = {
    1: ["DROP TRIGGER nodes_au",
        *_creating(SCHEMA, "nodes_au", "node_tags", "terms", "hot_"),
        "INSERT OR IGNORE INTO node_tags (tag, node) SELECT j.value, n.rowid "
        "FROM nodes n, json_each(n.tags) j WHERE json_valid(n.tags) AND j.type = 'text'"],
    2: [],
}

# Versions from which the ranking tables must be rebuilt from the memories themselves: always
# below the first, below the second only if some memory holds non-ASCII text.
_REINDEX_BELOW = 2
_REINDEX_NON_ASCII_BELOW = 3

# The tables of SPEC.md's schema (version 1), FTS5's own included.
_SPEC_TABLES = {"nodes", "nodes_fts", "nodes_fts_data", "nodes_fts_idx", "nodes_fts_docsize",
                "nodes_fts_config"}

# ----------------------------------------------------------------------------- limits

MAX_LIMIT = 100         # recall results per call
MAX_DEPTH = 100         # hops a traversal may be asked for
MAX_NODES = 1000        # memories one connections call returns, nearest first
MAX_OFFSET = 1000       # recall results a call may skip, to page past earlier ones
TRAVERSAL_CAP = 10_000  # memories a traversal walks and counts; pages reach this far
MAX_CONTENT = 100_000   # characters in one memory
MAX_TAGS = 100          # tags on one memory
MAX_TAG_LENGTH = 200    # characters in one tag
MAX_LINKS = 10_000      # ids in one links argument (back-links alone may make more)
BUSY_TIMEOUT = 5.0      # seconds a write waits for another writer before giving up
CHECKPOINT_EVERY = 64   # write transactions between background checkpoints...
CHECKPOINT_PAUSE = 1.0  # ...or seconds of quiet after a write
WAL_PAGES = 4096        # a commit checkpoints itself only once the log is this long...
WAL_BYTES = 16 << 20    # ...and a log restarted after that is cut back to this size

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


# ----------------------------------------------------------------------------- words
#
# Python's side of what FTS5's `porter` tokenizer does: unicode61 splitting and folding,
# then the Porter stemmer exactly as fts5_tokenize.c applies it (on UTF-8 bytes, tokens of
# 3 to 64 bytes only). The query side uses it to drop stopwords and duplicate stems.

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
    built with, so the only faithful source is SQLite itself: each non-ASCII character is
    looked up once, by tokenizing it between two letters, and kept.
    """

    def __init__(self):
        super().__init__((i, chr(i).lower() if chr(i).isalnum() else " ") for i in range(128))
        self._lock = threading.Lock()
        self._db = None

    def __missing__(self, code):
        with self._lock:
            if self._db is None:
                self._db = sqlite3.connect(":memory:", check_same_thread=False)
                self._db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61')")
                self._db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
            self._db.execute("DELETE FROM t")
            self._db.execute("INSERT INTO t (rowid, x) VALUES (1, ?)", (f"a{chr(code)}b",))
            terms = [t for (t,) in self._db.execute("SELECT term FROM v ORDER BY offset")]
        value = terms[0][1:-1] if len(terms) == 1 else " "
        if len(self) < 100_000:  # bounded: a hostile text may hold every code point there is
            self[code] = value
        return value


_folds = _Folds()


def tokenize(text):
    """The folded tokens of `text`, in order, split and folded as unicode61 does."""
    if text.isascii():
        return _TOKEN.findall(text.lower())
    return text.translate(_folds).split()


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


def _apply(word, rules):
    for suffix, condition, replacement in rules:
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
    """token -> term, computed on first sight. Looking up through it runs at C speed."""

    def __missing__(self, token):
        raw = token.encode("utf-8")
        if 3 <= len(raw) <= 64:
            # The C stemmer works on bytes; latin-1 maps each byte to one character.
            term = _porter(raw.decode("latin-1")).encode("latin-1").decode("utf-8", "replace")
        else:
            term = token
        if len(self) >= 200_000:  # bounded: unique tokens (numbers, codes) never stop coming
            self.clear()
        self[token] = term
        return term


_stems = _Stems()


def stem(token):
    """The term FTS5's porter tokenizer indexes for one folded token."""
    return _stems[token]


def term_counts(text):
    """How often each term occurs in `text`: a Counter of porter stems."""
    return collections.Counter(map(_stems.__getitem__, tokenize(text)))


def query_terms(text):
    """The words of a question that a search should look for, one per distinct stem.

    Stopwords are dropped unless nothing else is left, so "what is it?" still searches.
    """
    words = tokenize(text)
    meaningful = [w for w in words if w not in STOPWORDS] or words
    seen, terms = set(), []
    for word in meaningful:
        term = stem(word)
        if term not in seen:
            seen.add(term)
            terms.append(word)
    return terms


def fts_query(terms):
    """An FTS5 MATCH expression: each term quoted as a string, the terms OR-ed."""
    return " OR ".join('"%s"' % term.replace('"', '""') for term in terms)


# ----------------------------------------------------------------------------- ranking
#
# Stage one finds the best memories by BM25 exactly as FTS5's bm25() scores them, without
# letting FTS5 score every memory that holds a common word (see Store._top). Stage two
# re-scores those few with flatter length normalisation and lets a strong match lend weight
# to the memories stored right after it in the same context (see Store._rerank).

K1, B = 1.2, 0.75               # FTS5's bm25() constants
RERANK_K1, RERANK_B = 0.6, 0.3  # stage two: a long memory is penalised less for its length
RERANK_DEPTH = 25               # stage-one results that stage two re-scores
FOLLOWERS = (0.3, 0.3)          # share of a match's score lent to the next two memories
LENDERS = 10                    # stage-two matches that lend
HOT_MIN_DF = 500                # a term is hot once this many memories hold it...
HOT_SHARE = 50                  # ...and at least 1 in HOT_SHARE of them do
HOT_LIST = 1000                 # length of a hot term's impact list
TINY_IDF = 1e-6                 # FTS5's idf for a term that half the memories or more hold
TIE_EXTRA = 64                  # results beyond a cut fetched to settle ties there
TAG_SCAN_COST = 10              # scoring a memory in Python costs this many FTS5 matches


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


def _term_counts(text):
    """{term: [occurrences, one word of the text that stems to it]} for a memory's text."""
    counts = {}
    for word in tokenize(text):
        term = _stems[word]
        entry = counts.get(term)
        if entry is None:
            counts[term] = [1, word]
        else:
            entry[0] += 1
    return counts


# ----------------------------------------------------------------------------- values


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _node_id(value, name="node_id"):
    """`value` as a canonical memory id, or InvalidInput naming the argument."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {type(value).__name__}")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise InvalidInput(f"{name} {_shorten(value)} is not a memory id (ids look like "
                           f"'{uuid.UUID(int=0)}')") from None
    return str(parsed)


def _shorten(value, n=60):
    text = repr(value)
    return text if len(text) <= n else text[:n - 4] + "...'"


def _text(value, name, *, allow_empty=True):
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {type(value).__name__}")
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
    """Tags stripped of surrounding space, duplicates dropped, order kept."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(f"tags must be an array of strings, got {type(values).__name__}")
    tags = []
    for value in values:
        tag = _text(value, "each tag").strip()
        if not tag:
            raise InvalidInput("tags must not be empty strings")
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidInput(f"a tag may have at most {MAX_TAG_LENGTH} characters, "
                               f"got one of {len(tag)}")
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a memory may have at most {MAX_TAGS} tags, got {len(tags)}")
    return tags


NOT_AN_ID = "not a memory id"
NO_SUCH_MEMORY = "no memory has this id"
ITSELF = "a memory cannot link to itself"


def _link_ids(values, limit=MAX_LINKS, skipped=None):
    """Canonical ids from a links argument, duplicates dropped. Values that are not ids are
    left out and, when `skipped` is a list, added to it as {"id": value, "reason": ...}."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(f"links must be an array of memory ids, got {type(values).__name__}")
    if limit is not None and len(values) > limit:
        raise InvalidInput(f"links may hold at most {limit:,} ids, got {len(values):,}")
    ids = {}
    for value in values:
        try:
            ids[_node_id(value, "link")] = None
        except InvalidInput:
            if skipped is not None:
                skipped.append({"id": value if isinstance(value, str) else repr(value),
                                "reason": NOT_AN_ID})
    return list(ids)


def _log_skipped(doing, skipped):
    """One warning line for all the links a call skipped, however many."""
    if skipped:
        shown = ", ".join(_shorten(s["id"], 40) for s in skipped[:3])
        more = f" and {len(skipped) - 3:,} more" if len(skipped) > 3 else ""
        log.warning("%s: skipped %d link%s (%s): %s%s", doing, len(skipped),
                    "" if len(skipped) == 1 else "s", skipped[0]["reason"] if
                    len({s["reason"] for s in skipped}) == 1 else "several reasons", shown, more)


def _int(value, name, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {value}")
    return value


def _timestamp(value, name):
    _text(value, name)
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name} must be an ISO 8601 time, got {_shorten(value)}") from None
    return value


def _record(record, number):
    """A memory to load, checked and completed: a tuple in _COLUMNS order."""
    if not isinstance(record, dict):
        raise InvalidInput(f"record {number}: a memory must be a JSON object")
    try:
        if "id" not in record or "content" not in record:
            raise InvalidInput("a memory needs an id and content")
        created = _timestamp(record.get("created_at") or _now(), "created_at")
        count = record.get("access_count", 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInput("access_count must be a whole number of at least 0")
        return (_node_id(record["id"], "id"), _content(record["content"]),
                _tags(record.get("tags", [])), _link_ids(record.get("links", []), None),
                _text(record.get("source", ""), "source"), created,
                _timestamp(record.get("last_accessed") or created, "last_accessed"), count)
    except InvalidInput as exc:
        raise InvalidInput(f"record {number}: {exc}") from None


_COLUMNS = "id, content, tags, links, source, created_at, last_accessed, access_count"


def _node(row):
    return {
        "id": row[0],
        "content": row[1],
        "tags": json.loads(row[2] or "[]"),
        "links": json.loads(row[3] or "[]"),
        "source": row[4] or "",
        "created_at": row[5],
        "last_accessed": row[6],
        "access_count": row[7] or 0,
    }


@functools.lru_cache(maxsize=1024)
def _tag_set(tags_json):
    """The tags of a `tags` column value, as a frozenset."""
    return frozenset(json.loads(tags_json))


def _carrying(tags, column):
    """(SQL, parameters) joining node_tags so that only memories at `column` carrying every
    one of `tags` remain. One join per tag up to three; the rest are looked up one memory at
    a time in the last join's condition, since many joins exhaust SQLite's planner (and
    FTS5's MATCH with it)."""
    joined, rest = tags[:3], tags[3:]
    sql = "".join(f" JOIN node_tags t{i} ON t{i}.node = {column} AND t{i}.tag = ?"
                  for i in range(len(joined)))
    sql += "".join(f" AND EXISTS (SELECT 1 FROM node_tags x{i} WHERE x{i}.tag = ? AND "
                   f"x{i}.node = {column})" for i in range(len(rest)))
    return sql, [*joined, *rest]


def _chunks(items, size=500):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _marks(items):
    return ",".join("?" * len(items))


# ----------------------------------------------------------------------------- store


class _Query:
    """What one search knows of its words: terms, statistics, memories read so far."""

    __slots__ = ("count", "avgdl", "terms", "word_of", "df", "idf", "features", "prefixes")


class Store:
    """The memories in one SQLite database file.

    Safe to share between threads: each thread gets its own connection. Several processes
    may open the same file at once; writes wait for each other (up to `timeout` seconds).
    `hot_min_df` and `hot_list` tune the ranking index (tests make them small).
    """

    def __init__(self, path, *, timeout=BUSY_TIMEOUT, hot_min_df=HOT_MIN_DF, hot_list=HOT_LIST):
        self.path = os.fspath(path)
        self.timeout = timeout
        self.hot_min_df = hot_min_df
        self.hot_list = hot_list
        self.paths = collections.Counter()  # how stage one answered, for the benchmark
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open = set()
        self._writes = 0             # write transactions since the last checkpoint
        self._checkpointer = None    # the background thread that runs checkpoints
        self._wake = threading.Event()
        self._closing = False
        _check_file(self.path)
        if self.path != ":memory:" and not self.path.startswith("file:"):
            # SQLite would make it 0644 less the umask; its -wal and -shm copy this mode.
            with contextlib.suppress(OSError):
                _create_private(self.path)
        try:
            try:
                db = self._db()
            except StoreError as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            self._prepare(db)
        except BaseException:
            self.close()
            raise

    # -- connections and transactions

    def _db(self):
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                     check_same_thread=False)
                db.execute("PRAGMA foreign_keys=ON")
                # In WAL mode NORMAL keeps every committed transaction across a killed process.
                db.execute("PRAGMA synchronous=NORMAL")
                # Checkpoints run in the background (see _checkpoints), not in a commit,
                # unless writes come so fast that the log outgrows WAL_PAGES: a background
                # checkpoint racing a stream of writes never finishes, and only a finished
                # one lets the log start over.
                db.execute(f"PRAGMA wal_autocheckpoint={int(WAL_PAGES)}")
                db.execute(f"PRAGMA journal_size_limit={int(WAL_BYTES)}")
            except sqlite3.OperationalError as exc:
                # No path in these: past start-up, they reach the client.
                raise StoreError(f"cannot open the memory database: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"the memory database is damaged ({exc}); restore it from a "
                                 f"backup") from exc
            self._local.db = db
            with self._lock:
                self._open.add(db)
        return db

    def close_thread(self):
        """Close the calling thread's connection, if it has one."""
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            with self._lock:
                self._open.discard(db)
            db.close()

    def close(self):
        """Close every connection this store opened. Using the store again reopens it."""
        with self._lock:
            self._closing = True
            checkpointer = self._checkpointer
        if checkpointer is not None:
            self._wake.set()
            checkpointer.join()
        with self._lock:
            connections, self._open = self._open, set()
            self._closing = False
        for db in connections:
            db.close()  # the last connection to the file checkpoints it and removes the log
        self._local = threading.local()

    def _wrote(self):
        """Count a committed write; wake the checkpointer every CHECKPOINT_EVERY of them."""
        with self._lock:
            self._writes += 1
            if self._checkpointer is None and not self._closing:
                self._checkpointer = threading.Thread(target=self._checkpoints, daemon=True,
                                                      name="flood-memory checkpoints")
                self._checkpointer.start()
            due = self._writes >= CHECKPOINT_EVERY
        if due:
            self._wake.set()

    def _checkpoints(self):
        """Copy the write-ahead log into the database file every CHECKPOINT_EVERY writes and
        after a quiet second, in this thread, so that no request waits for it (PASSIVE: it
        never blocks readers or writers, and copies what they allow). The thread ends after
        a quiet spell with nothing to copy; the next write starts another."""
        try:
            while True:
                self._wake.wait(CHECKPOINT_PAUSE)
                self._wake.clear()
                with self._lock:
                    pending, self._writes = self._writes, 0
                    if self._closing or not pending:
                        self._checkpointer = None
                        return
                try:
                    self._db().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except (sqlite3.Error, StoreError) as exc:
                    # The next write wakes it again; a closing store ends it.
                    log.debug("checkpoint skipped: %s", exc)
        finally:
            self.close_thread()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextlib.contextmanager
    def _write(self):
        """One write transaction: IMMEDIATE so it waits for other writers up front."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        try:
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._wrote()

    @contextlib.contextmanager
    def _read(self):
        """One read transaction, so that every statement in it sees the same snapshot."""
        db = self._db()
        db.execute("BEGIN")
        try:
            yield db
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.execute("COMMIT")

    @contextlib.contextmanager
    def _errors(self, doing):
        """Turn SQLite's exceptions into StoreError saying what was being done."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(f"could not {doing}: the database stayed locked by another "
                                 f"process for more than {self.timeout:g} s") from exc
            raise StoreError(f"could not {doing}: {exc}") from exc
        except sqlite3.ProgrammingError as exc:
            if "closed" not in str(exc):
                raise  # a bug, for the transport to log
            raise StoreError(f"could not {doing}: the memory store is shutting down") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"could not {doing}: the database is damaged ({exc}); restore "
                             f"it from a backup") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"could not {doing}: {exc}") from exc

    # -- schema

    def _prepare(self, db):
        with self._errors(f"open the memory database {self.path}"):
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path} is damaged ({exc}); restore it from a "
                                 f"backup") from exc
            if version == SCHEMA_VERSION:
                return
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than the {SCHEMA_VERSION} "
                    f"this Flood Memory understands; upgrade Flood Memory to open it")
            self._use_wal(db)
            with self._write():
                self._migrate(db)

    def _use_wal(self, db):
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
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

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
        reindex = version < _REINDEX_BELOW or version < _REINDEX_NON_ASCII_BELOW and db.execute(
            "SELECT 1 FROM nodes WHERE length(CAST(content AS BLOB)) <> length(content) "
            "LIMIT 1").fetchone()
        repair = version < 2  # SPEC.md's schema, written by tools that may not mirror links
        while version < SCHEMA_VERSION:
            for statement in MIGRATIONS[version]:
                db.execute(statement)
            version += 1
        if repair:
            self._repair_links(db)
        if reindex:
            self._reindex(db)
        db.execute(f"PRAGMA user_version = {int(version)}")

    def _repair_links(self, db):
        """Make every link two-way and drop links to missing memories and to themselves:
        a database written by other tools before versions were recorded may lack them."""
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

    def _reindex(self, db):
        """Rebuild the ranking tables from the memories themselves."""
        log.info("building the ranking index of %s", self.path)
        db.execute("DELETE FROM terms")
        db.execute("DELETE FROM hot_terms")
        db.execute("DELETE FROM hot_postings")
        cursor = db.execute("SELECT rowid, content FROM nodes")
        while batch := cursor.fetchmany(5000):
            self._index_added(db, batch)

    # -- the ranking index: term statistics and impact lists

    def _averages(self, db):
        """(memories, tokens) in the full-text index, from FTS5's own averages record."""
        row = db.execute("SELECT block FROM nodes_fts_data WHERE id = 1").fetchone()
        if not row or not row[0]:
            return 0, 0
        count, i = _varint(row[0])
        return count, _varint(row[0], i)[0]

    def _lengths(self, db, rowids):
        """{rowid: tokens} as FTS5 counted them (its docsize table)."""
        out = {}
        for chunk in _chunks(rowids):
            out.update((r, _varint(size)[0]) for r, size in db.execute(
                f"SELECT id, sz FROM nodes_fts_docsize WHERE id IN ({_marks(chunk)})", chunk))
        return out

    def _hot(self, db, terms):
        """{term: [floor, avgdl, size, largest impact]} for the hot ones among `terms`."""
        out = {}
        for chunk in _chunks(list(terms)):
            out.update((row[0], list(row[1:])) for row in db.execute(
                f"SELECT term, floor, avgdl, size, (SELECT max(impact) FROM hot_postings p "
                f"WHERE p.term = h.term) FROM hot_terms h WHERE term IN ({_marks(chunk)})",
                chunk))
        return out

    def _index_added(self, db, docs):
        """Count the terms of memories just inserted, [(rowid, content)], into the index."""
        counted = [(rowid, _term_counts(content)) for rowid, content in docs]
        delta, words = collections.Counter(), {}
        for _, counts in counted:
            for term, (_, word) in counts.items():
                delta[term] += 1
                words.setdefault(term, word)
        if not delta:
            return
        db.executemany("INSERT INTO terms (term, df) VALUES (?, ?) ON CONFLICT (term) "
                       "DO UPDATE SET df = df + excluded.df", delta.items())
        hot = self._hot(db, delta)
        if hot:
            lengths = self._lengths(db, [rowid for rowid, _ in docs])
            members, grown = [], collections.Counter()
            for rowid, counts in counted:
                for term in counts.keys() & hot.keys():
                    floor, avgdl = hot[term][:2]
                    impact = _impact(counts[term][0], lengths[rowid], avgdl)
                    if impact > floor:
                        members.append((term, impact, rowid))
                        grown[term] += 1
            db.executemany("INSERT OR IGNORE INTO hot_postings (term, impact, node) "
                           "VALUES (?, ?, ?)", members)
            for term, n in grown.items():
                db.execute("UPDATE hot_terms SET size = size + ? WHERE term = ?", (n, term))
                if hot[term][2] + n > 2 * self.hot_list:
                    self._trim(db, term)
        count, _ = self._averages(db)
        threshold = max(self.hot_min_df, count // HOT_SHARE)
        fresh = []
        for chunk in _chunks([t for t in delta if t not in hot]):
            fresh += [t for (t,) in db.execute(
                f"SELECT term FROM terms WHERE term IN ({_marks(chunk)}) AND df >= ?",
                (*chunk, threshold))]
        for term in fresh:
            self._build(db, term, words[term])

    def _index_removed(self, db, docs):
        """Take the terms of memories about to be deleted, [(rowid, content)], out of the index."""
        delta, words = collections.Counter(), {}
        for _, content in docs:
            for term, (_, word) in _term_counts(content).items():
                delta[term] += 1
                words.setdefault(term, word)
        db.executemany("UPDATE terms SET df = df - ? WHERE term = ?",
                       [(n, t) for t, n in delta.items()])
        db.executemany("DELETE FROM terms WHERE term = ? AND df <= 0", [(t,) for t in delta])
        shrunk = collections.Counter()
        for rowid, _ in docs:
            shrunk.update(t for (t,) in db.execute(
                "SELECT term FROM hot_postings WHERE node = ?", (rowid,)))
            db.execute("DELETE FROM hot_postings WHERE node = ?", (rowid,))
        hot = self._hot(db, shrunk)
        for term, n in shrunk.items():
            floor, _, size, _ = hot[term]
            db.execute("UPDATE hot_terms SET size = size - ? WHERE term = ?", (n, term))
            if floor > 0 and size - n < self.hot_list // 4:
                # Called before the memories change, so the rebuild must pass them over.
                self._build(db, term, words.get(term, term), {rowid for rowid, _ in docs})

    def _build(self, db, term, word, leaving=frozenset()):
        """Make the impact list of `term` (which `word` stems to) from the index, less the
        memories at `leaving` (about to be deleted or given new content)."""
        count, tokens = self._averages(db)
        if not count:
            return
        avgdl = tokens / count
        rowids = [r for (r,) in db.execute(
            "SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ? ORDER BY bm25(nodes_fts) "
            "LIMIT ?", (fts_query([word]), self.hot_list + 1 + len(leaving))) if r not in leaving]
        lengths = self._lengths(db, rowids)
        impacts = []
        for rowid, content in self._contents(db, rowids):
            tf = term_counts(content)[term]
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

    def _contents(self, db, rowids):
        out = []
        for chunk in _chunks(rowids):
            out += db.execute(f"SELECT rowid, content FROM nodes WHERE rowid IN ({_marks(chunk)})",
                              chunk).fetchall()
        return out

    # -- reading

    def get(self, node_id):
        """The memory with this id, without counting it as an access."""
        node_id = _node_id(node_id)
        with self._errors("read the memory"):
            row = self._db().execute(f"SELECT {_COLUMNS} FROM nodes WHERE id = ?",
                                     (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        return _node(row)

    def count(self):
        """How many memories there are."""
        with self._errors("count the memories"):
            return self._db().execute("SELECT count(*) FROM nodes").fetchone()[0]

    # -- writing

    def add(self, content, tags=(), links=(), source=""):
        """Store a new memory and link it both ways to the existing ids in `links`.

        Returns the memory. Links left out (not an id, or no memory has it) are listed under
        "skipped_links", each {"id", "reason"}.
        """
        content = _content(content)
        tags = _tags(tags)
        skipped = []
        links = _link_ids(links, skipped=skipped)
        source = _text(source, "source")
        node_id, now = str(uuid.uuid4()), _now()
        with self._errors("save the memory"), self._write() as db:
            links = self._existing(db, links, skipped)
            rowid = db.execute(
                "INSERT INTO nodes (id, content, tags, links, source, created_at, last_accessed, "
                "access_count) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                (node_id, content, _json(tags), _json(links), source, now, now)).lastrowid
            self._index_added(db, [(rowid, content)])
            for target in links:
                self._relink(db, target, add=[node_id])
        node = {"id": node_id, "content": content, "tags": tags, "links": links,
                "source": source, "created_at": now, "last_accessed": now, "access_count": 0}
        return _with_skipped(node, "remember", skipped)

    def load(self, records):
        """Insert whole memories, ids and timestamps as given, in one transaction.

        For imports and benchmarks. A record whose id is already here is skipped; links to
        ids found neither here nor among the records are dropped with a warning; every link
        gets its back-link. A bad record refuses the whole load, naming its number.
        Returns {"loaded": n, "skipped": n}.
        """
        loaded = skipped_records = 0
        linked = []  # (id, links): checked once every record is in
        with self._errors("load the memories"), self._write() as db:
            batch = []
            for number, record in enumerate(records, 1):
                batch.append(_record(record, number))
                if len(batch) == 2000:
                    loaded, skipped_records = self._load_batch(db, batch, linked, loaded,
                                                               skipped_records)
                    batch = []
            loaded, skipped_records = self._load_batch(db, batch, linked, loaded,
                                                       skipped_records)
            back = collections.defaultdict(list)  # target -> ids to add, each target once
            skipped = []
            for node_id, links in linked:
                kept = self._existing(db, [i for i in links if i != node_id], skipped)
                if kept != links:
                    db.execute("UPDATE nodes SET links = ? WHERE id = ?", (_json(kept), node_id))
                for target in kept:
                    back[target].append(node_id)
            for target, ids in back.items():
                self._relink(db, target, add=ids)
        _log_skipped("import", skipped)
        return {"loaded": loaded, "skipped": skipped_records}

    def _load_batch(self, db, batch, linked, loaded, skipped):
        present = set()
        for chunk in _chunks([r[0] for r in batch]):
            present.update(i for (i,) in db.execute(
                f"SELECT id FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
        added = []
        for record in batch:
            if record[0] in present:
                skipped += 1
                continue
            present.add(record[0])
            rowid = db.execute("INSERT INTO nodes (id, content, tags, links, source, created_at, "
                               "last_accessed, access_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                               (record[0], record[1], _json(record[2]), _json(record[3]),
                                *record[4:])).lastrowid
            added.append((rowid, record[1]))
            if record[3]:
                linked.append((record[0], record[3]))
        self._index_added(db, added)
        return loaded + len(added), skipped

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
        with self._errors("update the memory"), self._write() as db:
            old = self._row(db, node_id)
            changes = {}
            if content is not None and content != old["content"]:
                changes["content"] = content
            if tags is not None:
                changes["tags"] = _json(tags)
            if links is not None:
                links = self._existing(db, links, skipped)
                before = old["links"]
                for target in before:
                    if target not in links:
                        self._relink(db, target, remove=node_id)
                for target in links:
                    if target not in before:
                        self._relink(db, target, add=[node_id])
                changes["links"] = _json(links)
            if changes:
                rowid = db.execute("SELECT rowid FROM nodes WHERE id = ?", (node_id,)).fetchone()[0]
                if "content" in changes:
                    self._index_removed(db, [(rowid, old["content"])])
                db.execute(f"UPDATE nodes SET {', '.join(f'{k} = ?' for k in changes)} "
                           f"WHERE rowid = ?", (*changes.values(), rowid))
                if "content" in changes:
                    self._index_added(db, [(rowid, content)])
            node = self._row(db, node_id)
        return _with_skipped(node, "update", skipped)

    def delete(self, node_id):
        """Delete a memory and every back-link to it."""
        node_id = _node_id(node_id)
        with self._errors("delete the memory"), self._write() as db:
            node = self._row(db, node_id)
            for target in node["links"]:
                self._relink(db, target, remove=node_id)
            rowid = db.execute("SELECT rowid FROM nodes WHERE id = ?", (node_id,)).fetchone()[0]
            self._index_removed(db, [(rowid, node["content"])])
            db.execute("DELETE FROM nodes WHERE rowid = ?", (rowid,))
        return {"id": node_id, "deleted": True}

    # -- whole database

    def records(self):
        """Every memory, oldest first, as dicts with keys in a fixed order; one snapshot."""
        with self._errors("read the memories"), self._read() as db:
            cursor = db.execute(f"SELECT {_COLUMNS} FROM nodes ORDER BY rowid")
            while rows := cursor.fetchmany(1000):
                yield from map(_node, rows)

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
        target = os.path.abspath(os.path.expanduser(os.fspath(target)))
        if self.owns(target):
            raise InvalidInput("the backup file must not be the database itself")
        directory = os.path.dirname(target)
        partial = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.part")
        try:
            with self._errors(f"back up the memories to {target}"):
                os.close(_open_private(partial))
                copy = sqlite3.connect(partial, isolation_level=None)
                try:
                    self._db().backup(copy)
                    problem = copy.execute("PRAGMA quick_check").fetchone()[0]
                    if problem != "ok":
                        raise StoreError(f"the copy of {self.path} failed its check: {problem}")
                    copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                    count = copy.execute("SELECT count(*) FROM nodes").fetchone()[0]
                finally:
                    copy.close()
            os.replace(partial, target)
        except OSError as exc:
            raise StoreError(f"cannot write the backup {target}: {exc.strerror}") from exc
        finally:
            for leftover in (partial, partial + "-journal", partial + "-wal", partial + "-shm"):
                with contextlib.suppress(OSError):
                    os.remove(leftover)
        return count

    def restore(self, source):
        """Replace every memory with those of the backup file `source`; return how many.

        Safe while servers run. The backup is checked and brought to this schema in a copy
        first, so a bad one changes nothing. Then SQLite's backup API writes the copy into
        the live database as one write transaction, waiting for other writers as any write
        does: open connections read the restored memories from their next transaction on,
        and none of them can write the old pages back (a file copied over the database
        would be undone by the next checkpoint of a running server's log).
        """
        source = os.path.abspath(os.path.expanduser(os.fspath(source)))
        if self.owns(source):
            raise InvalidInput("the backup to restore must not be the database itself")
        if not os.path.isfile(source):
            raise InvalidInput(f"there is no backup file {source}")
        work = tempfile.mkdtemp(prefix=".restore-", dir=os.path.dirname(self.path))
        try:
            copy = os.path.join(work, DB_NAME)
            try:
                shutil.copyfile(source, copy)
                if os.path.exists(source + "-wal"):  # a live database's log holds pages too
                    shutil.copyfile(source + "-wal", copy + "-wal")
            except OSError as exc:
                raise StoreError(f"cannot read the backup {source}: {exc.strerror}") from exc
            count = _checked_backup(copy, source, self._page_size())
            with self._errors("restore the memories"):
                backup = sqlite3.connect(copy, isolation_level=None)
                deadline = time.monotonic() + self.timeout

                def waited(status, remaining, total):
                    if status in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) and \
                            time.monotonic() > deadline:
                        raise sqlite3.OperationalError("database is locked")

                try:
                    backup.backup(self._db(), progress=waited, sleep=0.02)
                finally:
                    backup.close()
                self._wrote()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return count

    def _page_size(self):
        with self._errors("read the memory database"):
            return self._db().execute("PRAGMA page_size").fetchone()[0]

    def _row(self, db, node_id):
        row = db.execute(f"SELECT {_COLUMNS} FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        return _node(row)

    def _existing(self, db, ids, skipped):
        """The ids that name a memory, in order; the others are added to `skipped`."""
        found = set()
        for chunk in _chunks(ids):
            found.update(r[0] for r in db.execute(
                f"SELECT id FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
        skipped += ({"id": i, "reason": NO_SUCH_MEMORY} for i in ids if i not in found)
        return [i for i in ids if i in found]

    def _relink(self, db, target, *, add=None, remove=None):
        """Add ids (a list) to the links of `target`, or remove one id."""
        row = db.execute("SELECT links FROM nodes WHERE id = ?", (target,)).fetchone()
        if row is None:
            return
        links = json.loads(row[0] or "[]")
        if add is not None:
            present = set(links)
            new = [i for i in dict.fromkeys(add) if i not in present]
            if not new:
                return
            links += new
        elif remove is not None and remove in links:
            links = [i for i in links if i != remove]
        else:
            return
        db.execute("UPDATE nodes SET links = ? WHERE id = ?", (_json(links), target))

    # -- search

    def search(self, query="", tags=(), limit=10, *, offset=0, fit=None):
        """Memories matching the words of `query` and carrying every one of `tags`.

        Ranked by relevance with a query (see rank), newest first with tags alone; the
        `limit` best after skipping `offset`. With `fit`, a function of the list of memories
        found, only the first fit(memories) are returned (a caller's size budget). Every
        memory returned counts as accessed.
        """
        query = _text(query, "query")
        tags = _tags(tags)
        limit = _int(limit, "limit", 1, MAX_LIMIT)
        offset = _int(offset, "offset", 0, MAX_OFFSET)
        words = query_terms(query)
        if not words and not tags:
            if query.strip():
                return []  # nothing searchable in it: punctuation or symbols only
            raise InvalidInput("recall needs a query, tags, or both")
        with self._errors("search the memories"):
            if words:
                rowids = [rowid for _, rowid in self.rank(words, tags, offset + limit)][offset:]
            else:
                rowids = self._tagged(tags, limit, offset)
            return self._touch("rowid", rowids, fit)

    def rank(self, words, tags=(), limit=10):
        """The best `limit` memories for query words, as [(score, rowid)], best first.

        Stage one takes the best by FTS5's bm25 (exactly, see _top); stage two re-scores
        them (see _rerank).
        """
        with self._read() as db:
            query = self._query(db, words)
            first = self._top(db, query, tags, max(limit, RERANK_DEPTH))
            return self._rerank(db, query, tags, first, limit)

    def top(self, words, tags=(), limit=10):
        """Stage one alone: [(bm25 score, rowid)], as FTS5's bm25() would rank them."""
        with self._errors("search the memories"), self._read() as db:
            return self._top(db, self._query(db, words), tags, limit)

    def _query(self, db, words):
        """What a search needs to know of its words, worked out once for both stages."""
        query = _Query()
        query.count, tokens = self._averages(db)
        query.avgdl = tokens / query.count if query.count else 1.0
        terms = [stem(w) for w in words]
        query.word_of = dict(zip(terms, words))
        df = {}
        for chunk in _chunks(terms):
            df.update(db.execute(f"SELECT term, df FROM terms WHERE term IN ({_marks(chunk)})",
                                 chunk))
        query.terms = [t for t in dict.fromkeys(terms) if df.get(t)]
        query.df = df
        query.idf = {t: _idf(df[t], query.count) for t in query.terms}
        # Porter rewrites at most the last few letters of a word, so only words starting
        # like a term can stem to it: the others need no stemming.
        query.prefixes = tuple(t[:max(1, len(t) - 3)] for t in query.terms)
        query.features = {}
        return query

    def _tagged(self, tags, limit, offset=0):
        """The newest memories carrying every tag: the rarest tag drives, the others filter."""
        db = self._db()
        counts = [(db.execute("SELECT count(*) FROM node_tags WHERE tag = ?", (t,)).fetchone()[0], t)
                  for t in tags]
        counts.sort()
        first, others = counts[0][1], [t for _, t in counts[1:]]
        sql = ("SELECT a.node FROM node_tags a WHERE a.tag = ?" +
               "".join(f" AND EXISTS (SELECT 1 FROM node_tags t{i} WHERE t{i}.tag = ? "
                       f"AND t{i}.node = a.node)" for i in range(len(others))) +
               " ORDER BY a.node DESC LIMIT ? OFFSET ?")
        return [r for (r,) in db.execute(sql, (first, *others, limit, offset))]

    def _fts(self, db, words, tags, limit, within=None, margin=0.0):
        """[(score, rowid)] of FTS5's best `limit` for the words OR-ed, within tags.

        With `within`, only memories holding one of those words too count, and they score
        for both. With a margin, results
        scoring within `margin` of the last one come too (up to TIE_EXTRA more), so that
        words left out of the expression can still decide between them.
        """
        expression = fts_query(words)
        if within:
            expression = f"({fts_query(within)}) AND ({expression})"
        joins, carrying = _carrying(tags, "nodes_fts.rowid")
        extra = TIE_EXTRA if margin else 0
        rows = db.execute(f"SELECT -bm25(nodes_fts), nodes_fts.rowid FROM nodes_fts{joins} "
                          f"WHERE nodes_fts MATCH ? ORDER BY bm25(nodes_fts), nodes_fts.rowid "
                          f"LIMIT ?", (*carrying, expression, limit + extra)).fetchall()
        if len(rows) > limit:
            cut = rows[limit - 1][0] - margin
            rows = rows[:limit] + [row for row in rows[limit:] if row[0] >= cut]
        return rows

    def _features(self, db, query, rowids, tags=()):
        """{rowid: (counts of the query's terms, length, tags)} for memories carrying `tags`.

        Kept in `query`, so that neither stage reads a memory twice.
        """
        known, terms = query.features, query.terms
        missing = [r for r in rowids if r not in known]
        for chunk in _chunks(missing):
            for rowid, content, tagged, size in db.execute(
                    f"SELECT n.rowid, n.content, n.tags, d.sz FROM nodes n LEFT JOIN "
                    f"nodes_fts_docsize d ON d.id = n.rowid WHERE n.rowid IN ({_marks(chunk)})",
                    chunk):
                counts = collections.Counter(map(_stems.__getitem__, [
                    w for w in tokenize(content) if w.startswith(query.prefixes)]))
                known[rowid] = ([counts[t] for t in terms], _varint(size)[0] if size else 0,
                                tagged or "[]")
        if not tags:
            return {r: known[r] for r in rowids if r in known}
        wanted = set(tags)
        return {r: known[r] for r in rowids if r in known and wanted <= _tag_set(known[r][2])}

    def _top(self, db, query, tags, n):
        """Stage one: the `n` best memories by FTS5's bm25() of the words OR-ed, exactly.

        One exception to bm25: a word that half the memories or more hold ("faint"; bm25
        weighs it 1e-6) only breaks ties, so when the query has other words, a memory
        holding nothing but faint words is no match.

        Scoring every memory that holds a common word would read much of the index, so the
        memories are taken class by class, by which query terms they hold: those holding a
        rare ("cold") term through FTS5; those holding one common ("hot") term and nothing
        rarer from its impact list; those holding two or more hot terms through FTS5 AND
        queries. A class's search stops as soon as a bound shows the rest of it cannot reach
        the n-th score found so far. Returns [(score, rowid)], best first, ties to the
        older memory.
        """
        terms, word_of, idf, avgdl = query.terms, query.word_of, query.idf, query.avgdl
        if not terms:
            return []
        faint = [t for t in terms if idf[t] == TINY_IDF]
        # What the faint words of a query can add to a memory at most; when the query has
        # other words, a memory scoring no more than that holds faint words alone.
        slack = (K1 + 1) * TINY_IDF * len(faint) if len(faint) < len(terms) else 0.0

        def matches(results):
            return [(s, r) for s, r in results if s > slack * (1 + 1e-9)][:n]

        hot = self._hot(db, terms)
        if not hot:
            self.paths["plain"] += 1
            return matches(self._fts(db, [word_of[t] for t in terms], tags, n))
        cold = [t for t in terms if t not in hot]
        strong = sorted((t for t in hot if idf[t] > TINY_IDF), key=lambda t: -idf[t])
        faint = [t for t in hot if idf[t] == TINY_IDF]
        best, scored = [], {}

        def admit(rowids):
            rowids = [r for r in rowids if r not in scored]
            for rowid, (tfs, dl, _) in self._features(db, query, rowids, tags).items():
                scored[rowid] = sum(idf[t] * _impact(tf, dl, avgdl)
                                    for t, tf in zip(terms, tfs) if tf)
            for rowid in rowids:
                scored.setdefault(rowid, None)
            best[:] = heapq.nsmallest(n, ((-s, r) for r, s in scored.items() if s is not None))

        def theta():
            return -best[-1][0] if len(best) >= n else 0.0

        # The most a hot term adds to any memory: idf times the head of its impact list.
        drift = {t: max(1.0, avgdl / hot[t][1]) for t in hot}  # impacts grow with avgdl
        peak = {t: idf[t] * drift[t] * max(hot[t][3] or 0.0, hot[t][0]) for t in hot}
        if cold:  # memories holding a cold term, first by their cold part alone
            cold_words = [word_of[t] for t in cold]
            depth = max(n, 32)
            rows = self._fts(db, cold_words, tags, depth, margin=slack)
            admit([r for _, r in rows])
            if strong and len(rows) >= depth and \
                    theta() < rows[depth - 1][0] + sum(peak[t] for t in strong) + slack:
                # Those holding a strong hot term too could still rise: FTS5 scores them whole.
                admit([r for _, r in self._fts(db, [word_of[t] for t in strong], tags, n,
                                               within=cold_words, margin=slack)])

        joins, carrying = _carrying(tags, "p.node")

        def postings(t, limit=-1):
            """The impact list of `t`, best first, less memories without the tags."""
            return db.execute(f"SELECT p.node, p.impact FROM hot_postings p{joins} WHERE "
                              f"p.term = ? ORDER BY p.impact DESC LIMIT ?", (*carrying, t, limit))

        tagged = []  # how many memories carry the tags, once asked

        def cheaper_to_scan(matches):
            """With tags: whether scoring every tagged memory costs less than FTS5 scoring
            `matches` memories (it costs some ten times more per memory)."""
            if not tags:
                return False
            if not tagged:
                tagged.append(min(db.execute("SELECT count(*) FROM node_tags WHERE tag = ?",
                                             (tag,)).fetchone()[0] for tag in tags))
            return tagged[0] * TAG_SCAN_COST < matches

        def scan():
            """Score every memory carrying the tags: then nothing is left to settle."""
            self.paths["tag scan"] += 1
            others, carrying = _carrying(tags[1:], "a.node")
            cursor = db.execute(f"SELECT a.node FROM node_tags a{others} WHERE a.tag = ?",
                                (*carrying, tags[0]))
            while rows := cursor.fetchmany(500):
                admit([r for (r,) in rows])
            return matches([(-s, r) for s, r in best])

        def skim(group):
            """Memories heading the impact lists of `group`, each scored in full; True if
            they are `n` at least. Not exhaustive: memories ranked lower in every list but
            holding several of the words may score higher. For words this common (bm25 gives
            each 1e-6) that is not worth scoring most of the index for."""
            for t in group:
                admit([r for r, _ in postings(t, max(n, 50) if not tags else self.hot_list)])
            return len(best) >= n

        def settle(group, margin):
            """The classes of memories holding hot terms of `group` and nothing rarer.
            False if that took scoring every tagged memory (so all is settled)."""
            for t in group:  # holding one of them: its impact list, best first
                floor = hot[t][0]
                cursor = postings(t)
                while rows := cursor.fetchmany(max(n, 16)):
                    admit([r for r, _ in rows])
                    if idf[t] * rows[-1][1] * drift[t] + margin < theta():
                        break
                if idf[t] * floor * drift[t] + margin > theta():
                    # The list cannot settle the class (tags thin it out): FTS5 can, or
                    # when the tagged memories are few, scoring them all.
                    if cheaper_to_scan(query.df[t]):
                        return False
                    self.paths["single-term query"] += 1
                    admit([r for _, r in self._fts(db, [word_of[t]], tags, n, margin=margin)])
            for i, t in enumerate(group):  # holding two or more: FTS5 AND queries
                rest = group[i + 1:]
                if not rest or sum(peak[u] for u in group[i:]) + margin <= theta():
                    break
                if cheaper_to_scan(query.df[t]):
                    return False
                admit([r for _, r in self._fts(db, [word_of[u] for u in rest], tags, n,
                                               within=[word_of[t]], margin=margin)])
            return True

        if not settle(strong, slack):
            return scan()
        if not slack:  # a query of faint words alone: they are all there is to rank by
            if len(faint) > 1 and skim(faint):
                self.paths["faint words"] += 1
                return matches([(-s, r) for s, r in best])
            if not settle(faint, 0.0):
                return scan()
        self.paths["classes"] += 1
        return matches([(-s, r) for s, r in best])

    def _rerank(self, db, query, tags, first, limit):
        """Stage two: re-score stage one's best, then let the LENDERS best lend weight.

        Scores use RERANK_K1/B, which judge a long memory less harshly by its length. Then
        each of the best lends FOLLOWERS of its score to the next memories stored after it
        that carry the same tags and match the query too: in a conversation, the memory
        after a matching question is often its answer. Lent weight lifts a memory up to the
        score of its strongest lender at most: a follower never overtakes the memory it
        follows (it may pass a weaker lender, as the stronger one vouches for it).
        Returns [(score, rowid)], best first.
        """
        if not first:
            return []
        terms, idf, avgdl = query.terms, query.idf, query.avgdl

        def score(rowids):
            features = self._features(db, query, rowids)
            return {r: sum(idf[t] * _impact(tf, dl, avgdl, RERANK_K1, RERANK_B)
                           for t, tf in zip(terms, tfs) if tf)
                    for r, (tfs, dl, _) in features.items()}, features

        scores, features = score([r for _, r in first])
        lenders = heapq.nsmallest(LENDERS, scores, key=lambda r: (-scores[r], r))
        window = sorted({r + k for r in lenders for k in range(1, 2 * len(FOLLOWERS) + 1)})
        stored = dict(db.execute(f"SELECT rowid, tags FROM nodes WHERE rowid IN ({_marks(window)})",
                                 window))
        lent = collections.Counter()
        cap = {}
        for lender in lenders:
            following = [r for r in range(lender + 1, lender + 2 * len(FOLLOWERS) + 1)
                         if r in stored][:len(FOLLOWERS)]
            if len(following) < len(FOLLOWERS):  # a gap: memories forgotten in between
                rows = db.execute("SELECT rowid, tags FROM nodes WHERE rowid > ? ORDER BY rowid "
                                  "LIMIT ?", (lender, len(FOLLOWERS))).fetchall()
                stored.update(rows)
                following = [r for r, _ in rows]
            for share, rowid in zip(FOLLOWERS, following):
                if _tag_set(stored[rowid] or "[]") == _tag_set(features[lender][2]):
                    lent[rowid] += share * scores[lender]
                    cap[rowid] = max(cap.get(rowid, 0.0), scores[lender])
        extra_scores, extra_features = score([r for r in lent if r not in scores])
        features.update(extra_features)
        scores.update(extra_scores)
        # Only a memory that matches the query itself gains: one holding a word that is not
        # faint, unless the query has nothing else.
        weighty = [i for i, t in enumerate(terms) if idf[t] > TINY_IDF] or range(len(terms))
        matched = {r for _, r in first}
        for rowid, extra in lent.items():
            if rowid in features and any(features[rowid][0][i] for i in weighty):
                scores[rowid] = max(scores[rowid], min(scores[rowid] + extra, cap[rowid]))
            elif rowid not in matched:
                scores.pop(rowid, None)
        return heapq.nsmallest(limit, ((s, r) for r, s in scores.items() if s > 0),
                               key=lambda sr: (-sr[0], sr[1]))

    def _touch(self, column, keys, fit=None, extra=None):
        """The memories whose `column` ('rowid' or 'id') is in `keys`, in that order, each
        counted as accessed, with the fields of `extra[key]` added. With `fit`, only the first
        fit(memories) of them are counted and returned.

        Reading and counting share one write transaction. When another process holds the
        write lock past the timeout (a long import, say), the memories are returned all the
        same, only not counted, with a warning.
        """
        if not keys:
            return []
        now = _now()
        try:
            with self._write() as db:
                nodes = self._fitted(db, column, keys, fit, extra)
                for chunk in _chunks([node["id"] for node in nodes]):
                    db.execute(f"UPDATE nodes SET last_accessed = ?, access_count = "
                               f"access_count + 1 WHERE id IN ({_marks(chunk)})", (now, *chunk))
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            log.warning("accesses not counted: the database stayed locked by another process "
                        "for more than %g s", self.timeout)
            with self._read() as db:
                return self._fitted(db, column, keys, fit, extra)
        for node in nodes:
            node["last_accessed"] = now
            node["access_count"] += 1
        return nodes

    def _fitted(self, db, column, keys, fit, extra):
        found = {}
        for chunk in _chunks(keys):
            found.update((row[0], _node(row[1:])) for row in db.execute(
                f"SELECT {column}, {_COLUMNS} FROM nodes WHERE {column} IN ({_marks(chunk)})",
                chunk))
        nodes = []
        for key in keys:
            node = found.get(key)  # a memory forgotten meanwhile is gone
            if node is not None:
                node.update(extra[key] if extra else ())
                nodes.append(node)
        return nodes[:fit(nodes)] if fit and nodes else nodes

    def neighbors(self, node_id, depth=1, *, offset=0, limit=MAX_NODES, fit=None):
        """The memory and those within `depth` links of it, nearest first, each once at its
        shortest distance, with its `distance`.

        Returns {"nodes": [...], "total": n, "exact": bool}: `nodes` are the memories from
        `offset` on, at most `limit` of them (fewer if `fit`, as for search, says so), each
        counted as accessed; `total` is how many memories the neighbourhood holds, counted up
        to TRAVERSAL_CAP (`exact` is False when it holds more).
        """
        node_id = _node_id(node_id)
        depth = _int(depth, "depth", 0, MAX_DEPTH)
        offset = _int(offset, "offset", 0, TRAVERSAL_CAP)
        limit = _int(limit, "limit", 1, MAX_NODES)
        with self._errors("traverse the links"):
            with self._read() as db:
                distances = self._walk(db, node_id, depth)
            order = list(distances)[:TRAVERSAL_CAP]
            page = order[offset:offset + limit]
            nodes = self._touch("id", page, fit, {i: {"distance": distances[i]} for i in page})
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


def _json(value):
    return json.dumps(value, ensure_ascii=False)


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


def _open_private(path):
    """A new, empty file at `path` (emptied if it was there) that only its owner may read;
    its descriptor, open for writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    if os.name == "posix":
        os.fchmod(fd, PRIVATE_FILE)  # it may have been there with another mode
    return fd


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
            db = copy._db()
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
    """Refuse a file that is not an SQLite database or has lost pages, before SQLite sees it."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read the memory database {path}: {exc.strerror}") from exc
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

USAGE = """usage: python3 store.py export [FILE] | import FILE | backup FILE | restore FILE

  export [FILE]  write every memory as one JSON object per line, oldest first, keys in a
                 fixed order (to standard output without FILE)
  import FILE    load memories from such a file (- reads standard input); memories whose
                 id is already stored are skipped, so importing twice changes nothing
  backup FILE    copy the live database to FILE, consistently, while servers keep writing
  restore FILE   replace every memory with those of the backup FILE, checked first; safe
                 while servers run (they see the restored memories at once)

The database is memory.db in $FLOOD_MEMORY_DIR (default ~/flood/memory)."""


def export(store, out):
    """Write every memory to the text stream `out`, one JSON line each; return how many."""
    n = 0
    for n, record in enumerate(store.records(), 1):
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return n


def read_records(lines):
    """Memories from JSON lines (bytes), blank lines skipped; a bad line is InvalidInput."""
    number = 0
    for line_number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        number += 1
        try:
            yield json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInput(f"record {number} (line {line_number}) is not UTF-8 text") from None
        except (ValueError, RecursionError) as exc:
            raise InvalidInput(f"record {number} (line {line_number}) is not JSON: "
                               f"{exc}") from None


def _export_to(store, target):
    """Export to a file, written beside it and renamed into place once complete."""
    if store.owns(target):
        raise InvalidInput(f"{target} is the memory database itself; export to another file")
    partial = f"{target}.{os.getpid()}.part"
    try:
        with open(_open_private(partial), "w", encoding="utf-8", newline="\n") as out:
            n = export(store, out)
        os.replace(partial, target)
        return n
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.remove(partial)


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    command, rest = (args[0], args[1:]) if args else (None, [])
    if command not in ("export", "import", "backup", "restore") or len(rest) > 1 or \
            (command != "export" and len(rest) != 1):
        print(USAGE, file=sys.stderr)
        return 0 if command in ("-h", "--help") else 2
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="flood-memory: %(levelname)s: %(message)s")
    directory = os.environ.get("FLOOD_MEMORY_DIR") or DEFAULT_DIR
    try:
        if command in ("export", "backup") and not os.path.exists(
                os.path.join(os.path.expanduser(directory), DB_NAME)):
            raise StoreError(f"there is no memory database in {directory} to {command}")
        source = None
        if command == "import":  # the file first, so that a wrong name creates nothing
            if rest[0] == "-":
                # Spooled to disk before the load takes the write lock: a pipe may take its
                # time, and servers must not wait for it.
                source = tempfile.TemporaryFile()
                shutil.copyfileobj(sys.stdin.buffer, source)
                source.seek(0)
            else:
                source = open(rest[0], "rb")
        with contextlib.ExitStack() as stack, open_directory(directory) as store:
            if source is not None:
                stack.enter_context(source)
            if command == "export" and not rest:
                out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
                n = export(store, out)
                out.flush()
                print(f"flood-memory: exported {n} memories", file=sys.stderr)
            elif command == "export":
                n = _export_to(store, rest[0])
                print(f"flood-memory: exported {n} memories to {rest[0]}", file=sys.stderr)
            elif command == "backup":
                n = store.backup(rest[0])
                print(f"flood-memory: backed up {n} memories to {rest[0]}", file=sys.stderr)
            elif command == "restore":
                n = store.restore(rest[0])
                print(f"flood-memory: restored {n} memories from {rest[0]}", file=sys.stderr)
            else:
                done = store.load(read_records(source))
                print(f"flood-memory: imported {done['loaded']} memories, skipped "
                      f"{done['skipped']} already stored", file=sys.stderr)
    except BrokenPipeError:
        return 1  # whoever read the export stopped reading
    except OSError as exc:
        print(f"flood-memory: {command}: cannot read {exc.filename}: {exc.strerror}",
              file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"flood-memory: {command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
