"""The policy server is as closed as the daemon: capability path, loopback Host, no Origin, JSON only, a body cap;
and as robust: read timeouts, deeply nested JSON refused, a client that leaves has its rows dropped."""

import http.client
import json
import socket
import time
from urllib.parse import urlsplit

import pytest
from conftest import http as get_or_post
from conftest import make_session

from lightning_trainer import http_front, serve
from lightning_trainer.params import ServeParams
from lightning_trainer.schema import parse
from lightning_trainer.serve import MAX_BODY_BYTES

BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()


@pytest.fixture(scope="module")
def served():
    session = make_session()
    url = session.serve(parse(ServeParams, {}))["url"]
    yield url
    session.close()


def raw(url: str, method: str, path: str, headers: dict, body: bytes = b"") -> tuple[int, str]:
    """(status, body) of one request sent as written: headers exactly as given (Host included)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.putrequest(method, parts.path + path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        if body:
            connection.send(body)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def host_of(url: str) -> str:
    return urlsplit(url).netloc


def test_the_url_it_answers_with_carries_its_key_and_works(served):
    assert "/p/" in served and len(urlsplit(served).path) == len("/p/") + 32
    assert get_or_post(served, "/v1/models")[0] == 200
    status, _, text = get_or_post(served, "/v1/chat/completions", json.loads(BODY))
    assert status == 200, text


def test_without_the_key_or_with_another_every_route_is_401(served):
    port_only = served.rsplit("/p/", 1)[0]
    for url in (port_only, port_only + "/p/" + "x" * 32):
        assert get_or_post(url, "/v1/models")[0] == 401
        status, _, text = get_or_post(url, "/v1/chat/completions", json.loads(BODY))
        assert status == 401 and "key" in text


def test_a_foreign_host_is_403_dns_rebinding(served):
    port = urlsplit(served).port
    for host in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}"):
        status, text = raw(served, "GET", "/v1/models", {"Host": host})
        assert status == 403 and "Host" in text, (host, status)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert raw(served, "GET", "/v1/models", {"Host": host})[0] == 200


def test_a_web_pages_origin_is_403_even_with_the_key(served):
    headers = {
        "Host": host_of(served),
        "Origin": "https://evil.example",
        "Content-Type": "application/json",
        "Content-Length": str(len(BODY)),
    }
    status, text = raw(served, "POST", "/v1/chat/completions", headers, BODY)
    assert status == 403 and "Origin" in text


def test_only_application_json_is_taken_415(served):
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Host": host_of(served), "Content-Length": str(len(BODY))}
        if media:
            headers["Content-Type"] = media
        assert raw(served, "POST", "/v1/chat/completions", headers, BODY)[0] == 415, media
    ok = {"Host": host_of(served), "Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(BODY))}
    assert raw(served, "POST", "/v1/chat/completions", ok, BODY)[0] == 200


def test_a_body_over_the_cap_is_413_without_being_read_and_chunked_is_411(served):
    declared = {"Host": host_of(served), "Content-Type": "application/json", "Content-Length": str(1024**3)}
    status, text = raw(served, "POST", "/v1/chat/completions", declared)  # 1 GiB declared, nothing sent
    assert status == 413 and str(MAX_BODY_BYTES) in text
    chunked = {"Host": host_of(served), "Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    assert raw(served, "POST", "/v1/chat/completions", chunked, b"0\r\n\r\n")[0] == 411
    assert get_or_post(served, "/v1/models")[0] == 200, "still serving"


def test_a_declared_body_that_never_arrives_is_408_and_stalled_headers_are_closed(served, monkeypatch):
    """A body (or headers) that never comes must not hold a connection (and its memory) forever."""
    monkeypatch.setattr(http_front, "READ_TIMEOUT_SECONDS", 1.0)
    parts = urlsplit(served)
    head = (
        f"POST {parts.path}/v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head.encode() + b'{"messages": [')  # 14 of the 1000 declared bytes, then nothing
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within 1 s" in answer
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(f"GET {parts.path}/v1/models HTTP/1.1\r\nHost: {parts.netloc}\r\nX-Slow: ".encode())
        assert _read_until_closed(sock) == b"", "the server closed the connection whose headers stalled"
    assert get_or_post(served, "/v1/models")[0] == 200, "still serving"


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_deeply_nested_json_is_400_not_500(served):
    headers = {"Host": host_of(served), "Content-Type": "application/json"}
    for depth in (100_000, serve.MAX_JSON_DEPTH + 10):  # past json's own recursion, and past the depth check
        body = ('{"messages": ' + "[" * depth + "]" * depth + "}").encode()
        status, text = raw(served, "POST", "/v1/chat/completions", {**headers, "Content-Length": str(len(body))}, body)
        assert status == 400 and f"nested deeper than {serve.MAX_JSON_DEPTH}" in text, (depth, status, text[:200])
    assert get_or_post(served, "/v1/chat/completions", json.loads(BODY))[0] == 200, "still serving"


def test_a_client_that_leaves_mid_generation_has_its_rows_dropped():
    session = make_session(model_config={"dModel": 64, "layers": 2, "heads": 4, "context": 4096})
    try:
        # A policy that never ends a completion on its own: only max_tokens, or its client leaving, can.
        session.serving_policy.stop_ids = frozenset()
        url = session.serve(parse(ServeParams, {}))["url"]
        batcher = session.server.batcher
        parts = urlsplit(url)
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}).encode()
        head = (
            f"POST {parts.path}/v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(head.encode() + body)
        _wait_for(lambda: batcher.decoding() == 1, "its row to be decoding")
        sock.close()
        _wait_for(lambda: batcher.dropped_rows == 1, "its row to be dropped")
        _wait_for(lambda: batcher.decoding() == 0, "the batch to be empty")
        small = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        status, _, text = get_or_post(url, "/v1/chat/completions", small)
        assert status == 200, text
        assert json.loads(text)["usage"]["completion_tokens"] == 3
    finally:
        session.close()


def _wait_for(check, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
