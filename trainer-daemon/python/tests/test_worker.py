"""The worker protocol over a real subprocess: ready line, responses, typed errors with tracebacks, shutdown."""

import json
import subprocess
import sys

import pytest
from conftest import TINY, http, worker_env


class Worker:
    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lightning_trainer.worker"],
            env=worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.next_id = 0

    def line(self) -> dict:
        raw = self.process.stdout.readline()
        assert raw, f"worker exited: {self.process.stderr.read()}"
        return json.loads(raw)

    def call(self, method: str, params=None) -> dict:
        self.next_id += 1
        self.process.stdin.write(
            json.dumps({"type": "request", "id": self.next_id, "method": method, "params": params or {}}) + "\n"
        )
        while True:
            message = self.line()
            if message["type"] == "response":
                assert message["id"] == self.next_id
                return message

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def worker():
    w = Worker()
    yield w
    w.close()


def test_ready_line_describes_the_environment(worker):
    ready = worker.line()
    assert ready["type"] == "ready" and ready["protocol"] == 1
    assert ready["torch"] and ready["device"] in ("cpu", "cuda") and ready["python"].startswith("3.")
    assert "transformers" in ready and "peft" in ready


def test_methods_errors_and_shutdown(worker, tmp_path):
    worker.line()
    state = worker.call("train", {"transitions": [{"promptIds": [1], "responseIds": [2], "advantage": 1}]})
    assert state["error"]["kind"] == "state" and "load" in state["error"]["message"]

    bad = worker.call("load", {"model": {"kind": "tiny"}, "adapter": {"kind": "lora", "rank": -1}})
    assert bad["error"] == {"kind": "bad_params", "message": "params.adapter.rank must be > 0"}
    unknown = worker.call("fly")
    assert unknown["error"]["kind"] == "bad_params" and "fly" in unknown["error"]["message"]

    loaded = worker.call("load", {"model": TINY, "adapter": {"kind": "full"}, "seed": 3})
    assert loaded["result"]["parameters"] > 0 and loaded["result"]["step"] == 0

    # A crash inside a method (token ids outside the vocabulary) is reported with its traceback; the worker lives on.
    crash = worker.call("train", {"transitions": [{"promptIds": [1], "responseIds": [99999], "advantage": 1}]})
    assert crash["error"]["kind"] == "runtime" and "outside the vocabulary" in crash["error"]["message"]
    assert "Traceback (most recent call last)" in crash["error"]["traceback"]
    assert "policy_update" in crash["error"]["traceback"]
    missing = worker.call("load", {"checkpoint": str(tmp_path / "nowhere")})
    assert missing["error"]["kind"] == "runtime" and "not a checkpoint" in missing["error"]["message"]

    tokens = worker.call("tokenize", {"messages": [{"role": "user", "content": "hi"}]})["result"]
    assert tokens["text"] == "Q:hi\n" and len(tokens["ids"]) == 6

    # progress events arrive before the response
    worker.next_id += 1
    worker.process.stdin.write(
        json.dumps(
            {
                "type": "request",
                "id": worker.next_id,
                "method": "train",
                "params": {
                    "transitions": [
                        {"promptIds": tokens["ids"], "responseIds": [65, 10], "advantage": 1.0, "logprobs": None}
                    ],
                    "epochs": 2,
                },
            }
        )
        + "\n"
    )
    events = []
    while (message := worker.line())["type"] == "event":
        events.append(message)
    assert [e["data"]["epoch"] for e in events] == [0, 1] and message["result"]["step"] == 1

    url = worker.call("serve", {})["result"]["url"]
    status, _, text = http(
        url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    )
    assert status == 200 and json.loads(text)["usage"]["completion_tokens"] <= 3

    saved = worker.call("save", {"dir": str(tmp_path / "ckpt")})["result"]
    assert saved["path"] == str(tmp_path / "ckpt") and saved["bytes"] > 0

    assert worker.call("shutdown") == {"type": "response", "id": worker.next_id, "result": {}}
    assert worker.process.wait(timeout=30) == 0


def test_malformed_lines_are_answered_and_closing_stdin_ends_the_worker(worker):
    worker.line()
    worker.process.stdin.write("not json\n")
    assert worker.line()["error"]["kind"] == "bad_params"
    worker.process.stdin.write(json.dumps({"type": "request", "id": "x", "method": "load"}) + "\n")
    assert worker.line()["error"]["kind"] == "bad_params"
    worker.process.stdin.close()
    assert worker.process.wait(timeout=30) == 0


def test_out_of_memory_is_told_by_the_exception_type_not_its_message():
    import torch

    from lightning_trainer.worker import error_kind

    assert error_kind(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "oom"
    assert error_kind(MemoryError()) == "oom"
    # A message that merely mentions memory is a runtime error: only the allocators' types say "oom".
    assert error_kind(RuntimeError("the tokenizer ran out of memory-mapped vocabulary")) == "runtime"
    assert error_kind(ValueError("out of memory")) == "runtime"
