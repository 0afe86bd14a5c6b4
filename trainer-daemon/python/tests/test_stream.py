"""Streamed chat completions over real HTTP: tokens sent as they are decoded, and, joined, exactly the non-streamed
response (token ids, logprobs, content up to a stop string, finish reason)."""

import json
import urllib.parse
from http.client import HTTPConnection

import pytest
from conftest import http, make_session

from lightning_trainer.params import ServeParams
from lightning_trainer.schema import parse

QUESTION = [{"role": "user", "content": "tell me a long story"}]
LONG = 600  # tokens: long enough that the first ones reach the client while the rest are being decoded


@pytest.fixture(scope="module")
def served():
    """The tiny model with a context long enough for LONG tokens, served on a real port."""
    session = make_session(model_config={"dModel": 64, "layers": 2, "heads": 4, "context": 1024})
    url = session.serve(parse(ServeParams, {}))["url"]
    yield session, url
    session.close()


def stream(url: str, body: dict, on_event=None) -> list[dict]:
    """The stream's JSON events, read one by one as they arrive; `on_event(event)` is called on each."""
    parts = urllib.parse.urlsplit(url)
    connection = HTTPConnection(parts.hostname, parts.port, timeout=120)
    connection.request(
        "POST",
        parts.path + "/v1/chat/completions",
        json.dumps({**body, "stream": True}),
        {"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    assert response.status == 200 and response.headers["Content-Type"] == "text/event-stream"
    events = []
    for line in response:
        if not line.startswith(b"data: "):
            continue
        data = line[len(b"data: ") :].strip()
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if on_event:
            on_event(event)
        events.append(event)
    connection.close()
    return events


def joined(events: list[dict]) -> dict:
    """The stream's choice 0 put back together, as the daemon's capture does."""
    choices = [e["choices"][0] for e in events if e["choices"]]
    return {
        "content": "".join(c["delta"].get("content") or "" for c in choices),
        "token_ids": [t for c in choices for t in c.get("token_ids", [])],
        "logprobs": [entry["logprob"] for c in choices for entry in (c.get("logprobs") or {}).get("content", [])],
        "finish_reason": [c["finish_reason"] for c in choices if c["finish_reason"]][-1],
    }


def complete(url: str, body: dict) -> dict:
    status, _, text = http(url, "/v1/chat/completions", body)
    assert status == 200, text
    choice = json.loads(text)["choices"][0]
    return {
        "content": choice["message"]["content"] or "",
        "token_ids": choice["token_ids"],
        "logprobs": [entry["logprob"] for entry in choice["logprobs"]["content"]],
        "finish_reason": choice["finish_reason"],
    }


def test_tokens_are_streamed_while_the_completion_is_still_being_decoded(served):
    session, url = served
    body = {"messages": QUESTION, "max_tokens": LONG, "temperature": 0, "logprobs": True, "return_token_ids": True}
    decoding_at_first_token = []

    def on_event(event):
        choices = event["choices"]
        if not decoding_at_first_token and choices and choices[0].get("token_ids"):
            decoding_at_first_token.append(session.server.batcher.decoding())

    events = stream(url, body, on_event)
    token_events = [e for e in events if e["choices"] and e["choices"][0].get("token_ids")]
    streamed, whole = joined(events), complete(url, body)
    assert len(whole["token_ids"]) == LONG, "the greedy completion stopped early: the test needs a long one"
    # The first tokens reached the client while its row was still in the engine's batch, and they came in many
    # events, not one at the end.
    assert decoding_at_first_token == [1]
    assert len(token_events) > 10
    assert streamed == whole  # same ids, logprobs (same batch of one, same arithmetic), text and finish reason
    assert len({e["id"] for e in events}) == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_text_holds_back_stop_strings_and_partial_characters(served, seed):
    """Sampled byte-level text (often invalid UTF-8, so with replacement characters) cut at a stop string taken
    from its middle: joined, the stream is the non-streamed answer."""
    _, url = served
    body = {"messages": QUESTION, "max_tokens": 80, "temperature": 1.0, "seed": seed, "return_token_ids": True}
    free = complete(url, {**body, "logprobs": True})["content"]
    stop = free[len(free) // 2 : len(free) // 2 + 2]
    assert len(stop) == 2, free
    body = {**body, "stop": [stop], "logprobs": True}
    streamed, whole = joined(stream(url, body)), complete(url, body)
    assert streamed == whole
    assert whole["content"] == free[: free.index(stop)] and whole["finish_reason"] == "stop"


def test_the_tiny_policy_streams_text_once_it_cannot_be_a_tool_call(served):
    tools = [{"type": "function", "function": {"name": "ADD", "parameters": {"type": "object", "properties": {}}}}]
    policy = served[0].policy
    for text in ["ADD()", "5 is the answer", "ADD(2,3", "  ADDx and more", "AD"]:
        content, _ = policy.parse_output(text, tools)
        for cut in range(len(text) + 1):
            sent = text[:cut][: policy.certain_content(text[:cut], tools)]
            assert (content or "").startswith(sent), (text, cut, sent)
    assert policy.certain_content("5 is", tools) == 4 and policy.certain_content("ADD(2", tools) == 0
