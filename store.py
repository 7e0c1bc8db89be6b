"""The memory store: one SQLite file, the `nodes` table, its FTS5 index and the link graph.

`Store` is the whole persistence API. Callers hand it plain Python values and get plain
dicts and lists back; only this module speaks SQL. It owns the schema and its migrations,
the triggers that keep the full-text index in step with the table, bidirectional links
(a link and its back-link are written in one transaction), breadth-first traversal and
access tracking.
"""

import contextlib
import json
import logging
import os
import re
import sqlite3
import threading
import unicodedata
import uuid
from datetime import datetime, timezone

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- schema

SCHEMA = """
-- One row per memory. `rowid` is implicit and is what the full-text index points at.
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
CREATE TRIGGER nodes_au AFTER UPDATE ON nodes BEGIN
    INSERT INTO nodes_fts(nodes_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO nodes_fts(rowid, content) VALUES (new.rowid, new.content);
END;
"""

# Versions of SCHEMA, kept in PRAGMA user_version:
# 1: nodes, nodes_fts and its three triggers, as SPEC.md gives them.
SCHEMA_VERSION = 1

# MIGRATIONS[v] holds the statements that take a version-v database to version v + 1.
MIGRATIONS = {}

# The tables a Flood Memory database may hold; anything else means the file is not ours.
_OWN_TABLES = {"nodes", "nodes_fts", "nodes_fts_data", "nodes_fts_idx", "nodes_fts_docsize",
               "nodes_fts_config", "nodes_fts_content"}

# ----------------------------------------------------------------------------- limits

MAX_LIMIT = 100         # recall results per call
MAX_DEPTH = 100         # hops a traversal may be asked for
MAX_NODES = 1000        # nodes one traversal returns, nearest first
MAX_TAGS = 100          # tags on one memory
MAX_TAG_LENGTH = 200    # characters in one tag
MAX_LINKS = 1000        # ids in one links argument
BUSY_TIMEOUT = 5.0      # seconds a write waits for another writer before giving up

DEFAULT_DIR = "~/flood/memory"
DB_NAME = "memory.db"

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


def _fold(token):
    """Lower-case a token and strip Latin diacritics, as unicode61 (remove_diacritics=1) does."""
    if token.isascii():
        return token.lower()
    decomposed = unicodedata.normalize("NFD", token.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def tokenize(text):
    """The folded tokens of `text`, in order, split the way unicode61 splits them."""
    return [_fold(tok) for tok in _TOKEN.findall(text)]


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


_stems = {}


def stem(token):
    """The term FTS5's porter tokenizer indexes for one folded token."""
    term = _stems.get(token)
    if term is None:
        raw = token.encode("utf-8")
        if 3 <= len(raw) <= 64:
            # The C stemmer works on bytes; latin-1 maps each byte to one character.
            term = _porter(raw.decode("latin-1")).encode("latin-1").decode("utf-8", "replace")
        else:
            term = token
        if len(_stems) < 200_000:
            _stems[token] = term
    return term


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


def _link_ids(values):
    """Canonical ids from a links argument, duplicates dropped; non-ids skipped with a warning."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(f"links must be an array of memory ids, got {type(values).__name__}")
    if len(values) > MAX_LINKS:
        raise InvalidInput(f"links may hold at most {MAX_LINKS} ids, got {len(values)}")
    ids = []
    for value in values:
        try:
            node_id = _node_id(value, "link")
        except InvalidInput as exc:
            log.warning("skipping link: %s", exc)
            continue
        if node_id not in ids:
            ids.append(node_id)
    return ids


def _int(value, name, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {value}")
    return value


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


def _chunks(items, size=500):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _marks(items):
    return ",".join("?" * len(items))


# ----------------------------------------------------------------------------- store


class Store:
    """The memories in one SQLite database file.

    Safe to share between threads: each thread gets its own connection. Several processes
    may open the same file at once; writes wait for each other (up to `timeout` seconds).
    """

    def __init__(self, path, *, timeout=BUSY_TIMEOUT):
        self.path = os.fspath(path)
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open = set()
        _check_file(self.path)
        try:
            self._prepare(self._db())
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
            except sqlite3.OperationalError as exc:
                raise StoreError(f"cannot open the memory database {self.path}: {exc}") from exc
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path} is damaged ({exc}); restore it from a "
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
        """Close every connection this store opened."""
        with self._lock:
            connections, self._open = self._open, set()
        for db in connections:
            db.close()
        self._local = threading.local()

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
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                # WAL so that readers never block the writer; the mode persists in the file.
                db.execute("PRAGMA journal_mode=WAL")
            with self._write():
                self._migrate(db)

    def _migrate(self, db):
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                for statement in _statements(SCHEMA):
                    db.execute(statement)
                version = SCHEMA_VERSION
            elif "nodes" in tables and tables <= _OWN_TABLES:
                version = 1  # made from SPEC.md's schema before versions were recorded
            else:
                raise StoreError(f"{self.path} holds tables that are not Flood Memory's "
                                 f"({', '.join(sorted(tables - _OWN_TABLES))}); refusing to "
                                 f"touch it")
        while version < SCHEMA_VERSION:
            for statement in MIGRATIONS[version]:
                db.execute(statement)
            version += 1
        db.execute(f"PRAGMA user_version = {int(version)}")

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
        """Store a new memory and link it both ways to the existing ids in `links`."""
        content = _text(content, "content", allow_empty=False)
        tags = _tags(tags)
        links = _link_ids(links)
        source = _text(source, "source")
        node_id, now = str(uuid.uuid4()), _now()
        with self._errors("save the memory"), self._write() as db:
            links = self._existing(db, links)
            db.execute("INSERT INTO nodes (id, content, tags, links, source, created_at, "
                       "last_accessed, access_count) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                       (node_id, content, _json(tags), _json(links), source, now, now))
            for target in links:
                self._relink(db, target, add=node_id)
        return {"id": node_id, "content": content, "tags": tags, "links": links,
                "source": source, "created_at": now, "last_accessed": now, "access_count": 0}

    def update(self, node_id, content=None, tags=None, links=None):
        """Replace the given fields of a memory; links keep their back-links in step."""
        node_id = _node_id(node_id)
        if content is None and tags is None and links is None:
            raise InvalidInput("nothing to update: give content, tags or links")
        if content is not None:
            content = _text(content, "content", allow_empty=False)
        if tags is not None:
            tags = _tags(tags)
        if links is not None:
            links = _link_ids(links)
        with self._errors("update the memory"), self._write() as db:
            old = self._row(db, node_id)
            changes = {}
            if content is not None:
                changes["content"] = content
            if tags is not None:
                changes["tags"] = _json(tags)
            if links is not None:
                links = self._existing(db, [i for i in links if i != node_id])
                before = old["links"]
                for target in before:
                    if target not in links:
                        self._relink(db, target, remove=node_id)
                for target in links:
                    if target not in before:
                        self._relink(db, target, add=node_id)
                changes["links"] = _json(links)
            db.execute(f"UPDATE nodes SET {', '.join(f'{k} = ?' for k in changes)} WHERE id = ?",
                       (*changes.values(), node_id))
            return self._row(db, node_id)

    def delete(self, node_id):
        """Delete a memory and every back-link to it."""
        node_id = _node_id(node_id)
        with self._errors("delete the memory"), self._write() as db:
            node = self._row(db, node_id)
            for target in node["links"]:
                self._relink(db, target, remove=node_id)
            db.execute("DELETE FROM nodes WHERE id = ?", (node_id,))
        return {"id": node_id, "deleted": True}

    def _row(self, db, node_id):
        row = db.execute(f"SELECT {_COLUMNS} FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {node_id}")
        return _node(row)

    def _existing(self, db, ids):
        """The ids that name a memory, in order; the others are logged and dropped."""
        found = set()
        for chunk in _chunks(ids):
            found.update(r[0] for r in db.execute(
                f"SELECT id FROM nodes WHERE id IN ({_marks(chunk)})", chunk))
        for missing in (i for i in ids if i not in found):
            log.warning("skipping link to %s: no memory has that id", missing)
        return [i for i in ids if i in found]

    def _relink(self, db, target, *, add=None, remove=None):
        """Add or remove one id in the links of `target`."""
        row = db.execute("SELECT links FROM nodes WHERE id = ?", (target,)).fetchone()
        if row is None:
            return
        links = json.loads(row[0] or "[]")
        if add is not None and add not in links:
            links.append(add)
        elif remove is not None and remove in links:
            links = [i for i in links if i != remove]
        else:
            return
        db.execute("UPDATE nodes SET links = ? WHERE id = ?", (_json(links), target))

    # -- search and traversal

    def search(self, query="", tags=(), limit=10):
        """Memories matching the words of `query` and carrying every one of `tags`.

        Ranked by relevance (BM25) with a query, newest first with tags alone. Every
        memory returned counts as accessed.
        """
        query = _text(query, "query")
        tags = _tags(tags)
        limit = _int(limit, "limit", 1, MAX_LIMIT)
        terms = query_terms(query)
        if not terms and not tags:
            if query.strip():
                return []  # nothing searchable in it: punctuation or symbols only
            raise InvalidInput("recall needs a query, tags, or both")
        with self._errors("search the memories"):
            rowids = self._rank(terms, tags, limit) if terms else self._tagged(tags, limit)
            return self._touch(rowids)

    def _tag_filter(self, tags, alias):
        return "".join(f" AND EXISTS (SELECT 1 FROM json_each({alias}.tags) WHERE value = ?)"
                       for _ in tags)

    def _rank(self, terms, tags, limit):
        sql = ("SELECT nodes_fts.rowid FROM nodes_fts JOIN nodes n ON n.rowid = nodes_fts.rowid "
               "WHERE nodes_fts MATCH ?" + self._tag_filter(tags, "n") +
               " ORDER BY bm25(nodes_fts) LIMIT ?")
        return [r[0] for r in self._db().execute(sql, (fts_query(terms), *tags, limit))]

    def _tagged(self, tags, limit):
        sql = ("SELECT rowid FROM nodes n WHERE 1" + self._tag_filter(tags, "n") +
               " ORDER BY rowid DESC LIMIT ?")
        return [r[0] for r in self._db().execute(sql, (*tags, limit))]

    def _touch(self, rowids):
        """Count the memories at `rowids` as accessed; return them, updated, in that order."""
        if not rowids:
            return []
        now = _now()
        with self._write() as db:
            db.execute(f"UPDATE nodes SET last_accessed = ?, access_count = access_count + 1 "
                       f"WHERE rowid IN ({_marks(rowids)})", (now, *rowids))
            rows = {r[0]: _node(r[1:]) for r in db.execute(
                f"SELECT rowid, {_COLUMNS} FROM nodes WHERE rowid IN ({_marks(rowids)})",
                rowids)}
        return [rows[i] for i in rowids if i in rows]  # a memory forgotten meanwhile is gone

    def neighbors(self, node_id, depth=1, max_nodes=MAX_NODES):
        """The memory and those within `depth` links of it, each with its `distance`.

        Breadth first, so each memory appears once, at its shortest distance; at most
        `max_nodes` memories, nearest first. Every memory returned counts as accessed.
        """
        node_id = _node_id(node_id)
        depth = _int(depth, "depth", 0, MAX_DEPTH)
        max_nodes = _int(max_nodes, "max_nodes", 1, MAX_NODES)
        now = _now()
        with self._errors("traverse the links"), self._write() as db:
            start = self._row(db, node_id)
            start["distance"] = 0
            found, frontier = {node_id: start}, [start]
            for distance in range(1, depth + 1):
                wanted = list(dict.fromkeys(
                    i for node in frontier for i in node["links"] if i not in found))
                wanted = wanted[:max_nodes - len(found)]
                frontier = []
                for chunk in _chunks(wanted):
                    rows = {r[0]: r for r in db.execute(
                        f"SELECT {_COLUMNS} FROM nodes WHERE id IN ({_marks(chunk)})", chunk)}
                    for i in chunk:
                        if i in rows:
                            node = _node(rows[i])
                            node["distance"] = distance
                            found[i] = node
                            frontier.append(node)
                if not frontier:
                    break
            ids = list(found)
            for chunk in _chunks(ids):
                db.execute(f"UPDATE nodes SET last_accessed = ?, access_count = access_count + 1 "
                           f"WHERE id IN ({_marks(chunk)})", (now, *chunk))
        for node in found.values():
            node["last_accessed"] = now
            node["access_count"] += 1
        return list(found.values())


def _json(value):
    return json.dumps(value, ensure_ascii=False)


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


def open_directory(directory):
    """The store in `directory` (`~` expanded), creating the directory if need be."""
    directory = os.path.expanduser(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the data directory {directory}: {exc.strerror}") from exc
    return Store(os.path.join(directory, DB_NAME))


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
