"""Flood Memory's MCP server over HTTP: POST /mcp, answered as JSON or as one SSE event.

A thin `BaseHTTPRequestHandler` on a `ThreadingHTTPServer`. It checks what HTTP must check
(path, origin, bearer token, body size, protocol-version header) and hands the body to the
same `handle_payload` as the stdio server. Stateless: no sessions, each POST stands alone.
Each request runs in its own thread with its own SQLite connection.

A POST is served in 2026-07-28 when its MCP-Protocol-Version header names that revision or
its body's _meta does (`modern_post` decides, once); its Mcp-Method and Mcp-Name headers must
then agree with its body, and its errors carry HTTP statuses of their own (`MODERN_STATUS`).
Any other POST is served in the handshake era, as it always was.
"""

import base64
import binascii
import collections
import contextlib
import errno
import hmac
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from server import (HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
                    METHOD_NOT_FOUND, MODERN_VERSIONS, PARSE_ERROR, PROTOCOL_VERSIONS,
                    SERVER_INFO, UNSUPPORTED_VERSION, VERSION_KEY, Session, carries_version,
                    decode, echoed, encode, handle_payload, open_data_directory, rpc_error,
                    stop_signals, unsupported_version)

log = logging.getLogger("flood-memory.http")

MCP_PATH = "/mcp"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY = 10 * 1024 * 1024
REQUEST_TIMEOUT = 30.0      # seconds a client may take to send one request, headers and body
HEADER_TIMEOUT = 5.0        # ...of which its request line and headers this many
MAX_HEADER_BYTES = 32_768   # the request line and headers together
MAX_CONNECTIONS = 256       # open at once, fewer if the descriptor limit asks (see main)
LINGER = 1.0                # seconds a connection refused unread stays open to its client...
LINGER_MAX = 16             # ...for at most this many such connections (see linger)
SHUTDOWN_GRACE = 10.0       # seconds in-flight requests get to finish on SIGTERM
# Seconds between serve_forever's looks at its lingering connections. A stop ends its wait
# at once (see main), except on Windows, where a signal's handler runs only when it ends.
POLL_INTERVAL = 0.5
# Revision assumed for a request without an MCP-Protocol-Version header (transport spec).
HEADERLESS_VERSION = "2025-03-26"

CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, GET, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Authorization, Mcp-Session-Id, "
                                    "Mcp-Protocol-Version, Mcp-Method, Mcp-Name",
}
ALLOW = "POST, OPTIONS"

TRANSPORT_ERROR = -32000    # JSON-RPC code for a request refused by the HTTP layer
# The HTTP status of a 2026-07-28 error reply, by its JSON-RPC code (a result is 200). The
# handshake era answers every JSON-RPC error with 200, as it always has.
MODERN_STATUS = {PARSE_ERROR: HTTPStatus.BAD_REQUEST, INVALID_REQUEST: HTTPStatus.BAD_REQUEST,
                 INVALID_PARAMS: HTTPStatus.BAD_REQUEST, HEADER_MISMATCH: HTTPStatus.BAD_REQUEST,
                 UNSUPPORTED_VERSION: HTTPStatus.BAD_REQUEST,
                 METHOD_NOT_FOUND: HTTPStatus.NOT_FOUND,
                 INTERNAL_ERROR: HTTPStatus.INTERNAL_SERVER_ERROR}
# Headers a 2026-07-28 request mirrors from its body; each may appear once.
ROUTING_HEADERS = ("MCP-Protocol-Version", "Mcp-Method", "Mcp-Name")


def is_loopback(hostname):
    """Whether a host name (no port) names this machine's loopback interface."""
    if hostname is None:
        return False
    hostname = hostname.strip("[]").lower()
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def origin_host(origin):
    try:
        return urlsplit(origin).hostname
    except ValueError:
        return None


def header_value(value):
    """A header's value without the whitespace around it (RFC 9110), or None when it holds a
    character a header value may not: one outside visible ASCII, space and tab."""
    value = value.strip(" \t")
    if all(" " <= ch <= "~" or ch == "\t" for ch in value):
        return value
    return None


def decoded_name(value):
    """An Mcp-Name value as the body would hold it: the =?base64?...?= form decoded (strict,
    canonical base64 of UTF-8), any other value as it is; None when the form does not decode."""
    if not (value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11):
        return value
    encoded = value[9:-2]
    try:
        raw = base64.b64decode(encoded, validate=True)
        if base64.b64encode(raw).decode("ascii") != encoded:
            return None  # trailing bits set: not the one encoding of any text
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def modern_post(versions, payload):
    """Whether a POST is served in 2026-07-28: an MCP-Protocol-Version header names that
    revision, or the body's _meta names a revision (of any era: a modern request naming a
    revision not served per request is answered that it is not). The era is decided here."""
    params = payload.get("params") if isinstance(payload, dict) else None
    return any(v in MODERN_VERSIONS for v in versions) or carries_version(params)


def header_mismatch(headers, payload):
    """Why a 2026-07-28 request's headers disagree with its body (the message of a -32020
    error), or None when they agree. A batch is refused (2026-07-28 has none); a notification
    or a response has no header rules."""
    if isinstance(payload, list):
        return None
    if not isinstance(payload, dict) or "id" not in payload or "method" not in payload:
        return None
    for name in ROUTING_HEADERS:
        if len(headers.get_all(name) or []) > 1:
            return f"the {name} header appears more than once"
    values = {}
    for name in ROUTING_HEADERS:
        raw = headers.get(name)
        if raw is not None:
            values[name] = header_value(raw)
            if values[name] is None:
                return f"the {name} header holds a character a header value may not"
    params = payload.get("params")
    if carries_version(params):
        version = params["_meta"][VERSION_KEY]
        if "MCP-Protocol-Version" not in values:
            return "the MCP-Protocol-Version header is missing: it must name the revision " \
                   "the body's _meta names"
        if values["MCP-Protocol-Version"] != version:
            return (f"the MCP-Protocol-Version header {echoed(values['MCP-Protocol-Version'])} "
                    f"differs from the revision the body's _meta names, "
                    f"{echoed(str(version))}")
    method = payload["method"]
    if "Mcp-Method" not in values:
        return "the Mcp-Method header is missing: it must name the request's method"
    if values["Mcp-Method"] != method:
        return (f"the Mcp-Method header {echoed(values['Mcp-Method'])} differs from the "
                f"body's method {echoed(str(method))}")
    name = params.get("name") if method == "tools/call" and isinstance(params, dict) else None
    if name is not None:
        if "Mcp-Name" not in values:
            return "the Mcp-Name header is missing: a tools/call names its tool there too"
        given = decoded_name(values["Mcp-Name"])
        if given is None:
            return "the Mcp-Name header's =?base64?...?= value is not base64 of UTF-8 text"
        if given != name:
            return (f"the Mcp-Name header {echoed(given)} differs from the body's tool name "
                    f"{echoed(str(name))}")
    return None


class HeadersTooLarge(Exception):
    """The request line and headers passed MAX_HEADER_BYTES."""


class _Deadline:
    """Wraps a request's input so that reading it as a whole cannot outlast a deadline, and
    its request line and headers cannot pass a size.

    A per-read socket timeout alone lets a client trickle one byte at a time forever, and
    http.server bounds each header line (64 KiB) and their number (100), not their total.
    """

    def __init__(self, rfile, sock, seconds, header_bytes):
        self._rfile = rfile
        self._sock = sock
        self._start = time.monotonic()
        self._end = self._start + seconds
        self._header_bytes = header_bytes  # left for the lines before the body

    def extend(self, seconds):
        """Move the deadline to `seconds` after the start (the body's, once the headers are in)."""
        self._end = self._start + seconds

    def _arm(self):
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError("request took too long to arrive")
        self._sock.settimeout(left)

    def readline(self, *args):
        self._arm()
        line = self._rfile.readline(*args)
        self._header_bytes -= len(line)
        if self._header_bytes < 0:
            raise HeadersTooLarge
        return line

    def read(self, *args):
        self._arm()
        return self._rfile.read(*args)

    def __getattr__(self, name):
        return getattr(self._rfile, name)


class Handler(BaseHTTPRequestHandler):
    """One client connection: requests in, replies out, kept alive between requests."""

    protocol_version = "HTTP/1.1"
    server_version = "flood-memory/" + SERVER_INFO["version"]
    # Headers and body go out in two writes: with Nagle's algorithm on, the second waited
    # for the client's delayed ACK, some 40 ms on every kept-alive request.
    disable_nagle_algorithm = True

    def version_string(self):
        return self.server_version

    # -- plumbing

    def setup(self):
        super().setup()
        self._raw_rfile = self.rfile
        self.token_passed = False  # by one of this connection's requests (see evictable)

    def handle_one_request(self):
        self.server.evictable(self.connection, self.token_passed)
        self.rfile = _Deadline(self._raw_rfile, self.connection, self.server.header_timeout,
                               MAX_HEADER_BYTES)
        try:
            super().handle_one_request()
        except HeadersTooLarge:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                            f"the request line and headers may take {MAX_HEADER_BYTES} bytes")
        except (TimeoutError, ConnectionError) as exc:
            log.info("%s: connection dropped: %s", self.client_address[0], exc)
            self.close_connection = True

    def parse_request(self):
        """http.server's parsing of the request line and headers; once they are in, the
        body has until the request's deadline."""
        parsed = super().parse_request()
        self.rfile.extend(self.server.request_timeout)
        return parsed

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (a malformed request line, a header too long, an
        unknown method) as JSON with the CORS headers, like every other error here."""
        self.close_connection = True
        self.server.refused(self.connection)
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # No request line parsed yet, or one too broken to tell: answer in HTTP/1.0.
            self.request_version = "HTTP/1.0"
            self.requestline = getattr(self, "requestline", "")
            self.command = getattr(self, "command", "")
        status = HTTPStatus(code)
        self.send(status, encode(rpc_error(None, TRANSPORT_ERROR, message or status.phrase)))

    def log_message(self, format, *args):
        log.info("%s %s", self.client_address[0], format % args)

    def send(self, status, body=b"", content_type="application/json", headers=()):
        """One complete response, with the CORS headers every response carries."""
        self.send_response(status)
        for name, value in CORS_HEADERS.items():
            self.send_header(name, value)
        for name, value in headers:
            self.send_header(name, value)
        if body or status not in (HTTPStatus.NO_CONTENT, HTTPStatus.ACCEPTED):
            self.send_header("Content-Type", content_type)
        if status != HTTPStatus.NO_CONTENT:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)

    def refuse(self, status, message, headers=()):
        """An error response with a JSON-RPC error body, then the connection closed. What is
        left of the request is never read: a client refused costs a reply, not the time it
        takes to send a body (headers promising 1,000,000 bytes that never came kept their
        slot 30 s, until the token holder got 503)."""
        self.close_connection = True
        self.server.refused(self.connection)
        body = encode(rpc_error(None, TRANSPORT_ERROR, message, modern=self.modern_header()))
        self.send(status, body, headers=headers)

    def versions(self):
        """The MCP-Protocol-Version headers' values, without surrounding whitespace."""
        return [v.strip(" \t") for v in self.headers.get_all("MCP-Protocol-Version") or []]

    def modern_header(self):
        """Whether a header names 2026-07-28: all a refusal before the body can go by."""
        return any(v in MODERN_VERSIONS for v in self.versions())

    def _length(self):
        """The body's length: 0 when none is given, None when it is not plain and single."""
        lengths = self.headers.get_all("Content-Length") or []
        if self.headers.get("Transfer-Encoding") is not None or len(set(lengths)) > 1:
            return None
        length = lengths[0].strip() if lengths else "0"
        if not (length.isascii() and length.isdigit()) or len(length) > 18:
            return None  # int() refuses over 4,300 digits; no body is that long anyway
        return int(length)

    def on_mcp_path(self):
        if urlsplit(self.path).path == MCP_PATH:
            return True
        self.refuse(HTTPStatus.NOT_FOUND, f"not found: this server answers on {MCP_PATH} only")
        return False

    # -- methods

    def do_OPTIONS(self):
        if self.on_mcp_path():
            self.send(HTTPStatus.NO_CONTENT, headers=[("Access-Control-Max-Age", "86400"),
                                                      ("Allow", ALLOW)])

    def do_POST(self):
        if not self.on_mcp_path() or not self.well_formed() or not self.origin_allowed() or \
                not self.authorized():
            return
        self.token_passed = True
        self.server.in_service(self.connection)
        body = self.read_body()
        if body is None:
            return
        versions = self.versions()
        payload, reply = decode(body, modern_post(versions, None))  # the headers' era
        if reply is not None:  # not JSON: nothing to answer but the parse error itself
            self.send(HTTPStatus.BAD_REQUEST, encode(reply))
            return
        modern = modern_post(versions, payload)
        request_id = payload.get("id") if isinstance(payload, dict) else None
        if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
            request_id = None
        unknown = [v for v in versions if v not in PROTOCOL_VERSIONS and v not in MODERN_VERSIONS]
        if unknown:
            error = unsupported_version(unknown[0], "MCP-Protocol-Version")
            self.answer_error(request_id, error.code, error.message, error.data)
            return
        if modern and isinstance(payload, list):
            self.answer_error(None, INVALID_REQUEST, "a JSON-RPC batch is not a 2026-07-28 "
                                                     "request: send each request in a POST of "
                                                     "its own")
            return
        mismatch = header_mismatch(self.headers, payload) if modern else None
        if mismatch is not None:
            self.answer_error(request_id, HEADER_MISMATCH, mismatch)
            return
        if not self.server.begin_request():
            self.close_connection = True
            if modern:  # the body was read: its id goes back
                self.answer_error(request_id, TRANSPORT_ERROR, "the server is shutting down",
                                  status=HTTPStatus.SERVICE_UNAVAILABLE)
            else:
                self.refuse(HTTPStatus.SERVICE_UNAVAILABLE, "the server is shutting down")
            return
        # In flight until the reply is written out, so that a shutdown waits for it: a
        # client whose reply to committed writes was cut off would retry them.
        try:
            session = Session(versions[0] if versions else HEADERLESS_VERSION, modern=modern,
                              cache_scope="public" if self.server.token is None else "private")
            messages = handle_payload(payload, self.server.store, session)
            if not messages:
                self.send(HTTPStatus.ACCEPTED)
                return
            streamed = "text/event-stream" in self.headers.get("Accept", "")
            last = messages[-1]
            if modern and isinstance(last, dict) and "error" in last:
                self.send(MODERN_STATUS.get(last["error"]["code"], HTTPStatus.OK), encode(last))
            elif len(messages) > 1 and not streamed:
                self.answer_error(request_id, INVALID_REQUEST, "the reply to this request is an "
                                                               "event stream (notifications, then "
                                                               "the result): send Accept: "
                                                               "text/event-stream",
                                  status=HTTPStatus.NOT_ACCEPTABLE)
            elif streamed:
                self.send(HTTPStatus.OK, b"".join(b"data: " + encode(m) + b"\n\n"
                                                  for m in messages),
                          "text/event-stream", [("Cache-Control", "no-cache")])
            else:
                self.send(HTTPStatus.OK, encode(last))
            self.wfile.flush()
        finally:
            self.server.end_request()

    def answer_error(self, request_id, code, message, data=None, status=None):
        """A 2026-07-28 JSON-RPC error, with the HTTP status its code takes (or `status`);
        the body was read, so the connection can stay open for the next request."""
        body = encode(rpc_error(request_id, code, message, data, modern=True))
        self.send(status or MODERN_STATUS.get(code, HTTPStatus.BAD_REQUEST), body)

    def do_GET(self):
        if self.on_mcp_path():
            self.refuse(HTTPStatus.METHOD_NOT_ALLOWED, "this server offers no event stream; "
                                                       "POST JSON-RPC messages instead",
                        [("Allow", ALLOW)])

    def do_DELETE(self):
        if self.on_mcp_path():
            self.refuse(HTTPStatus.METHOD_NOT_ALLOWED, "this server keeps no sessions to end",
                        [("Allow", ALLOW)])

    def do_PUT(self):
        if self.on_mcp_path():
            self.refuse(HTTPStatus.METHOD_NOT_ALLOWED, f"use POST on {MCP_PATH}",
                        [("Allow", ALLOW)])

    do_PATCH = do_PUT
    do_HEAD = do_PUT

    # -- checks

    def well_formed(self):
        """Headers that parsed cleanly: a line like "Transfer-Encoding : chunked" (space
        before the colon) is no header to http.server, but may be one to a proxy in front."""
        if not self.headers.defects and all(
                name.strip() == name and " " not in name for name in self.headers.keys()):
            return True
        self.refuse(HTTPStatus.BAD_REQUEST, "malformed header: a header line must be "
                                            "Name: value, with no space before the colon")
        return False

    def origin_allowed(self):
        """The DNS-rebinding defence: browsers on foreign pages may not reach an open server.

        Without a token, a request whose Origin is not loopback is refused; so is, when the
        server listens on loopback only, one whose Host is not (a rebound name).
        """
        if self.server.token is None and self.server.loopback_only:
            host = self.headers.get("Host", "")
            if not is_loopback(origin_host("//" + host)):
                self.refuse(HTTPStatus.FORBIDDEN, f"host {host!r:.80} is not allowed")
                return False
        origin = self.headers.get("Origin")
        if origin is None or origin in self.server.allowed_origins:
            return True
        if self.server.token is not None and not self.server.allowed_origins:
            return True  # the token is the defence
        if self.server.token is None and is_loopback(origin_host(origin)):
            return True
        self.refuse(HTTPStatus.FORBIDDEN, f"origin {origin!r:.80} is not allowed")
        return False

    def authorized(self):
        token = self.server.token
        if token is None:
            return True
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        # http.server decodes header bytes as Latin-1: encoding back gives the bytes sent,
        # to compare with the token's UTF-8 bytes (a non-ASCII token then matches).
        if scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode("latin-1", "replace"), token.encode("utf-8")):
            return True
        if scheme:
            challenge = 'Bearer realm="flood-memory", error="invalid_token"'
            message = "the bearer token is wrong"
        else:
            challenge = 'Bearer realm="flood-memory"'
            message = "this server needs Authorization: Bearer <token>"
        self.refuse(HTTPStatus.UNAUTHORIZED, message, [("WWW-Authenticate", challenge)])
        return False

    def read_body(self):
        """The request body, or None after refusing the request."""
        if "Content-Length" not in self.headers:  # chunked bodies are not taken either
            self.refuse(HTTPStatus.LENGTH_REQUIRED, "the request needs a Content-Length header")
            return None
        length = self._length()
        if length is None:
            # Where the body ends would be ambiguous, and a proxy in front might see another
            # request in it (request smuggling): refuse, and close the connection.
            self.refuse(HTTPStatus.BAD_REQUEST, "the request must give its length as one "
                                                "Content-Length header, a whole number of "
                                                "bytes, and no Transfer-Encoding")
            return None
        if length > self.server.max_body:
            self.refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"the body is {length} bytes; the limit is {self.server.max_body}")
            return None
        chunks = []
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 20))
            if not chunk:
                raise ConnectionError("the client closed the connection mid-body")
            chunks.append(chunk)
            length -= len(chunk)
        return b"".join(chunks)


def listening_options(system, host):
    """The socket options, as (level, option, value) names in the socket module, that the
    listening socket for `host` takes on `system` (os.name).

    SO_REUSEADDR lets a restarted server listen while its old connections wind down; on
    Windows it lets a second process take the same port without an error, so there
    SO_EXCLUSIVEADDRUSE makes the second one fail ("cannot listen"), at a cost Microsoft
    documents: right after a stop, the port may stay taken while the connections of the
    server before finish closing. An IPv6 socket on :: takes IPv4 connections too once
    IPV6_V6ONLY is cleared, as Windows does not by default.
    """
    options = [("SOL_SOCKET", "SO_EXCLUSIVEADDRUSE" if system == "nt" else "SO_REUSEADDR", 1)]
    with contextlib.suppress(ValueError):
        address = ipaddress.ip_address(host)
        if address.version == 6 and address.is_unspecified:
            options.append(("IPPROTO_IPV6", "IPV6_V6ONLY", 0))
    return options


class RemoteServer(ThreadingHTTPServer):
    """The HTTP server: one thread per connection, all sharing one Store."""

    daemon_threads = True
    request_queue_size = 128  # the default of 5 resets connections under a burst of clients
    allow_reuse_address = False  # server_bind sets what each system needs instead

    def __init__(self, address, store, *, token=None, allowed_origins=(),
                 max_body=DEFAULT_MAX_BODY, request_timeout=REQUEST_TIMEOUT,
                 header_timeout=HEADER_TIMEOUT, max_connections=MAX_CONNECTIONS):
        self.store = store
        self.token = token or None
        self.allowed_origins = frozenset(allowed_origins)
        self.max_body = max_body
        self.request_timeout = request_timeout
        self.header_timeout = min(header_timeout, request_timeout)
        self.max_connections = max_connections
        self.loopback_only = is_loopback(address[0])
        self._busy = 0
        self._stopping = False
        self._idle = threading.Condition()
        self._open_lock = threading.Lock()  # guards the five fields below
        self._open = 0                  # connections with a thread of their own
        # Those of them serving no request that passed the token check, the longest so
        # first: those none of whose requests passed it, then those of the token holder
        # between two requests. When every slot is taken, a new connection closes the first
        # of them and takes its slot (see process_request).
        self._strangers = collections.OrderedDict()
        self._idle_holders = collections.OrderedDict()
        self._refused = set()  # those whose thread refused a request unread (see linger)
        self._lingering = collections.deque()  # (when to close, connection) (see linger)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    def server_bind(self):
        for level, option, value in listening_options(os.name, self.server_address[0]):
            self.socket.setsockopt(getattr(socket, level), getattr(socket, option), value)
        super().server_bind()

    def begin_request(self):
        """Count a request as in flight; False once the server is stopping."""
        with self._idle:
            if self._stopping:
                return False
            self._busy += 1
            return True

    def end_request(self):
        with self._idle:
            self._busy -= 1
            self._idle.notify_all()

    def drain(self, timeout):
        """Refuse new requests and wait for those in flight; False if some outlast `timeout`."""
        with self._idle:
            self._stopping = True
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def get_request(self):
        """Accept a connection; when the process has run out of file descriptors, wait a
        moment first, or the accept loop spins on the connection it cannot take."""
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                log.warning("out of file descriptors: connections wait in the queue")
                time.sleep(0.1)
            raise

    def evictable(self, connection, token_passed):
        """The connection serves no request that passed the token check; `token_passed`
        whether an earlier one of its requests did (see _strangers)."""
        with self._open_lock:
            (self._idle_holders if token_passed else self._strangers).setdefault(connection)

    def in_service(self, connection):
        """The connection serves a request that passed the token check: it keeps its slot."""
        with self._open_lock:
            self._strangers.pop(connection, None)
            self._idle_holders.pop(connection, None)

    def refused(self, connection):
        """The connection's thread refused a request unread: linger when it is done."""
        with self._open_lock:
            self._refused.add(connection)

    def process_request(self, request, client_address):
        """Serve the connection in a thread. Past max_connections at once (slow clients
        holding many connections must not starve the process of file descriptors: about
        1,000 did at ulimit -n 1024), a new connection closes one serving no request that
        passed the token check and takes its slot: the oldest of those none of whose requests
        passed it, else the token holder's idle the longest. So clients without the token
        cannot keep its holder out, whatever state they hold their connections in, nor close
        the connection it keeps alive between requests; only when every slot serves a request
        of the token holder is a new connection answered 503."""
        evicted = None
        with self._open_lock:
            candidates = self._strangers or self._idle_holders
            full = self._open >= self.max_connections
            if full and candidates:
                evicted, _ = candidates.popitem(last=False)
                full = False
            if not full:
                self._open += 1
                self._strangers[request] = None
        if evicted is not None:
            with contextlib.suppress(OSError):
                evicted.shutdown(socket.SHUT_RDWR)  # its thread reads the end, and ends
        if not full:
            super().process_request(request, client_address)
            return
        body = encode(rpc_error(None, TRANSPORT_ERROR, "too many connections; try again soon"))
        with contextlib.suppress(OSError):
            request.settimeout(1.0)
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n" +
                            "".join(f"{k}: {v}\r\n" for k, v in CORS_HEADERS.items()).encode() +
                            b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                            b"Connection: close\r\n\r\n%s" % (len(body), body))
        self.linger(request)

    def shutdown_request(self, request):
        """Close a connection its thread is done with: at once, or later if it refused."""
        with self._open_lock:
            refused = request in self._refused
            self._refused.discard(request)
        if refused:
            self.linger(request)
        else:
            super().shutdown_request(request)

    def linger(self, request):
        """End the reply to a request refused unread, and close the connection LINGER later,
        when the client has read the reply. Closed now, with the request still arriving, the
        connection would be reset, and a client still sending (http.client sends the body
        after the headers) gets a broken pipe instead of the reply (7 of 20 runs of the
        descriptor test on a busy machine). At most LINGER_MAX linger at once."""
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
        self.service_actions()
        with self._open_lock:
            self._lingering.append((time.monotonic() + LINGER, request))
            oldest = self._lingering.popleft()[1] if len(self._lingering) > LINGER_MAX else None
        if oldest is not None:  # the oldest has had the most time
            self.close_request(oldest)

    def service_actions(self):
        """Close the connections lingering (see linger) whose time is up (serve_forever
        calls this between two connections, and at least every POLL_INTERVAL)."""
        now = time.monotonic()
        with self._open_lock:
            due = []
            while self._lingering and self._lingering[0][0] <= now:
                due.append(self._lingering.popleft()[1])
        for request in due:
            self.close_request(request)

    def server_close(self):
        super().server_close()
        with self._open_lock:
            lingering, self._lingering = self._lingering, collections.deque()
        for _, request in lingering:
            self.close_request(request)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open -= 1
                self._strangers.pop(request, None)
                self._idle_holders.pop(request, None)
            self.store.close_thread()

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.info("%s: connection dropped: %s", client_address[0], exc)
        else:
            log.exception("error serving %s", client_address[0])


# ----------------------------------------------------------------------------- main


MIN_TOKEN = 32             # characters a bearer token must have
# How to make a token, with the command that starts Python here (Windows: the py launcher).
MAKE_TOKEN = ("py" if os.name == "nt" else "python3") + \
    ' -c "import secrets; print(secrets.token_urlsafe(32))"'


def _token(environ):
    """The bearer token from the environment: None when unset, or ValueError when it is set
    but cannot protect anything (empty, padded with spaces that never match, guessable)."""
    token = environ.get("FLOOD_MEMORY_AUTH_TOKEN")
    if token is None:
        return None
    if not token:
        raise ValueError("FLOOD_MEMORY_AUTH_TOKEN is set but empty (an unset variable in a "
                         "service file or env file does that); set a token, or unset the "
                         "variable to run without authentication on 127.0.0.1")
    if token != token.strip():
        raise ValueError("FLOOD_MEMORY_AUTH_TOKEN starts or ends with whitespace, which no "
                         "client sends; remove it")
    if len(token) < MIN_TOKEN:
        raise ValueError(f"FLOOD_MEMORY_AUTH_TOKEN has {len(token)} characters; a token needs "
                         f"at least {MIN_TOKEN}, random, so that it cannot be guessed. Make "
                         f"one with: {MAKE_TOKEN}")
    return token


def _settings(environ):
    """Typed settings from the environment, or ValueError saying which one is wrong."""
    token = _token(environ)
    host = environ.get("FLOOD_MEMORY_HOST") or ("0.0.0.0" if token else "127.0.0.1")
    port_text = environ.get("FLOOD_MEMORY_PORT") or str(DEFAULT_PORT)
    try:
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise ValueError(f"FLOOD_MEMORY_PORT must be a port number (0-65535), "
                         f"got {port_text!r}") from None
    body_text = environ.get("FLOOD_MEMORY_MAX_BODY") or str(DEFAULT_MAX_BODY)
    try:
        max_body = int(body_text)
        if max_body < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"FLOOD_MEMORY_MAX_BODY must be a number of bytes, "
                         f"got {body_text!r}") from None
    origins = [o.strip() for o in environ.get("FLOOD_MEMORY_ALLOWED_ORIGINS", "").split(",")]
    return {"token": token, "host": host, "port": port, "max_body": max_body,
            "allowed_origins": [o for o in origins if o]}


def _connection_cap():
    """MAX_CONNECTIONS, or fewer when the descriptor limit would run out first: a connection
    takes one descriptor, and its thread's SQLite connection three more (-wal, -shm). The 64
    kept back serve the process itself and the LINGER_MAX connections lingering after a
    refusal (see linger)."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, (soft - 64) // 4))


def main(argv=None):
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="flood-memory: %(levelname)s: %(message)s")
    try:
        settings = _settings(os.environ)
    except ValueError as exc:
        print(f"flood-memory: {exc}", file=sys.stderr)
        return 1
    store = open_data_directory(os.environ)
    if store is None:
        return 1
    host, port = settings["host"], settings["port"]
    # Said before listening: a client that connects at once must find it in the log.
    if settings["token"] is None and is_loopback(host):
        log.warning("FLOOD_MEMORY_AUTH_TOKEN is not set: authentication is disabled, so "
                    "every program on this machine can read and change the memories")
    elif settings["token"] is None:
        log.warning("FLOOD_MEMORY_AUTH_TOKEN is not set and %s is not a loopback address: "
                    "ANYONE who can reach %s:%d can read and change every memory. Set a "
                    "token, or listen on 127.0.0.1", host, host, port)
    try:
        httpd = RemoteServer((host, port), store, token=settings["token"],
                             allowed_origins=settings["allowed_origins"],
                             max_body=settings["max_body"], max_connections=_connection_cap())
    except (OSError, OverflowError) as exc:
        store.close()
        print(f"flood-memory: cannot listen on {host}:{port}: "
              f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1
    log.info("listening on http://%s:%d%s", f"[{host}]" if ":" in host else host,
             httpd.server_address[1], MCP_PATH)

    signals = (*stop_signals(), signal.SIGINT)

    def stop(signum, frame):
        """Raised in the main thread, this ends serve_forever's wait for a connection at once,
        as Ctrl-C's KeyboardInterrupt does (a thread calling shutdown() waited for the wait
        to time out); the requests in flight finish below. One stop is enough: a second
        signal does not cut the drain short."""
        for other in signals:
            signal.signal(other, signal.SIG_IGN)
        log.info("stopping: letting requests in flight finish")
        raise SystemExit(0)

    try:
        for signum in signals:
            signal.signal(signum, stop)
        httpd.serve_forever(POLL_INTERVAL)
    finally:
        drained = httpd.drain(SHUTDOWN_GRACE)
        httpd.server_close()
        if drained:
            store.close()
        else:
            # Closing a connection another thread is still using can crash the process; what
            # was committed is safe in the log, and the next start reads it back.
            log.warning("requests still in flight after %g s; stopping without waiting for "
                        "them", SHUTDOWN_GRACE)
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
