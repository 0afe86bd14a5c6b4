"""The policy server's HTTP/1.1 front end (http_front.py) on real sockets: keep-alive and pipelining, framing it
refuses (request smuggling's tools), `Expect: 100-continue`, a streaming client that leaves, and a client that stops
reading its answer (dropped after the timeout, so an unread answer holds no memory forever)."""

import asyncio
import contextlib
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from conftest import make_session

from lightning_trainer import http_front
from lightning_trainer.params import ServeParams
from lightning_trainer.schema import parse


@pytest.fixture(scope="module")
def served():
    session = make_session()
    url = session.serve(parse(ServeParams, {}))["url"]
    yield url
    session.close()


def _head(url: str, method: str, path: str, headers: dict) -> bytes:
    parts = urlsplit(url)
    lines = [f"{method} {parts.path}{path} HTTP/1.1", f"Host: {parts.netloc}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _post(url: str, body: dict, **headers) -> bytes:
    data = json.dumps(body).encode()
    head = {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}
    return _head(url, "POST", "/v1/chat/completions", head) + data


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=60)


def _responses(sock: socket.socket, count: int) -> list[tuple[int, dict, bytes]]:
    """`count` whole responses (status, headers, body) read off the socket, each framed by its Content-Length."""
    data, answers = b"", []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            lines = data[:end].decode("latin-1").split("\r\n")
            headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            length = int(headers["content-length"])
            if len(data) >= end + 4 + length:
                answers.append((int(lines[0].split()[1]), headers, data[end + 4 : end + 4 + length]))
                data = data[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed after {len(answers)} of {count} answers"
        data += chunk
    return answers


def test_pipelined_requests_on_one_kept_alive_connection_are_answered_in_order(served):
    # Each request told apart by its prompt's length: the answers' token counts say which request each answers. (Not by
    # max_tokens alone: sampled at temperature 1, an answer may end before it, which failed this test once in CI.)
    bodies = [{"messages": [{"role": "user", "content": "hi " * (1 + 4 * i)}], "max_tokens": 1 + i} for i in range(3)]
    with _connect(served) as sock:
        sock.sendall(b"".join(_post(served, body) for body in bodies))  # all three before any answer
        answers = _responses(sock, 3)
        assert [status for status, _, _ in answers] == [200, 200, 200]
        usages = [json.loads(body)["usage"] for _, _, body in answers]
        prompts = [usage["prompt_tokens"] for usage in usages]
        assert prompts == sorted(prompts) and len(set(prompts)) == 3, f"answered out of order: {prompts}"
        assert all(1 <= usage["completion_tokens"] <= 1 + i for i, usage in enumerate(usages))
        assert all("connection" not in headers for _, headers, _ in answers), "kept alive"
        sock.sendall(_head(served, "GET", "/v1/models", {}))  # the same connection serves on
        assert _responses(sock, 1)[0][0] == 200


def test_empty_lines_before_a_request_line_are_skipped(served):
    """RFC 9112 2.2: some clients send a CRLF after a POST body; it is not the next request's (bad) request line."""
    with _connect(served) as sock:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        sock.sendall(_post(served, body) + b"\r\n" + _head(served, "GET", "/v1/models", {}))
        assert [status for status, _, _ in _responses(sock, 2)] == [200, 200]


@pytest.mark.parametrize(
    ("method", "headers", "status"),
    [
        ("GET", {"Transfer-Encoding": "chunked"}, 411),  # a GET's chunks would be read as the next request
        ("POST", {"Content-Type": "application/json", "Content-Length": "2, 2"}, 400),  # two lengths
        ("POST", {"Content-Type": "application/json", "Content-Length": "\u00b2"}, 400),  # a digit int() reads
        ("POST", {"Content-Type": "application/json", "Content-Length": "-1"}, 400),
        ("DELETE", {}, 501),
    ],
)
def test_framing_it_cannot_trust_is_refused_and_the_connection_closed(served, method, headers, status):
    with _connect(served) as sock:
        path = "/v1/models" if method != "POST" else "/v1/chat/completions"
        sock.sendall(_head(served, method, path, headers) + b"0\r\n\r\n")
        answer = _read_until_closed(sock)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert b"Connection: close" in answer


def test_expect_100_continue_is_answered_before_the_body_is_sent(served):
    data = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    head = {"Content-Type": "application/json", "Content-Length": str(len(data)), "Expect": "100-continue"}
    with _connect(served) as sock:
        sock.sendall(_head(served, "POST", "/v1/chat/completions", head))
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(data)
        assert _responses(sock, 1)[0][0] == 200


def test_a_streaming_client_that_leaves_has_its_rows_dropped():
    session = make_session(model_config={"dModel": 64, "layers": 2, "heads": 4, "context": 4096})
    try:
        session.serving_policy.stop_ids = frozenset()  # only max_tokens, or the client leaving, ends a completion
        url = session.serve(parse(ServeParams, {}))["url"]
        batcher = session.server.batcher
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000, "stream": True}
        sock = _connect(url)
        sock.sendall(_post(url, body))
        first = b""
        while b"data: " not in first:  # the stream has begun: its row is being decoded
            chunk = sock.recv(65536)
            assert chunk, "the stream ended before its first event"
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 ") and batcher.decoding() == 1
        sock.close()
        _wait_for(lambda: batcher.dropped_rows == 1, "its row to be dropped")
        _wait_for(lambda: batcher.decoding() == 0, "the batch to be empty")
    finally:
        session.close()


class _BigAnswer:
    """An application whose every answer is larger than the sockets' buffers: a client that does not read it
    leaves most of it in the server's transport."""

    SIZE = 32 * 1024 * 1024

    def handle(self, request: http_front.Request, exchange: http_front.Exchange) -> None:
        exchange.respond(200, b" " * self.SIZE)


@contextlib.contextmanager
def _front(app):
    """http_front serving `app` on its own loop thread; yields (front, url)."""
    loop = asyncio.new_event_loop()
    key = "k" * 32
    front = loop.run_until_complete(http_front.listen("127.0.0.1", 0, app, http_front.Gate(key)))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield front, f"http://127.0.0.1:{front.address[1]}/p/{key}"
    finally:
        loop.call_soon_threadsafe(front.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.parametrize("connection", ["keep-alive", "close"])
def test_a_client_that_stops_reading_its_answer_is_dropped_after_the_timeout(monkeypatch, connection):
    monkeypatch.setattr(http_front, "READ_TIMEOUT_SECONDS", 1.0)
    with _front(_BigAnswer()) as (front, url):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the answer stays with the server
        sock.connect((urlsplit(url).hostname, urlsplit(url).port))
        with sock:
            sock.sendall(_head(url, "GET", "/", {"Connection": connection}))
            _wait_for(lambda: len(front.connections) == 1, "the connection to be open")
            _wait_for(lambda: not front.connections, "the connection not reading its answer to be dropped")
            sock.settimeout(30)
            received = b""
            with contextlib.suppress(ConnectionResetError):
                received = _read_until_closed(sock)
            assert len(received) < _BigAnswer.SIZE, "what was left unsent was dropped with the connection"


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _wait_for(check, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
