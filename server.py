"""Flood Memory's MCP server over stdio, and the JSON-RPC handling both transports share.

`handle_payload` takes one decoded JSON-RPC message (or batch) and returns the messages to
send back (none for a notification); `serve_stdio` reads one message per line and writes one
per line. The five tools are the `TOOLS` registry: `tools/list` is generated from it and
`tools/call` dispatches through it, so the two cannot drift apart.

Two protocol eras are served side by side. The handshake era (an `initialize` fixes the
revision for the connection) is served as it always was; a 2026-07-28 request carries its
revision and the client's capabilities in `params._meta` and stands alone. The era is kept
in `Session`: an HTTP POST's is decided by `modern_post` in server_remote.py, a stdio
connection's by its first request, once (`Session.admit`); the methods see one `Session`
shape either way and reach the store through the same tool handlers.
"""

import io
import json
import logging
import ntpath
import os
import platform
import posixpath
import signal
import sys

MIN_PYTHON = (3, 11)
# Checked before store.py is imported: on an older Python (a Mac's /usr/bin/python3 is 3.9)
# it fails to load with an error that does not say why ("module 'sqlite3' has no attribute
# 'SQLITE_IOERR'").
if sys.version_info < MIN_PYTHON:
    sys.exit(f"flood-memory: Flood Memory needs Python {'.'.join(map(str, MIN_PYTHON))} or "
             f"newer, and {sys.executable} is Python "
             f"{'.'.join(map(str, sys.version_info[:3]))}; run setup.py with a newer Python "
             f"and use the command it prints")

from store import (MAX_CONTENT, MAX_DEPTH, MAX_LIMIT, MAX_OFFSET, MAX_QUERY_WORDS, StoreError,
                   TRAVERSAL_CAP, data_settings, open_directory, reader_gone)

log = logging.getLogger("flood-memory.server")

SERVER_INFO = {"name": "flood-memory", "version": "0.1.0"}

# Protocol revisions served through the initialize handshake, oldest first. An initialize
# asking for an unknown one gets the newest.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# Revisions served per request, named in each request's _meta: what server/discover lists.
MODERN_VERSIONS = ("2026-07-28",)
BATCH_VERSION = "2025-03-26"        # the only revision with JSON-RPC batches
STRUCTURED_SINCE = "2025-06-18"     # outputSchema, structuredContent and tool titles
ANNOTATED_SINCE = "2025-03-26"      # tool annotations

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000       # a request the server chose not to run (JSON-RPC's server range)
HEADER_MISMATCH = -32020    # 2026-07-28: HTTP headers that disagree with the body
UNSUPPORTED_VERSION = -32022  # 2026-07-28: a revision this server does not serve per request

# The _meta keys of 2026-07-28 requests and results.
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"
# Methods that exist only in 2026-07-28: on stdio they are modern whatever their _meta holds.
MODERN_ONLY = ("server/discover", "subscriptions/listen")
# How long a client may keep the tool list and the discover result (ttlMs). They change only
# when the server is upgraded, which on stdio starts a new process anyway; an hour bounds how
# long an HTTP client keeps an old list after an upgrade, and spares it a fetch per turn.
CACHE_TTL_MS = 3_600_000

MAX_BATCH = 100                 # messages in one JSON-RPC batch
BATCH_REPLY_BUDGET = 4_000_000  # characters of replies one batch may produce

INSTRUCTIONS = (
    "Flood Memory is your long-term memory of this user and their work. Call recall before "
    "answering anything that may depend on earlier conversations, and remember durable facts, "
    "preferences and decisions as short self-contained statements. Recall matches words, not "
    "meanings: put synonyms and related words into one query, and if nothing fits, retry with "
    "other words or list by tags before concluding that nothing is remembered. For a question "
    "about a time ('last week', 'since the release'), give recall since and until; to see what "
    "was stored lately, call recall with no query. Link related memories, and when a fact "
    "changes, update the memory that holds it instead of storing a duplicate; when remember "
    "lists similar memories, check whether one already says it. When a reply leaves "
    "something out, its note says how to get the rest."
)


class ToolError(Exception):
    """A tool call that cannot be carried out; the caller gets the message as an error result."""


class RpcError(Exception):
    """A protocol error, answered with a JSON-RPC error object."""

    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class Session:
    """The era and revision a message follows: in the handshake era, what one client's
    initialize negotiated for its connection; in 2026-07-28, what one request names. `modern`
    is the era; a stdio connection's session starts without one (None) and the first request
    it admits decides it for the rest of the connection (`admit`), as the official SDK does.

    `cache_scope` is what cacheable 2026-07-28 results say about who may keep them: a
    transport behind a bearer token makes it "private", so that a shared cache never hands
    what one token fetched to a caller without it. `outbox` holds the notifications a
    request sends before its reply.
    """

    def __init__(self, protocol_version=None, *, cache_scope="public", modern=None,
                 request_id=None):
        self.protocol_version = protocol_version
        self.cache_scope = cache_scope
        self.modern = modern
        self.keeps_era = modern is None  # stdio's: its first request decides, for good
        self.request_id = request_id
        self.outbox = []

    def admit(self, method, params, request_id):
        """The session that serves a well-formed request: a 2026-07-28 one gets one of its
        own once its _meta is checked. An HTTP POST's era was decided with it (`modern_post`);
        a stdio connection's is decided by the first request it admits (README, Protocol),
        and a request of the other era is refused after it."""
        era = self.modern
        if self.keeps_era:
            modern = modern_request(method, params)
            if era is None:
                era = modern
            elif era and method == "initialize":
                asked = params.get("protocolVersion")
                raise RpcError(UNSUPPORTED_VERSION, "this connection serves 2026-07-28, as its "
                               "first request chose: the handshake needs a connection of its own",
                               {"supported": list(MODERN_VERSIONS),
                                **({"requested": asked[:100]} if isinstance(asked, str) else {})})
            elif modern and not era:
                raise RpcError(INVALID_REQUEST, f"this connection is in the handshake era, as "
                               f"its first request chose: a 2026-07-28 request ({method[:100]}) "
                               f"needs a connection of its own")
        session = Session(request_version(params), cache_scope=self.cache_scope, modern=True,
                          request_id=request_id) if era else self
        self.modern = era  # only now: a request refused chooses nothing
        return session

    def notify(self, method, params):
        self.outbox.append({"jsonrpc": "2.0", "method": method, "params": params})

    @property
    def version(self):
        return self.protocol_version or PROTOCOL_VERSIONS[0]

    def speaks(self, revision):
        """Whether the negotiated revision is `revision` or newer (dates compare as strings)."""
        return self.version >= revision


# ----------------------------------------------------------------------------- tools

_NODE_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The memory's id (a UUID)"},
        "content": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "links": {"type": "array", "items": {"type": "string"},
                  "description": "Ids of linked memories; each link is mirrored on the other side"},
        "source": {"type": "string"},
        "created_at": {"type": "string", "description": "ISO 8601, UTC"},
        "last_accessed": {"type": "string", "description": "ISO 8601, UTC"},
        "access_count": {"type": "integer", "minimum": 0},
        "omitted": {
            "type": "object",
            "description": "Present when the reply shows only part of the memory: how much "
                           "was left out (see the reply's note for how to get it)",
            "properties": {
                "content_chars": {"type": "integer", "minimum": 1,
                                  "description": "Characters of content not shown"},
                "links": {"type": "integer", "minimum": 1, "description": "Links not shown"},
                "tags": {"type": "integer", "minimum": 1, "description": "Tags not shown"},
                "source_chars": {"type": "integer", "minimum": 1,
                                 "description": "Characters of source not shown"},
                "skipped_links": {"type": "integer", "minimum": 1,
                                  "description": "Skipped links not listed"},
            },
        },
    },
    "required": ["id", "content", "tags", "links", "source", "created_at", "last_accessed",
                 "access_count"],
}

_TRAVERSED_SCHEMA = {
    **_NODE_SCHEMA,
    "properties": {**_NODE_SCHEMA["properties"],
                   "distance": {"type": "integer", "minimum": 0,
                                "description": "Links between this memory and the start"}},
    "required": [*_NODE_SCHEMA["required"], "distance"],
}

_NOTE = {"type": "string",
         "description": "Present when something was left out of the reply or skipped: what, "
                        "and the call that gets it"}
_NEXT_OFFSET = {"type": "integer", "minimum": 1,
                "description": "Present when more is left: the offset that gets the next page"}

_WRITTEN_SCHEMA = {
    **_NODE_SCHEMA,
    "properties": {
        **_NODE_SCHEMA["properties"],
        "skipped_links": {
            "type": "array",
            "description": "Present when some of the links given were not made",
            "items": {"type": "object",
                      "properties": {"id": {"type": "string"}, "reason": {"type": "string"}},
                      "required": ["id", "reason"]}},
        "already_remembered": {
            "type": "boolean",
            "description": "Present (true) when the memory was stored before, with the same "
                           "content and tags: this is that memory, and nothing new was stored"},
        "similar": {
            "type": "array",
            "description": "Present when stored memories are very close to the new one: if "
                           "one says the same thing, update or forget instead of keeping both",
            "items": {"type": "object",
                      "properties": {"id": {"type": "string"},
                                     "content": {"type": "string",
                                                 "description": "The first characters"}},
                      "required": ["id", "content"]}},
        "note": _NOTE,
    },
}


# ----------------------------------------------------------------------------- replies
#
# A reply is read by a model whose context is its budget. Each memory in a reply shows at
# most SHOWN_CONTENT characters of its content and SHOWN_LINKS of its links, with an
# "omitted" field counting the rest; a list of memories stops before the reply passes
# REPLY_BUDGET characters. Whatever is left out is said in a "note", with the call that gets
# it, so nothing is cut silently.

REPLY_BUDGET = 40_000   # characters of a tool result's text (~10k tokens)
SHOWN_CONTENT = 2_000   # characters of content a memory shows in a reply...
SHOWN_LINKS = 20        # ...links...
SHOWN_SOURCE = 200      # ...characters of its source...
SHOWN_TAGS = 2_000      # ...and characters of its tags, all counted as JSON writes them
NOTE_ROOM = 2_000       # characters kept free for the wrapper and the note


def _escaped(ch):
    """How many characters JSON writes for `ch` (ensure_ascii off): a quote, a backslash and
    the control characters with a short escape take two, the other controls six."""
    if ch >= " ":
        return 2 if ch in '"\\' else 1
    return 2 if ch in "\n\r\t\b\f" else 6


def _cut(text, budget):
    """The longest start of `text` whose JSON string (quotes aside) takes at most `budget`
    characters: a text of control characters takes six times its length."""
    if len(_dumps(text[:budget])) - 2 <= budget:
        return text[:budget]  # the common case: nothing there to escape
    used = 0
    for i, ch in enumerate(text):
        used += _escaped(ch)
        if used > budget:
            return text[:i]
    return text


def shown(node, content=SHOWN_CONTENT, whole=False):
    """A memory as a reply shows it: content, links, source and tags cut to size, and what
    was cut counted in "omitted". When `whole`, source and tags are whole, and the content
    takes what they leave of `content`."""
    out = dict(node)
    omitted = {}
    if whole:
        content -= len(_dumps(node["tags"])) + len(_dumps(node["source"])) + 40 * SHOWN_LINKS
    out["content"] = _cut(node["content"], content)
    if len(out["content"]) < len(node["content"]):
        omitted["content_chars"] = len(node["content"]) - len(out["content"])
    if len(node["links"]) > SHOWN_LINKS:
        out["links"] = node["links"][:SHOWN_LINKS]
        omitted["links"] = len(node["links"]) - SHOWN_LINKS
    if not whole:
        out["source"] = _cut(node["source"], SHOWN_SOURCE)
        if len(out["source"]) < len(node["source"]):
            omitted["source_chars"] = len(node["source"]) - len(out["source"])
        used, tags = 0, []
        for tag in node["tags"]:
            used += len(_dumps(tag)) + 1
            if used > SHOWN_TAGS:
                omitted["tags"] = len(node["tags"]) - len(tags)
                break
            tags.append(tag)
        out["tags"] = tags
    if omitted:
        out["omitted"] = omitted
    return out


def _most(node, content=SHOWN_CONTENT):
    """The most characters a memory can take in a reply, found without encoding it: most
    replies are far below the budget."""
    return min(6 * len(node["content"]), content) + 6 * len(node["source"]) + \
        sum(6 * len(t) + 3 for t in node["tags"]) + 40 * min(len(node["links"]), SHOWN_LINKS) + 400


class Budget:
    """Decides how many of a list of memories fit in one reply (the store's `fit` hook)."""

    def __init__(self, chars=REPLY_BUDGET, content=SHOWN_CONTENT, whole=False):
        self.chars = chars
        self.content = content
        self.whole = whole  # one memory asked for by id: its source and tags uncut
        self.offered = 0  # memories the store found for the reply, before fitting

    def fit(self, nodes):
        self.offered = len(nodes)
        if sum(_most(node, self.content) for node in nodes) + NOTE_ROOM <= self.chars:
            return len(nodes)  # all fit even at the most their JSON could take: no encoding
        used = NOTE_ROOM
        for n, node in enumerate(nodes):
            used += len(_dumps(shown(node, self.content, self.whole))) + 1
            if n and used > self.chars:
                return n
        return len(nodes)

    def show(self, nodes):
        return [shown(node, self.content, self.whole) for node in nodes]


def _cut_notes(nodes, depth=None):
    """Sentences saying what `shown` cut from these memories, and how to get it. In a walk to
    `depth`, the links cut from a memory nearer than that are walked anyway: no sentence."""
    notes = []
    cut = [n for n in nodes if "content_chars" in n.get("omitted", {})]
    how = "call connections with its node_id and depth 0 for all of it"
    if cut and depth == 0:  # asked for whole already: it cannot come whole
        notes.append(f"Memory {cut[0]['id']} is too long to show whole in one reply: the last "
                     f"{cut[0]['omitted']['content_chars']:,} characters of its content are "
                     f"left out.")
    elif len(cut) == 1:
        notes.append(f"Memory {cut[0]['id']} shows the start of its content "
                     f"({cut[0]['omitted']['content_chars']:,} characters more): {how}.")
    elif cut:
        notes.append(f"{len(cut)} memories show the start of their content (\"omitted\" "
                     f"counts the rest): for one of them, {how}.")
    cut = [n for n in nodes if {"tags", "source_chars"} & n.get("omitted", {}).keys()]
    if cut:
        notes.append(f"{len(cut)} {'memory shows' if len(cut) == 1 else 'memories show'} part "
                     f"of {'its' if len(cut) == 1 else 'their'} tags or source (\"omitted\" "
                     f"counts the rest): for all of it, {how}.")
    cut = [n for n in nodes if "links" in n.get("omitted", {}) and
           (depth is None or n["distance"] >= depth)]
    how = "call connections with its node_id to walk them, a page at a time"
    if len(cut) == 1:
        total = len(cut[0]["links"]) + cut[0]["omitted"]["links"]
        notes.append(f"Memory {cut[0]['id']} shows {SHOWN_LINKS} of its {total:,} links: {how}.")
    elif cut:
        notes.append(f"{len(cut)} memories show {SHOWN_LINKS} of their links (\"omitted\" "
                     f"counts the rest): for one of them, {how}.")
    return notes


def _noted(value, notes):
    if notes:
        value["note"] = " ".join(notes)
    return value


def _skipped_note(node):
    skipped = node.get("skipped_links")
    if not skipped:
        return []
    listed = ", ".join(f"{s['id']} ({s['reason']})" for s in skipped[:5])
    more = f" and {len(skipped) - 5:,} more" if len(skipped) > 5 else ""
    return [f"{len(skipped):,} of the links given {'was' if len(skipped) == 1 else 'were'} "
            f"skipped: {listed}{more}."]


def _single(node, notes=()):
    """A reply holding one memory (remember, update)."""
    notes = list(notes)
    if node.get("already_remembered"):
        notes.append(f"Already remembered: a memory with this content and these tags was "
                     f"stored at {node['created_at']}, so nothing new was stored"
                     f"{' (the links given were added to it)' if node['links'] else ''}.")
    if node.get("similar"):
        notes.append(f"{len(node['similar'])} stored memor"
                     f"{'y is' if len(node['similar']) == 1 else 'ies are'} very close to this "
                     f"one (listed in similar): if one says the same thing, update it or forget "
                     f"one of them rather than keep both.")
    out = shown(node)
    skipped = out.get("skipped_links")
    if skipped and len(skipped) > SHOWN_LINKS:
        out["skipped_links"] = skipped[:SHOWN_LINKS]
        out.setdefault("omitted", {})["skipped_links"] = len(skipped) - SHOWN_LINKS
    return _noted(out, [*notes, *_skipped_note(node), *_cut_notes([out])])


def _remember(store, args):
    return _single(store.add(args["content"], args["tags"], args["links"], args["source"]))


def _recall(store, args):
    budget, searched = Budget(), {}
    found = store.search(args["query"], args["tags"], args["limit"], offset=args["offset"],
                         since=args.get("since"), until=args.get("until"), fit=budget.fit,
                         report=searched)
    results = budget.show(found)
    notes = _cut_notes(results)
    if searched.get("cut"):
        notes.insert(0, f"Only the first {MAX_QUERY_WORDS} words of the query were searched "
                        f"for; the rest were ignored.")
    value = {"results": results}
    if budget.offered > len(found):
        value["next_offset"] = args["offset"] + len(found)
        left = budget.offered - len(found)
        notes.insert(0, f"{left:,} more result{'s' if left > 1 else ''} did not fit in this "
                        f"reply: call recall again with the same arguments and "
                        f"offset={value['next_offset']}.")
    if not found:
        notes += _nothing_found(store, args, searched["words"])
    return _noted(value, notes)


def _quoted(texts, most=6, width=30):
    """Texts a note echoes, quoted and cut: it stays short whatever was asked."""
    shown = ", ".join(repr(t if len(t) <= width else t[:width - 3] + "...") for t in texts[:most])
    return shown + (f" and {len(texts) - most:,} more" if len(texts) > most else "")


def _nothing_found(store, args, words):
    """What a recall that found nothing says: what was searched for, what there is, and what
    to try (a model reading an empty list would conclude that nothing is remembered)."""
    if args["offset"]:
        return [f"There are no more results: none past the first {args['offset']:,}."]
    window = args.get("since") is not None or args.get("until") is not None
    there = store.nothing_found(args["tags"], args.get("since"), args.get("until"), words)
    notes = []
    if there.get("matching"):  # the words match: the tags or the window left none
        n = there["matching"]
        left_by = " and ".join(["the tags"] * bool(args["tags"]) + ["the time window"] * window)
        notes.append(f"{f'more than {MAX_LIMIT}' if n > MAX_LIMIT else f'{n:,}'} "
                     f"memor{'y matches' if n == 1 else 'ies match'} the words {_quoted(words)}, "
                     f"but {left_by} left {'it' if n == 1 else 'all of them'} out.")
    elif words:
        notes.append(f"No memory{' created in that time window' if window else ''} matched "
                     f"the words {_quoted(words)} (common words left out). Recall matches "
                     f"words and their forms, not meanings: try other words for the same "
                     f"thing, several in one query.")
    elif args["query"].strip():
        notes.append("The query holds no word to search for.")
    for held in there.get("word_tags", [])[:3]:  # a filter or window left those out
        n = held["memories"]
        notes.append(f"{_quoted([held['word']])} is a tag of {n:,} memor{'y' if n == 1 else 'ies'}"
                     f": recall with tags " + " or ".join(f"[{_quoted([t])}]" for t in
                                                          held["tags"][:3]) + ".")
    for tag in there["tags"][:3]:
        if not tag["memories"]:
            closest = f"; the closest tags are {_quoted(tag['closest'])}" if tag["closest"] else ""
            notes.append(f"No memory carries the tag {_quoted([tag['tag']])}{closest}.")
        else:
            notes.append(f"The tag {_quoted([tag['tag']])} holds {tag['memories']:,} "
                         f"memor{'y' if tag['memories'] == 1 else 'ies'}, none of them "
                         f"matching the rest of this recall.")
    if window and not there["in_window"]:
        notes.append("No memory was created in that time window.")
    elif window:
        notes.append(f"{there['in_window']:,} memor{'y was' if there['in_window'] == 1 else 'ies were'} "
                     f"created in that time window, none matching the rest of this recall.")
    if "most_used" in there and there["most_used"]:
        used = ", ".join(f"{_quoted([t])} ({n:,})" for t, n in there["most_used"])
        notes.append(f"The most used tags are {used}: recall with tags lists their memories.")
    if not (words or args["query"].strip() or args["tags"] or window):
        return ["No memory is stored yet."]
    return notes + ["Recall with no arguments lists the newest memories."]


def _connections(store, args):
    whole = args["depth"] == 0  # one memory asked for by id: all of its content
    budget = Budget(MAX_CONTENT + REPLY_BUDGET, MAX_CONTENT + REPLY_BUDGET - NOTE_ROOM, True) \
        if whole else Budget()
    walked = store.neighbors(args["node_id"], args["depth"], offset=args["offset"],
                             fit=budget.fit)
    nodes = budget.show(walked["nodes"])
    value = {"nodes": nodes, "total": walked["total"]}
    notes = _cut_notes(nodes, args["depth"])
    end = args["offset"] + len(nodes)
    total = f"{walked['total']:,}" if walked["exact"] else f"more than {TRAVERSAL_CAP:,}"
    if nodes and end < walked["total"]:
        value["next_offset"] = end
        notes.insert(0, f"This reply holds memories {args['offset'] + 1:,}-{end:,} of the "
                        f"{total} within depth {args['depth']}, nearest first: call "
                        f"connections again with offset={end} for the next ones.")
    elif not walked["exact"] and end >= walked["total"]:
        notes.insert(0, f"The walk stops after the nearest {TRAVERSAL_CAP:,} memories: for "
                        f"the ones further out, start from one of the last ones found.")
    return _noted(value, notes)


def _forget(store, args):
    return store.delete(args["node_id"])


def _update(store, args):
    return _single(store.update(args["node_id"], args.get("content"), args.get("tags"),
                                args.get("links")))


TOOLS = {
    "remember": {
        "title": "Remember",
        "description": (
            "Store a durable fact, preference, decision or event so that later conversations "
            "can recall it. Write the content as one self-contained statement (who, what, "
            "when). Tags are short labels such as a person or project that recall can filter "
            "by. Links are ids of related memories; every link is made in both directions, "
            "and any that cannot be made are listed in skipped_links. Returns the new memory "
            "with its id. Storing the same content and tags again returns the memory already "
            "stored (already_remembered), so a retried call is safe; memories very close to "
            "the new one are listed in similar: if one says the same thing, update or forget "
            "instead of keeping both."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT,
                            "description": "The memory to store"},
                "tags": {"type": "array", "items": {"type": "string"}, "default": [],
                         "description": "Labels to file it under, kept as spelled (recall "
                                        "matches them whatever their case)"},
                "links": {"type": "array", "items": {"type": "string"}, "default": [],
                          "description": "Node IDs to link to"},
                "source": {"type": "string", "default": "",
                           "description": "Conversation label or context"},
            },
            "required": ["content"],
            "additionalProperties": False,
        },
        "outputSchema": _WRITTEN_SCHEMA,
        "annotations": {"readOnlyHint": False, "destructiveHint": False,
                        "idempotentHint": False, "openWorldHint": False},
        "handler": _remember,
        "unwrap": None,
    },
    "recall": {
        "title": "Recall",
        "description": (
            "Search memory by words, tags, time, or any mix. Use it before answering anything "
            "that may depend on earlier conversations: the user's preferences, people, "
            "projects, past decisions. Recall matches words and their forms ('painting' finds "
            "'paint'), not meanings: put synonyms and related words into one query ('holiday "
            "vacation trip travel'); the words are OR-ed, so memories matching more of them, "
            "and rarer ones, rank first. If nothing fits, retry with other words or list by "
            "tags before concluding that nothing is remembered. Tags filter: a memory must "
            "carry every tag given, whatever its case ('Maria' finds 'maria'). When nothing "
            "is found, the note says which words were searched for, which tags hold no "
            "memory (and the closest tags there are), and the most used tags: use them to "
            "try again. since and until keep memories created in that window, "
            "for questions like 'what did we decide last week?'. Without a query, the newest "
            "memories come first: call it with no arguments to see what was stored lately "
            "('what do you remember about me?'). Each memory returned counts as accessed."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "default": "",
                          "description": "Words to search for: the question's own words, "
                                         "plus synonyms and related words"},
                "tags": {"type": "array", "items": {"type": "string"}, "default": [],
                         "description": "Filter by tags: only memories carrying all of them "
                                        "(whatever their case)"},
                "limit": {"type": "integer", "default": 10, "minimum": 1, "maximum": MAX_LIMIT,
                          "description": "Most memories to return"},
                "offset": {"type": "integer", "default": 0, "minimum": 0,
                           "maximum": MAX_OFFSET,
                           "description": "Results to skip: the next_offset of a reply "
                                          "that did not hold them all"},
                "since": {"type": "string",
                          "description": "Only memories created at or after this time: an "
                                         "ISO 8601 date or date-time (2026-11-16, "
                                         "2026-11-16T09:00, 2026-11-16T09:00+01:00); UTC "
                                         "unless it gives an offset"},
                "until": {"type": "string",
                          "description": "Only memories created before this time (same "
                                         "forms as since)"},
            },
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"results": {"type": "array", "items": _NODE_SCHEMA,
                                       "description": "Best match first; newest first "
                                                      "without a query"},
                           "next_offset": _NEXT_OFFSET, "note": _NOTE},
            "required": ["results"],
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "handler": _recall,
        "unwrap": "results",
    },
    "connections": {
        "title": "Connections",
        "description": (
            "Follow links from a memory: returns the memory itself (distance 0) and the "
            "memories within `depth` links of it, each once, at its shortest distance, "
            "nearest first. Use it to gather the context around a memory that recall found. "
            "A large neighbourhood comes a page at a time (the reply says how to get the "
            "next); depth 0 returns the one memory with all of its content."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "node_id": {"type": "string", "description": "Starting node ID"},
                "depth": {"type": "integer", "default": 1, "minimum": 0, "maximum": MAX_DEPTH,
                          "description": "How many hops to traverse"},
                "offset": {"type": "integer", "default": 0, "minimum": 0,
                           "maximum": TRAVERSAL_CAP,
                           "description": "Memories to skip: the next_offset of a reply "
                                          "that did not hold them all"},
            },
            "required": ["node_id"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"nodes": {"type": "array", "items": _TRAVERSED_SCHEMA},
                           "total": {"type": "integer", "minimum": 1,
                                     "description": "Memories within depth, this one included"},
                           "next_offset": _NEXT_OFFSET, "note": _NOTE},
            "required": ["nodes", "total"],
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "handler": _connections,
        "unwrap": "nodes",
    },
    "forget": {
        "title": "Forget",
        "description": (
            "Delete a memory for good and remove every link to it. Use it when the user asks "
            "you to forget something, or a memory is wrong and not worth correcting."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "node_id": {"type": "string", "description": "ID of the node to delete"},
            },
            "required": ["node_id"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "deleted": {"type": "boolean"}},
            "required": ["id", "deleted"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True,
                        "idempotentHint": True, "openWorldHint": False},
        "handler": _forget,
        "unwrap": None,
    },
    "update": {
        "title": "Update",
        "description": (
            "Change a memory in place: only the fields given are replaced. When a fact changes, "
            "update the memory that holds it rather than storing a duplicate. Giving links "
            "replaces the memory's links, and the other memories' back-links follow."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "node_id": {"type": "string", "description": "ID of the node to update"},
                "content": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT,
                            "description": "New content (replaces existing)"},
                "tags": {"type": "array", "items": {"type": "string"},
                         "description": "New tags (replaces existing)"},
                "links": {"type": "array", "items": {"type": "string"},
                          "description": "New links (replaces existing, bidirectional sync applied)"},
            },
            "required": ["node_id"],
            "additionalProperties": False,
        },
        "outputSchema": _WRITTEN_SCHEMA,
        "annotations": {"readOnlyHint": False, "destructiveHint": True,
                        "idempotentHint": True, "openWorldHint": False},
        "handler": _update,
        "unwrap": None,
    },
}

def check_arguments(name, schema, args):
    """The arguments with defaults filled in, or ToolError for an argument the tool does not
    take or a required one left out. A null counts as left out, and a whole number written as
    2.0 where the schema wants an integer becomes one (JSON does not tell them apart). The
    values themselves are the store's to check: it owns every rule on them, with the message
    that says what to fix."""
    props = schema["properties"]
    unknown = sorted(k for k in args if k not in props)
    if unknown:
        named = ", ".join(repr(k[:40]) for k in unknown[:5])
        more = f" and {len(unknown) - 5:,} more" if len(unknown) > 5 else ""
        raise ToolError(f"{name} has no argument {named}{more}; it takes {', '.join(props)}")
    out = {}
    for key, prop in props.items():
        value = args.get(key)
        if value is None:
            if key in schema.get("required", ()):
                raise ToolError(f"{name} needs the argument '{key}'")
            if "default" in prop:
                out[key] = json.loads(json.dumps(prop["default"]))
            continue
        if prop["type"] == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        out[key] = value
    return out


def call_tool(name, args, store, session):
    """The result of one tools/call: content, and structuredContent for newer clients."""
    tool = TOOLS[name]
    try:
        value = tool["handler"](store, check_arguments(name, tool["inputSchema"], args))
    except (ToolError, StoreError) as exc:
        return {"content": [{"type": "text", "text": str(exc)}], "isError": True}
    if session.speaks(STRUCTURED_SINCE):
        return {"content": [{"type": "text", "text": _dumps(value)}],
                "structuredContent": value, "isError": False}
    if not tool["unwrap"]:
        return {"content": [{"type": "text", "text": _dumps(value)}], "isError": False}
    # Revisions before structured output get the bare list, as they always have; what was
    # left out of it is said in a second text block.
    content = [{"type": "text", "text": _dumps(value[tool["unwrap"]])}]
    if "note" in value:
        content.append({"type": "text", "text": value["note"]})
    return {"content": content, "isError": False}


def tool_list(session):
    """The tool definitions, shaped for the negotiated revision."""
    tools = []
    for name, tool in TOOLS.items():
        entry = {"name": name, "description": tool["description"],
                 "inputSchema": tool["inputSchema"]}
        if session.speaks(STRUCTURED_SINCE):
            entry["title"] = tool["title"]
            entry["outputSchema"] = tool["outputSchema"]
        if session.speaks(ANNOTATED_SINCE):
            entry["annotations"] = {"title": tool["title"], **tool["annotations"]}
        tools.append(entry)
    return tools


# ----------------------------------------------------------------------------- methods


def _initialize(params, store, session):
    requested = params.get("protocolVersion")
    if requested in PROTOCOL_VERSIONS:
        session.protocol_version = requested
    else:
        session.protocol_version = PROTOCOL_VERSIONS[-1]
    return {"protocolVersion": session.protocol_version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": dict(SERVER_INFO),
            "instructions": INSTRUCTIONS}


def _ping(params, store, session):
    return {}


def _tools_list(params, store, session):
    if params.get("cursor") is not None:
        raise RpcError(INVALID_PARAMS, "invalid cursor: this server lists every tool on one page")
    result = {"tools": tool_list(session)}
    if session.modern:
        result["ttlMs"] = CACHE_TTL_MS
        result["cacheScope"] = session.cache_scope
    return result


def _tools_call(params, store, session):
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "tools/call needs the name of a tool")
    if name not in TOOLS:
        raise RpcError(INVALID_PARAMS, f"unknown tool {name[:100]!r}; the tools are "
                                       f"{', '.join(TOOLS)}")
    args = params.get("arguments")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise RpcError(INVALID_PARAMS, "tools/call arguments must be an object")
    return call_tool(name, args, store, session)


def _discover(params, store, session):
    return {"supportedVersions": list(MODERN_VERSIONS),
            "capabilities": {"tools": {"listChanged": False}},
            "instructions": INSTRUCTIONS,
            "ttlMs": CACHE_TTL_MS,
            "cacheScope": session.cache_scope}


def _listen(params, store, session):
    """Acknowledge the subscription, honouring no notification type (the tool list never
    changes), and end it at once with its result (the specification's Graceful Closure):
    kept open, it would hold an HTTP connection and its thread for nothing."""
    if not isinstance(params.get("notifications", {}), dict):
        raise RpcError(INVALID_PARAMS, 'subscriptions/listen takes notifications, an object '
                                       'such as {"toolsListChanged": true}')
    tag = {SUBSCRIPTION_KEY: session.request_id}
    session.notify("notifications/subscriptions/acknowledged",
                   {"_meta": dict(tag), "notifications": {}})
    return {"_meta": tag}


# The handshake era's methods, and 2026-07-28's: the tools are the same two handlers in both.
METHODS = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _tools_list,
    "tools/call": _tools_call,
}
MODERN_METHODS = {
    "server/discover": _discover,
    "subscriptions/listen": _listen,
    "tools/list": _tools_list,
    "tools/call": _tools_call,
}


# ----------------------------------------------------------------------------- messages


def rpc_error(request_id, code, message, data=None, *, modern=False):
    """A JSON-RPC error reply. In 2026-07-28, one whose request id could not be read carries
    no id at all; the handshake era's say null, as they always have."""
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    if modern and request_id is None:
        return {"jsonrpc": "2.0", "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def echoed(text, width=40):
    """A value an error message repeats back, quoted and cut short."""
    return repr(text if len(text) <= width else text[:width - 3] + "...")


def _valid_id(value):
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def carries_version(params):
    """Whether a message's params (any value) hold a _meta naming a protocol revision: the
    mark of a 2026-07-28 request (a handshake-era _meta holds a progressToken at most)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_KEY in meta


def modern_request(method, params):
    """Whether a request is 2026-07-28's by its look: its _meta names a revision, or its
    method exists only there. An initialize never is: it opens the handshake era."""
    return method != "initialize" and (method in MODERN_ONLY or carries_version(params))


def unsupported_version(version, named_by="protocol version"):
    """The error for a revision this server does not serve per request, `named_by` a _meta
    entry or (over HTTP) a header."""
    return RpcError(UNSUPPORTED_VERSION,
                    f"unsupported {named_by} {echoed(version)}: this server serves "
                    f"{', '.join(MODERN_VERSIONS)} per request, and "
                    f"{', '.join(PROTOCOL_VERSIONS)} through initialize",
                    {"supported": list(MODERN_VERSIONS), "requested": version[:100]})


def request_version(params):
    """The revision a 2026-07-28 request names, once its _meta holds what every such request
    must: a protocol version and the client's capabilities (clientInfo is optional, and
    never read). RpcError when it is missing, malformed or not served here."""
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, f"a 2026-07-28 request needs params._meta, an object "
                                       f"holding {VERSION_KEY} and {CAPABILITIES_KEY}")
    missing = [key for key in (VERSION_KEY, CAPABILITIES_KEY) if key not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, f"params._meta lacks {' and '.join(missing)}, which "
                                       f"every 2026-07-28 request carries")
    version = meta[VERSION_KEY]
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, f"{VERSION_KEY} must be a string such as "
                                       f"{MODERN_VERSIONS[-1]!r}")
    if not isinstance(meta[CAPABILITIES_KEY], dict):
        raise RpcError(INVALID_PARAMS, f"{CAPABILITIES_KEY} must be an object ({{}} for a "
                                       f"client that declares none)")
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    return version


def handle_message(message, store, session, *, in_batch=False):
    """The messages that answer one JSON-RPC message: none for a notification or a response,
    else the reply, after any notification the request sends first. The session decides the
    era (`Session.admit`): a 2026-07-28 request is checked against its own _meta and served
    in a session of its own, its result marked as such."""
    if not isinstance(message, dict):
        return [rpc_error(None, INVALID_REQUEST, "a JSON-RPC message must be an object",
                          modern=session.modern)]
    request_id = message.get("id")
    has_id = "id" in message
    if "method" not in message:
        if has_id and ("result" in message or "error" in message):
            return []  # a client's answer to a request this server never sends
        return [rpc_error(request_id if _valid_id(request_id) else None, INVALID_REQUEST,
                          "not a JSON-RPC request: it has no method", modern=session.modern)]
    method, params = message["method"], message.get("params")
    if not has_id:
        return []  # a notification: initialized, cancelled, progress... none needs a reply
    if not _valid_id(request_id):
        return [rpc_error(None, INVALID_REQUEST, "the request id must be a string or an integer",
                          modern=session.modern)]
    if message.get("jsonrpc") != "2.0":
        return [rpc_error(request_id, INVALID_REQUEST, 'the request must say "jsonrpc": "2.0"')]
    if not isinstance(method, str):
        return [rpc_error(request_id, INVALID_REQUEST, "the method must be a string")]
    params = {} if params is None else params
    try:
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object")
        session = session.admit(method, params, request_id)
        handler = (MODERN_METHODS if session.modern else METHODS).get(method)
        if handler is None:
            gone = f" is not part of protocol revision {session.version}" \
                if method in METHODS else ""
            raise RpcError(METHOD_NOT_FOUND, f"method not found: {method[:100]}{gone}")
        if in_batch and method == "initialize":
            raise RpcError(INVALID_REQUEST, "initialize cannot be part of a batch")
        result = handler(params, store, session)
    except RpcError as exc:
        return [rpc_error(request_id, exc.code, exc.message, exc.data)]
    except Exception:
        log.exception("internal error in %s", method)
        return [rpc_error(request_id, INTERNAL_ERROR,
                          "internal error; the server log has details")]
    if session.modern:
        result["resultType"] = "complete"
        result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_KEY: dict(SERVER_INFO)}
    sent, session.outbox = session.outbox, []
    return [*sent, {"jsonrpc": "2.0", "id": request_id, "result": result}]


def handle_payload(payload, store, session):
    """The messages that answer one decoded message or batch (a batch's replies are one
    message, a list). A batch is never modern: 2026-07-28 has none."""
    if not isinstance(payload, list):
        return handle_message(payload, store, session)
    if session.protocol_version != BATCH_VERSION:
        revision = MODERN_VERSIONS[0] if session.modern else session.version
        return [rpc_error(None, INVALID_REQUEST, f"JSON-RPC batches are not part of protocol "
                                              f"revision {revision}", modern=session.modern)]
    if not payload:
        return [rpc_error(None, INVALID_REQUEST, "an empty batch")]
    if len(payload) > MAX_BATCH:
        return [rpc_error(None, INVALID_REQUEST, f"a batch may hold at most {MAX_BATCH} messages, "
                                                 f"got {len(payload):,}")]
    replies, size = [], 0
    for message in payload:
        if size > BATCH_REPLY_BUDGET and isinstance(message, dict) and "method" in message \
                and "id" in message:
            # What a batch may cost is bounded: 1,000 recalls once made a 242 MB reply.
            replies.append(rpc_error(message["id"] if _valid_id(message["id"]) else None,
                                     SERVER_ERROR, f"not run: this batch's replies passed "
                                                   f"{BATCH_REPLY_BUDGET:,} characters; send "
                                                   f"the rest in another batch"))
            continue
        for reply in handle_message(message, store, session, in_batch=True):
            size += len(_dumps(reply))
            replies.append(reply)
    return [replies] if replies else []


def decode(data, modern=False):
    """A JSON-RPC payload from bytes or text, or the -32700 reply when it does not parse (in
    2026-07-28, if `modern`, as rpc_error words it)."""
    try:
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        # A byte order mark, as some Windows tools write before the first message.
        return json.loads(data.removeprefix("\ufeff")), None
    except UnicodeDecodeError:
        return None, rpc_error(None, PARSE_ERROR, "parse error: the message is not UTF-8",
                               modern=modern)
    except RecursionError:
        return None, rpc_error(None, PARSE_ERROR, "parse error: the JSON is nested too deeply",
                               modern=modern)
    except ValueError as exc:
        return None, rpc_error(None, PARSE_ERROR, f"parse error: {exc}",
                               modern=modern)


def _dumps(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def encode(reply):
    """One reply as UTF-8 JSON (escaped ASCII if it holds text UTF-8 cannot carry)."""
    try:
        return _dumps(reply).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(reply, separators=(",", ":")).encode("ascii")


# ----------------------------------------------------------------------------- stdio


def serve_stdio(store, stdin=None, stdout=None):
    """Answer newline-delimited JSON-RPC on stdin until it closes."""
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    text_out = isinstance(stdout, io.TextIOBase)
    session = Session()
    for line in stdin:
        if not line.strip():
            continue
        payload, reply = decode(line, session.modern)
        messages = [reply] if reply is not None else handle_payload(payload, store, session)
        if not messages:
            continue
        for message in messages:
            data = encode(message)
            stdout.write(data.decode("utf-8") + "\n" if text_out else data + b"\n")
        stdout.flush()


def _terminate(signum, frame):
    raise SystemExit(0)


def stop_signals(signals=signal):
    """The signals that ask a server to stop: SIGTERM, and Ctrl+Break (SIGBREAK), which is
    what Windows can send instead."""
    return [getattr(signals, name) for name in ("SIGTERM", "SIGBREAK") if hasattr(signals, name)]


# ----------------------------------------------------------------------------- data directory


# Folders a sync service copies elsewhere, by a part of their path in lower case, the most
# specific first: a macOS CloudStorage folder holds one per service.
_SYNCED = (("onedrive", "OneDrive"), ("dropbox", "Dropbox"), ("googledrive", "Google Drive"),
           ("google drive", "Google Drive"), ("iclouddrive", "iCloud Drive"),
           ("icloud drive", "iCloud Drive"), ("mobile documents", "iCloud Drive"),
           ("cloudstorage", "a cloud storage service"))


def _on_network_share(directory):
    r"""Whether a Windows path is on a network share (\\server\share, \\?\UNC\...). A
    mapped drive letter cannot be told from a local one by its name."""
    drive = ntpath.splitdrive(directory)[0].replace("/", "\\").upper()
    return drive.startswith("\\\\?\\UNC\\") or (
        drive.startswith("\\\\") and not drive.startswith(("\\\\?\\", "\\\\.\\")))


def risky_location(directory, system=None):
    """Why `directory` is a poor place for the database, or None. SQLite's write-ahead log
    needs a local disk (memory shared between the processes that use it, and locks), which a
    network share does not give; a sync service copies memory.db apart from its -wal, whose
    pages it needs, and may put a conflicting copy in its place. `system` is what
    platform.system() says."""
    system = system or platform.system()
    paths = ntpath if system == "Windows" else posixpath
    if system == "Windows" and _on_network_share(directory):
        return (f"the data directory {directory} is on a network share: SQLite's write-ahead "
                f"log needs a local disk, or memories can be lost and the database damaged. "
                f"Set FLOOD_MEMORY_DIR to a folder on this computer's own disk")
    parts = [p.lower() for p in paths.normpath(directory).replace("\\", "/").split("/")]
    for prefix, service in _SYNCED:
        if any(p == prefix or p.startswith((prefix + " ", prefix + "-")) for p in parts):
            return (f"the data directory {directory} is in a folder that {service} "
                    f"synchronizes: it copies memory.db without the memory.db-wal that holds "
                    f"its latest changes, and may replace it with a conflicting copy. Set "
                    f"FLOOD_MEMORY_DIR to a folder outside it, and keep copies with store.py "
                    f"backup instead")
    return None


# ----------------------------------------------------------------------------- main


def open_data_directory(environ):
    """The store in the data directory `environ` names (see data_settings), and a warning
    about its location logged; None after saying in one line why it cannot be opened."""
    try:
        directory, litestream = data_settings(environ)
        store = open_directory(directory, litestream)
    except StoreError as exc:
        print(f"flood-memory: {exc}", file=sys.stderr)
        return None
    risk = risky_location(directory)
    if risk:
        log.warning("%s", risk)
    return store


def main(argv=None):
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="flood-memory: %(levelname)s: %(message)s")
    store = open_data_directory(os.environ)
    if store is None:
        return 1
    for signum in stop_signals():
        signal.signal(signum, _terminate)
    try:
        serve_stdio(store)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        if not reader_gone(exc):
            raise
        # The client stopped reading: the session is over. Point stdout at the null device
        # so that Python's own flush at exit does not complain about the pipe once more.
        log.info("the client closed its end of stdout; stopping")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
