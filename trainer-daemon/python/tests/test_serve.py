"""The OpenAI-compatible endpoint over real HTTP: exact token ids, logprobs, tool calls, streaming, batching."""

import json
import threading
import time

import pytest
import torch
from conftest import http, make_session

from lightning_trainer.params import ServeParams, SftParams
from lightning_trainer.schema import parse
from lightning_trainer.train import sequence_logprobs

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ADD",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]
QUESTION = [{"role": "user", "content": "2 plus 3"}]
CALL = {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ADD", "arguments": '{"a": 2, "b": 3}'}}]}
AFTER_CALL = QUESTION + [{"role": "assistant", **CALL}, {"role": "tool", "tool_call_id": "c1", "content": "5"}]


@pytest.fixture(scope="module")
def served():
    """A tiny policy taught (by SFT) to call ADD(2,3) and then answer 5, served on a real port."""
    session = make_session(optimizer={"lr": 3e-3})
    examples = [
        {"messages": QUESTION, "tools": TOOLS, "completion": CALL},
        {"messages": AFTER_CALL, "tools": TOOLS, "completion": {"content": "5"}},
    ]
    result = session.sft(
        parse(
            SftParams,
            {
                "examples": examples,
                "steps": 400,
                "batchSize": 2,
                "untilSampledAccuracy": {"threshold": 1.0, "every": 10, "samples": 16},
            },
        )
    )
    assert result["sampledAccuracy"] == 1.0, result
    url = session.serve(parse(ServeParams, {"maxBatch": 16}))["url"]
    yield session, url
    session.close()


def chat(url, **body):
    status, headers, text = http(url, "/v1/chat/completions", {"messages": QUESTION, "tools": TOOLS, **body})
    assert status == 200, text
    return json.loads(text), headers


def recomputed(session, prompt_ids, token_ids):
    result = sequence_logprobs(session.policy, [prompt_ids], [token_ids])
    return result.logprobs[0, -len(token_ids) :].tolist()


def test_tool_call_with_token_ids_and_logprobs(served):
    session, url = served
    response, _ = chat(url, temperature=0, logprobs=True, return_token_ids=True)
    choice = response["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "ADD" and json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    ids = choice["token_ids"]
    assert (
        session.policy.decode(ids) == "ADD(2,3)\n"
    )  # the ids are exactly what the model generated, "\n" ends the turn
    assert response["prompt_token_ids"] == session.policy.render_prompt(QUESTION, TOOLS)
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert [entry["token"] for entry in choice["logprobs"]["content"]] == list("ADD(2,3)\n")
    assert max(abs(a - b) for a, b in zip(logprobs, recomputed(session, response["prompt_token_ids"], ids))) < 1e-5
    assert response["usage"] == {
        "prompt_tokens": len(response["prompt_token_ids"]),
        "completion_tokens": len(ids),
        "total_tokens": len(response["prompt_token_ids"]) + len(ids),
    }


def test_content_reply_re_decodes_and_the_next_prompt_extends_the_previous_call(served):
    session, url = served
    first, _ = chat(url, temperature=0, return_token_ids=True)
    second, _ = chat(url, messages=AFTER_CALL, temperature=0, return_token_ids=True)
    choice = second["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "5"}
    assert session.policy.decode(choice["token_ids"][:-1]) == choice["message"]["content"]
    prefix = first["prompt_token_ids"] + first["choices"][0]["token_ids"]
    assert second["prompt_token_ids"][: len(prefix)] == prefix  # LightningRL can join the two calls


def test_sampled_choices_have_unique_ids_and_matching_logprobs(served):
    session, url = served
    response, _ = chat(url, temperature=1.0, n=4, seed=7, max_tokens=6, logprobs=True, return_token_ids=True)
    again, _ = chat(url, temperature=1.0, n=4, seed=7, max_tokens=6, return_token_ids=True)
    assert response["id"] != again["id"]
    assert [c["token_ids"] for c in response["choices"]] == [c["token_ids"] for c in again["choices"]]  # seeded
    for choice in response["choices"]:
        ids = choice["token_ids"]
        logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
        assert len(ids) <= 6
        assert max(abs(a - b) for a, b in zip(logprobs, recomputed(session, response["prompt_token_ids"], ids))) < 1e-5


def test_streaming_sends_the_same_completion_as_chunks(served):
    _, url = served
    status, headers, text = http(
        url,
        "/v1/chat/completions",
        {
            "messages": AFTER_CALL,
            "tools": TOOLS,
            "temperature": 0,
            "stream": True,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    events = [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "5"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 2 and len({c["id"] for c in chunks}) == 1
    _, _, text = http(
        url, "/v1/chat/completions", {"messages": QUESTION, "tools": TOOLS, "temperature": 0, "stream": True}
    )
    chunks = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
    calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert calls and calls[0][0]["function"]["name"] == "ADD" and calls[0][0]["index"] == 0
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_call_cut_at_max_tokens_says_length(served):
    """The model's call is 9 tokens ("ADD(2,3)\\n"): at 8 it parses, but the answer was cut, and finish_reason says so,
    JSON and streamed ("length", not "tool_calls": the agent and the record see a cut answer, not a whole call)."""
    _, url = served
    response, _ = chat(url, temperature=0, max_tokens=8)
    choice = response["choices"][0]
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "ADD", choice
    assert choice["finish_reason"] == "length"
    _, _, text = http(
        url,
        "/v1/chat/completions",
        {"messages": QUESTION, "tools": TOOLS, "temperature": 0, "max_tokens": 8, "stream": True},
    )
    chunks = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
    assert any("tool_calls" in c["choices"][0]["delta"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_a_streamed_text_completion_is_the_same_answer_as_events(served):
    """`/v1/completions` with `stream: true` (the OpenAI SDKs' `completions.create(stream=True)`): events, not JSON."""
    _, url = served
    body = {"prompt": "2 plus 3", "temperature": 0, "max_tokens": 4, "logprobs": 0, "return_token_ids": True}
    status, _, text = http(url, "/v1/completions", body)
    assert status == 200, text
    whole = json.loads(text)
    assert whole["choices"][0]["logprobs"]["token_logprobs"], "logprobs: 0 asks for the sampled tokens' logprobs"
    status, headers, text = http(
        url, "/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert status == 200 and headers["Content-Type"] == "text/event-stream", text
    events = [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    streamed = [c["choices"][0] for c in chunks if c["choices"]]
    assert "".join(c["text"] for c in streamed) == whole["choices"][0]["text"]
    assert streamed[-1]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert streamed[0]["token_ids"] == whole["choices"][0]["token_ids"]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert chunks[-1]["usage"] == whole["usage"]


def test_a_stop_string_that_ends_the_answer_is_named_in_stop_reason(served):
    _, url = served
    answer, _ = chat(url, messages=AFTER_CALL, temperature=0, stop=["5", "never"])
    choice = answer["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"], choice["stop_reason"]) == ("", "stop", "5")
    answer, _ = chat(url, messages=AFTER_CALL, temperature=0)
    assert "stop_reason" not in answer["choices"][0], "the model's own end: no stop string named"
    body = {"messages": AFTER_CALL, "tools": TOOLS, "temperature": 0, "stop": ["5"], "stream": True}
    _, _, text = http(url, "/v1/chat/completions", body)
    chunks = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
    assert chunks[-1]["choices"][0]["stop_reason"] == "5", "the stream's last chunk names it too"


def test_concurrent_requests_are_batched(served):
    _, url = served
    sizes, errors = [], []

    def one():
        try:
            _, headers = chat(url, max_tokens=30, temperature=1.0)
            sizes.append(int(headers["X-Lightning-Batch-Size"]))
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(sizes) == 8
    assert max(sizes) > 1, f"every request ran alone: batch sizes {sizes}"


def test_bad_requests_get_a_400_naming_the_parameter(served):
    _, url = served
    for body, param in [
        ({"messages": []}, "messages"),
        ({"messages": QUESTION, "temperature": 5}, "temperature"),
        ({"messages": QUESTION, "max_tokens": 0}, "max_tokens"),
        ({"messages": QUESTION, "stop": 3}, "stop"),
        ({"messages": QUESTION, "stop": ["s"] * 17}, "stop"),
        ({"messages": [{"role": "user", "content": "x" * 500}]}, "messages"),
    ]:
        status, _, text = http(url, "/v1/chat/completions", body)
        assert status == 400, body
        assert json.loads(text)["error"]["param"] == param
    # Gemini allows 5 stop sequences (and a translated call keeps them): more than OpenAI's 4 are taken.
    status, _, text = http(url, "/v1/chat/completions", {"messages": QUESTION, "stop": list("vwxyz"), "max_tokens": 2})
    assert status == 200, text
    status, _, text = http(url, "/v1/models")
    assert status == 200 and json.loads(text)["data"][0]["id"].startswith("tiny")


def test_generation_after_an_update_uses_the_new_weights(served):
    session, url = served
    before, _ = chat(url, temperature=0, logprobs=True, return_token_ids=True)
    saved = {n: p.detach().clone() for n, p in session.policy.model.named_parameters()}
    with torch.no_grad():
        session.policy.model.ln_f.weight.mul_(0.5)
    after, _ = chat(url, temperature=0, logprobs=True, return_token_ids=True)
    with torch.no_grad():
        for n, p in session.policy.model.named_parameters():
            p.copy_(saved[n])
    assert before["choices"][0]["logprobs"] != after["choices"][0]["logprobs"]


def test_non_finite_logits_answer_a_500_naming_the_cause_and_the_server_keeps_serving(served):
    session, url = served
    weight = session.policy.model.ln_f.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.fill_(float("nan"))
    try:
        status, _, text = http(url, "/v1/chat/completions", {"messages": QUESTION, "max_tokens": 4})
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert status == 500, text
    assert "non-finite logits" in json.loads(text)["error"]["message"]
    chat(url, max_tokens=4)


def test_the_greedy_prefix_serves_the_same_routes_at_temperature_0_whatever_the_request_asks():
    session = make_session()  # untrained: sampling at temperature 2 is close to uniform over the bytes
    try:
        url = session.serve(parse(ServeParams, {"maxBatch": 16}))["url"]
        assert http(url, "/greedy/v1/models")[0] == 200
        body = {
            "messages": QUESTION,
            "tools": TOOLS,
            "temperature": 2.0,
            "n": 4,
            "seed": 3,
            "max_tokens": 8,
            "return_token_ids": True,
        }
        texts = {}
        for prefix in ("", "/greedy"):
            status, _, text = http(url, prefix + "/v1/chat/completions", body)
            assert status == 200, text
            texts[prefix] = [c["token_ids"] for c in json.loads(text)["choices"]]
        status, _, text = http(url, "/v1/chat/completions", {**body, "temperature": 0, "n": 1})
        argmax = json.loads(text)["choices"][0]["token_ids"]
        assert len({tuple(ids) for ids in texts[""]}) > 1, "sampled choices differ"
        assert texts["/greedy"] == [argmax] * 4
    finally:
        session.close()


def test_requests_served_concurrently_get_the_tokens_and_logprobs_they_get_one_at_a_time():
    """Continuous batching keeps each request's own decoding: 16 greedy and seeded requests with different prompts,
    max_tokens and stop strings, sent together (some a little later, joining the running batch), get the token
    ids one at a time gives, and logprobs within 1e-5."""
    from test_batching import scrambled

    session = make_session()
    try:
        scrambled(session.policy)
        url = session.serve(parse(ServeParams, {"maxBatch": 16}))["url"]
        bodies = [
            {
                "messages": [{"role": "user", "content": f"question {i} " + "x" * (i * 3)}],
                "max_tokens": 3 + (i * 7) % 20,
                "temperature": 0.0 if i % 3 else 0.9,
                "seed": i,
                "logprobs": True,
                "return_token_ids": True,
            }
            for i in range(16)
        ]

        def send(body):
            status, headers, text = http(url, "/v1/chat/completions", body)
            assert status == 200, text
            choice = json.loads(text)["choices"][0]
            return (
                choice["token_ids"],
                [e["logprob"] for e in choice["logprobs"]["content"]],
                choice["finish_reason"],
                int(headers["X-Lightning-Batch-Size"]),
            )

        text = session.policy.decode(send(bodies[4])[0])
        bodies[4]["stop"] = [text[3:5]]  # a stop string the greedy completion meets: the row ends early
        alone = [send(body) for body in bodies]
        assert alone[4][2] == "stop" and len(alone[4][0]) < len(text)
        together, errors = [None] * len(bodies), []
        # The first 12 set off together (on a loaded machine, threads started one by one reach the server spread out).
        start = threading.Barrier(12)

        def one(i):
            try:
                if i < 12:
                    start.wait()
                else:  # these arrive while the first ones are being decoded
                    threading.Event().wait(0.02 * (i - 11))
                together[i] = send(bodies[i])
            except Exception as error:  # surfaced below
                errors.append(error)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        # Batched (how many share a batch depends on the machine's load; the results must not).
        assert max(t[3] for t in together) > 1, f"the requests were not batched: {[t[3] for t in together]}"
        for i, (a, b) in enumerate(zip(alone, together)):
            assert b[0] == a[0] and b[2] == a[2], f"request {i}: {b[0]} concurrently vs {a[0]} alone"
            assert max(abs(x - y) for x, y in zip(a[1], b[1])) < 1e-5, i
    finally:
        session.close()


def until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_an_update_gets_the_lock_while_requests_keep_coming_and_never_lands_inside_a_completion():
    """The engine holds the session lock while rows are decoded; an update waiting for it stops new requests
    joining, gets it once the rows in flight finish, and the requests queued meanwhile go on after it."""
    session = make_session()
    try:
        url = session.serve(parse(ServeParams, {"maxBatch": 4}))["url"]
        stop, errors, answered = threading.Event(), [], []

        def client():
            while not stop.is_set():
                try:
                    status, _, text = http(url, "/v1/chat/completions", {"messages": QUESTION, "max_tokens": 40})
                    assert status == 200, text
                    answered.append(1)
                except Exception as error:  # surfaced below
                    errors.append(error)
                    return

        threads = [threading.Thread(target=client) for _ in range(8)]  # twice maxBatch: some always queue
        for t in threads:
            t.start()
        assert until(lambda: answered or errors) and not errors, errors or "the clients got no answer"
        assert session.lock.acquire(timeout=20), "the update never got the lock: requests kept it busy"
        try:
            assert not session.server.batcher.decoding(), "a completion was being decoded while the update ran"
            before = len(answered)
            threading.Event().wait(0.3)
            assert session.server.batcher.decoding() == 0 and len(answered) <= before + 4
        finally:
            session.lock.release()
        assert until(lambda: len(answered) > before + 4), "serving did not go on after the update"
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors
    finally:
        session.close()
