"""The policy server's HTTP/1.1 front end: one asyncio event loop, no thread per connection.

Why one loop: a thread per connection made each request's socket calls wait for the GIL behind the engine's decoding
(each call that releases the GIL waits up to the interpreter's switch interval to get it back: ~4-5 ms per call,
measured), so answers and new requests reached the engine late and the batch ran short. Here the loop reads, parses
and answers every connection between two decoding steps, on the thread that decodes (batcher.Engine), so nothing
waits for the GIL and no thread is woken per request.

This module is HTTP only: requests are parsed (request line, headers, a Content-Length body; keep-alive and
pipelining; `Expect: 100-continue`), checked by the gate (`Gate`: a loopback Host with the server's port, no Origin,
the `/p/<key>` capability path, and for a POST `application/json` with a Content-Length under the body cap), and
handed to the application with an `Exchange` to answer on. Time is bounded: a request's headers, its whole body
(408) and an idle keep-alive get READ_TIMEOUT_SECONDS each, and so does a client that stops reading its answer; a
client that closes its connection (or its sending side) while its request is in flight is told to the application
(`Exchange.on_gone`), which drops its rows before the next step.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Optional, Protocol

MAX_BODY_BYTES = int(os.environ.get("LIGHTNING_POLICY_MAX_BODY_BYTES") or 32 * 1024 * 1024)
# A connection's reads and writes: headers, a whole body, an idle keep-alive and a client not reading its answer each
# get this long, so a declared body that never arrives (or a client gone silent) holds nothing forever.
READ_TIMEOUT_SECONDS = float(os.environ.get("LIGHTNING_POLICY_READ_TIMEOUT_SECONDS") or 30)
MAX_HEAD_BYTES = 64 * 1024  # request line and headers together (http.server's per-line limit)
MAX_HEADERS = 100
PIPELINE_BUFFER_BYTES = 1 << 20  # past this, a connection with a request in flight is not read until it is answered
KEY_PREFIX = "/p/"  # /p/<key>: the capability path every request needs
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE = re.compile(r"\r?\n")


class Refusal(Exception):
    """A request refused before its body is read: answered with this status, then the connection closes."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    method: str
    path: str  # the request target's path after `/p/<key>`, without the query
    headers: dict[str, str]  # names lowercased; a repeated header's values joined with ", "
    body: bytes = b""


class Application(Protocol):
    def handle(self, request: Request, exchange: Exchange) -> None:
        """Answers the request on `exchange`, now or later (from the same loop)."""


class Gate:
    """Who may be served: a loopback Host naming the server's port (DNS rebinding), no Origin (a web page), the
    capability path's key; for a POST, a JSON body with a Content-Length under the cap."""

    def __init__(self, key: str):
        self.key = key.encode()
        self.port = 0
        self.hosts: frozenset = frozenset()

    def bind(self, port: int) -> None:
        self.port = port
        self.hosts = frozenset(f"{name}:{port}" for name in LOOPBACK_HOSTS)

    def path(self, method: str, target: str, headers: dict[str, str]) -> str:
        """The path after `/p/<key>`, or raises the Refusal that answers the request."""
        host = headers.get("host", "").strip().lower()
        if host not in self.hosts:
            port = self.port
            raise Refusal(403, f"the Host header must be 127.0.0.1:{port}, localhost:{port} or [::1]:{port}")
        if "origin" in headers:
            raise Refusal(403, "requests from web pages (with an Origin header) are refused")
        path = target.split("?", 1)[0]
        key = path[len(KEY_PREFIX) :].split("/", 1)[0] if path.startswith(KEY_PREFIX) else ""
        if not hmac.compare_digest(key.encode(), self.key):
            raise Refusal(401, "unknown policy server key: use the URL the trainer worker answered `serve` with")
        if method == "POST":
            self._body(headers)
        return path[len(KEY_PREFIX) + len(key) :] or "/"

    @staticmethod
    def _body(headers: dict[str, str]) -> None:
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise Refusal(415, "the body must be application/json")
        if "transfer-encoding" in headers or "content-length" not in headers:
            raise Refusal(411, "send the body with a Content-Length (no chunked encoding)")
        length = content_length(headers)
        if length > MAX_BODY_BYTES:
            raise Refusal(413, f"the body ({length} bytes) is over the {MAX_BODY_BYTES}-byte limit")


def content_length(headers: dict[str, str]) -> int:
    value = headers.get("content-length", "0").strip()
    # Not a number: also a repeated header with two values ("10, 12", request smuggling's tool) or digits int() reads
    # but no HTTP peer means ("²" is a latin-1 digit).
    if not (value.isascii() and value.isdigit()):
        raise Refusal(400, "the Content-Length is not a number")
    return int(value)


def _head(data: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, headers) of a request head; a malformed one raises a Refusal (400)."""
    lines = _LINE.split(data.decode("latin-1"))
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refusal(400, f"bad request line {lines[0][:100]!r}")
    if len(lines) - 1 > MAX_HEADERS:
        raise Refusal(431, f"more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise Refusal(400, f"bad header line {line[:100]!r}")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return parts[0], parts[1], parts[2], headers


def _response_head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass
class Exchange:
    """One request's answer: a whole response (`respond`) or a stream (`begin` + `write` + `end`)."""

    connection: Connection
    keep_alive: bool
    on_gone: Optional[Callable[[], None]] = None  # set by the application: its client left before the answer ended
    answered: bool = False
    gone: bool = False
    streaming: bool = False  # its 200 head is sent: the rest is written as it comes

    def respond(self, status: int, body: bytes, headers: Optional[dict[str, str]] = None) -> None:
        if self.answered or self.gone or self.streaming:  # a stream's head is out: it can only end
            return
        self.answered = True
        head = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
        if not self.keep_alive:
            head["Connection"] = "close"
        self.connection.finish(self, _response_head(status, head) + body, close=not self.keep_alive)

    def begin(self, headers: dict[str, str]) -> None:
        """A 200 whose body is written as it comes (SSE): the connection closes at its end."""
        self.streaming = True
        self.connection.write(_response_head(200, {**headers, "Connection": "close"}))

    def write(self, data: bytes) -> None:
        if not self.gone:
            self.connection.write(data)

    def end(self) -> None:
        if not self.answered and not self.gone:
            self.answered = True
            self.connection.finish(self, b"", close=True)

    def client_left(self) -> None:
        if self.gone or self.answered:
            return
        self.gone = True
        if self.on_gone is not None:
            self.on_gone()


class Connection(asyncio.Protocol):
    """One client connection: reads requests one at a time, hands each to the application, writes its answer."""

    def __init__(self, app: Application, gate: Gate, registry: set):
        self.app, self.gate, self.registry = app, gate, registry
        self.transport: Optional[asyncio.Transport] = None
        self.buffer = bytearray()
        self.pending: Optional[tuple[Request, int, bool]] = None  # a request whose body is being read
        self.exchange: Optional[Exchange] = None  # the request being answered
        self.timer: Optional[asyncio.TimerHandle] = None
        self.closed = False
        self.paused_reading = False
        self.paused_writing = False  # the client is not reading: what we write waits in the transport's buffer
        self.head_begun = False  # part of a request head has come: it has READ_TIMEOUT_SECONDS from then

    # --- asyncio.Protocol ------------------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.registry.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # an answer is one write, an SSE event another: neither waits for an ACK (Nagle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm(self._idle_timeout)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.exchange is not None:  # pipelined: read once this one is answered
            if len(self.buffer) > PIPELINE_BUFFER_BYTES and not self.paused_reading:
                self.paused_reading = True
                self.transport.pause_reading()
            return
        self._parse()

    def eof_received(self) -> bool:
        """The client closed its sending side: a request in flight has nobody to answer (as when it closes)."""
        self._client_left()
        return False  # the transport closes

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.registry.discard(self)
        self._disarm()
        self._client_left()

    def pause_writing(self) -> None:  # the client is not reading: it has READ_TIMEOUT_SECONDS to start again
        self.paused_writing = True
        self._arm(self._abort)

    def resume_writing(self) -> None:
        self.paused_writing = False
        if self.closed:
            return  # closing: the timer armed then still bounds the flush
        if self.pending is not None:
            self._arm(self._body_timeout)
        else:
            self._arm(self._idle_timeout if self.exchange is None else None)

    # --- reading --------------------------------------------------------------------------------------------------
    def _parse(self) -> None:
        """Takes what the buffer holds: the pending request's body, or the next request's head."""
        if self.closed or self.exchange is not None:
            return
        if self.pending is not None:
            request, length, keep_alive = self.pending
            if len(self.buffer) < length:
                return
            request.body = bytes(self.buffer[:length])
            del self.buffer[:length]
            self.pending = None
            return self._dispatch(request, keep_alive)
        while self.buffer[:2] == b"\r\n" or self.buffer[:1] == b"\n":  # empty lines before a request line (RFC 9112)
            del self.buffer[: 2 if self.buffer[:1] == b"\r" else 1]
        end = _HEAD_END.search(self.buffer)
        if end is None:
            if len(self.buffer) > MAX_HEAD_BYTES:
                self._refuse(Refusal(431, f"the request head is over {MAX_HEAD_BYTES} bytes"))
            elif self.buffer and not self.head_begun:
                self.head_begun = True
                self._arm(self._idle_timeout)
            return
        head = bytes(self.buffer[: end.start()])
        del self.buffer[: end.end()]
        self.head_begun = False
        try:
            self._begin(*_head(head))
        except Refusal as refusal:
            self._refuse(refusal)

    def _begin(self, method: str, target: str, version: str, headers: dict[str, str]) -> None:
        if method not in ("GET", "POST"):
            raise Refusal(501, f"unsupported method {method!r}")
        # HTTP/1.0 clients get one request per connection (their keep-alive is an extension this server leaves out).
        keep_alive = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        path = self.gate.path(method, target, headers)
        if "transfer-encoding" in headers:  # on a GET too: its chunks would be read as the next request
            raise Refusal(411, "send the body with a Content-Length (no chunked encoding)")
        length = content_length(headers)  # a GET's body, if it declares one, is read and left aside
        if length > MAX_BODY_BYTES:
            raise Refusal(413, f"the body ({length} bytes) is over the {MAX_BODY_BYTES}-byte limit")
        request = Request(method, path, headers)
        if length and headers.get("expect", "").lower() == "100-continue":
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.pending = (request, length, keep_alive)
        self._arm(self._body_timeout)  # the whole body within READ_TIMEOUT_SECONDS of its head
        self._parse()

    def _dispatch(self, request: Request, keep_alive: bool) -> None:
        self._disarm()
        self.exchange = Exchange(self, keep_alive)
        try:
            self.app.handle(request, self.exchange)
        except Exception as error:  # the application's bug answers this request, not the loop
            self.exchange.respond(500, error_body(500, f"{type(error).__name__}: {error}"))

    # --- writing --------------------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def finish(self, exchange: Exchange, data: bytes, close: bool) -> None:
        """The exchange's last bytes: then the connection closes, or reads its next request."""
        if exchange is not self.exchange or self.closed:
            return
        self.exchange = None
        if data:
            self.transport.write(data)
        if close:
            self.closed = True
            self._disarm()
            self.transport.close()  # after what is buffered has been written: a client not reading has the timeout
            if self.transport.get_write_buffer_size():
                self.timer = asyncio.get_running_loop().call_later(READ_TIMEOUT_SECONDS, self.transport.abort)
            return
        if self.paused_reading:
            self.paused_reading = False
            self.transport.resume_reading()
        self._arm(self._abort if self.paused_writing else self._idle_timeout)
        if self.buffer:
            asyncio.get_running_loop().call_soon(self._parse)  # a pipelined request: after this answer is written

    def _refuse(self, refusal: Refusal) -> None:
        """Answers without reading (more of) the body, then closes: what is left unread cannot be told apart from
        the next request."""
        self.pending = None
        self.buffer.clear()
        head = {"Content-Type": "application/json", "Connection": "close"}
        body = error_body(refusal.status, str(refusal))
        self.exchange = Exchange(self, keep_alive=False)
        self.finish(
            self.exchange, _response_head(refusal.status, {**head, "Content-Length": str(len(body))}) + body, True
        )

    # --- time limits ----------------------------------------------------------------------------------------------
    def _arm(self, action: Optional[Callable[[], None]]) -> None:
        self._disarm()
        if action is not None and not self.closed:
            self.timer = asyncio.get_running_loop().call_later(READ_TIMEOUT_SECONDS, action)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _idle_timeout(self) -> None:
        """No request (or only part of its head) within the timeout: closed without an answer (dropped if the last
        answer is still unread: the client is not reading)."""
        self.timer = None
        self.closed = True
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()

    def _body_timeout(self) -> None:
        self.timer = None
        self._refuse(Refusal(408, f"the body did not arrive within {READ_TIMEOUT_SECONDS:g} s"))

    def _abort(self) -> None:
        """The client stopped reading its answer: the connection is dropped (and its request with it)."""
        self.timer = None
        self.closed = True
        self.transport.abort()

    def _client_left(self) -> None:
        if self.exchange is not None:
            self.exchange.client_left()


def error_body(status: int, message: str, param: Optional[str] = None) -> bytes:
    """An OpenAI-style error object."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": None}}).encode()


class Front:
    """The listening socket and its open connections."""

    def __init__(self, app: Application, gate: Gate):
        self.app, self.gate = app, gate
        self.connections: set[Connection] = set()
        self.server: Optional[asyncio.base_events.Server] = None
        self.address: tuple = ()

    def connection(self) -> Connection:
        return Connection(self.app, self.gate, self.connections)

    def close(self) -> None:
        """Stops listening and closes every connection (on the loop's thread)."""
        if self.server is not None:
            self.server.close()
        for connection in list(self.connections):
            connection.transport.abort()


async def listen(host: str, port: int, app: Application, gate: Gate) -> Front:
    """Serves `app` on host:port (0: any free port) from the running loop; the gate learns the bound port."""
    front = Front(app, gate)
    # The backlog: an agent's calls arrive together, and a backlog of a few would refuse some.
    front.server = await asyncio.get_running_loop().create_server(front.connection, host, port, backlog=256)
    front.address = front.server.sockets[0].getsockname()
    gate.bind(front.address[1])
    return front
