"""The serving bench's clients (lightning_trainer.serving_clients, run by `npm run bench`): each client sends the
baseline's requests (prompt, seed, max_tokens) one after another on its own connection, the tokens counted are those
the answers report — against the real endpoint, the same number the baseline's batched generate() makes — and a
refused request fails the measurement with the server's answer instead of being counted."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import make_session

from lightning_trainer.bench import direct_tokens, http_tokens_per_second
from lightning_trainer.params import ServeParams
from lightning_trainer.schema import parse
from lightning_trainer.serving_clients import MAX_TOKENS, request, run


@pytest.fixture(scope="module")
def served():
    session = make_session()
    url = session.serve(parse(ServeParams, {}))["url"]
    yield session, url
    session.close()


def test_each_client_sends_the_baselines_requests_in_order_and_counts_what_the_answers_report():
    """Against a recording server that answers each request with its seed + 1 tokens."""
    received = []  # (connection, path, body)

    class Recorder(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.client_address, self.path, body))
            answer = json.dumps({"usage": {"completion_tokens": body["seed"] + 1}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        clients, rounds = 3, 4
        tokens, _ = asyncio.run(run(f"http://127.0.0.1:{server.server_port}/p/key", clients, rounds))
    finally:
        server.shutdown()
    assert tokens == clients * sum(r + 1 for r in range(rounds))
    assert {path for _, path, _ in received} == {"/p/key/v1/chat/completions"}
    by_connection = {}
    for address, _, body in received:
        by_connection.setdefault(address, []).append(body)
    first_prompt = lambda bodies: bodies[0]["messages"][0]["content"]  # noqa: E731
    sent = sorted(by_connection.values(), key=first_prompt)
    expected = [
        [{"messages": request(c, r)[0], "max_tokens": MAX_TOKENS, "seed": request(c, r)[1]} for r in range(rounds)]
        for c in range(clients)
    ]
    expected.sort(key=first_prompt)
    assert sent == expected  # one connection per client, its requests in round order


def test_against_the_endpoint_the_count_is_the_baselines(served):
    session, url = served
    clients, rounds = 4, 2
    tokens, seconds = asyncio.run(run(url, clients, rounds))
    assert tokens == direct_tokens(session, clients, rounds) and seconds > 0
    # The same measurement through a fresh process, as the bench takes it.
    assert http_tokens_per_second(url, clients, rounds) > 0


def test_a_refused_request_fails_the_measurement_naming_the_answer(served):
    _, url = served
    wrong_key = url.rsplit("/", 1)[0] + "/not-the-key"
    with pytest.raises(RuntimeError, match=r"401 .*unknown policy server key"):
        http_tokens_per_second(wrong_key, 2, 1)
