"""`python3 -m lightning_trainer.bench`: the worker's CPU speed on the tiny model, printed as one JSON object.

* update: one `train` call on 16 transitions × 64 tokens (32 prompt + 32 response), median of 3, next to the
  floor of any update on that batch: one bare forward, policy-gradient loss, backward and AdamW step in plain torch
  on a copy of the same model;
* serving: completion tokens/s through the HTTP endpoint with 1 and 8 concurrent clients, next to the baseline of
  calling the batched generate() directly (no HTTP, no JSON) with batch 1 and 8.
"""
from __future__ import annotations

import copy
import json
import multiprocessing
import os
import statistics
import threading
import time
import urllib.request

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from .generate import Sampling, generate  # noqa: E402
from .params import LoadParams, ServeParams, TrainParams  # noqa: E402
from .schema import parse  # noqa: E402
from .session import Session  # noqa: E402

MAX_TOKENS = 48


def _prompt(i: int) -> list[dict]:
    return [{"role": "user", "content": f"{i} plus {i * 7 % 100}"}]


# The update's batch: 16 transitions of 32 prompt + 32 response tokens, advantages ±1.
TRANSITIONS = [{"promptIds": [256] + [65 + (i + k) % 26 for k in range(31)],
                "responseIds": [97 + (i * k) % 26 for k in range(32)], "logprobs": None,
                "advantage": 1.0 if i % 2 else -1.0} for i in range(16)]


def _median_seconds(step) -> float:
    """Median of 3 timed calls of `step`, after one warm-up call."""
    step()
    times = []
    for _ in range(3):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def update_seconds(session: Session) -> float:
    params = parse(TrainParams, {"transitions": TRANSITIONS, "epochs": 1, "minibatch": 16, "microBatch": 16})
    return _median_seconds(lambda: session.train(params))


def bare_step_seconds(session: Session) -> float:
    """One forward + backward + optimizer step on the same batch, without the worker's machinery."""
    model = copy.deepcopy(session.policy.model).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    prompt = len(TRANSITIONS[0]["promptIds"])
    ids = torch.tensor([t["promptIds"] + t["responseIds"] for t in TRANSITIONS])
    mask = torch.ones_like(ids, dtype=torch.bool)
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    advantages = torch.tensor([t["advantage"] for t in TRANSITIONS])

    def step() -> None:
        logits, _ = model(ids, mask, positions)
        logprobs = torch.log_softmax(logits[:, prompt - 1:-1].float(), dim=-1).gather(-1, ids[:, prompt:, None]).squeeze(-1)
        loss = -(logprobs.mean(dim=1) * advantages).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return _median_seconds(step)


def direct_tokens_per_second(session: Session, batch: int, rounds: int) -> float:
    tokens, started = 0, time.perf_counter()
    for r in range(rounds):
        prompts = [session.policy.render_prompt(_prompt(r * batch + i), None) for i in range(batch)]
        outputs = generate(session.policy, prompts, [Sampling(max_tokens=MAX_TOKENS, seed=i) for i in range(batch)])
        tokens += sum(len(o.ids) for o in outputs)
    return tokens / (time.perf_counter() - started)


def _clients(url: str, clients: int, requests_per_client: int, results: "multiprocessing.Queue") -> None:
    counts = [0] * clients

    def client(c: int) -> None:
        for r in range(requests_per_client):
            body = {"messages": _prompt(c * 1000 + r), "max_tokens": MAX_TOKENS, "seed": r}
            request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request) as response:
                counts[c] += json.load(response)["usage"]["completion_tokens"]

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(sum(counts) / (time.perf_counter() - started))


def http_tokens_per_second(url: str, clients: int, requests_per_client: int) -> float:
    """The clients run in another process, as agents do (in this one they would compete for the GIL)."""
    results = multiprocessing.get_context("fork").Queue()
    process = multiprocessing.get_context("fork").Process(target=_clients,
                                                          args=(url, clients, requests_per_client, results))
    process.start()
    rate = results.get(timeout=600)
    process.join()
    return rate


def main() -> None:
    session = Session(lambda _: None)
    session.load(parse(LoadParams, {"model": {"kind": "tiny"}, "adapter": {"kind": "full"}, "device": "cpu"}))
    result = {"model": session.policy.name, "updateSeconds16x64": update_seconds(session),
              "bareStepSeconds16x64": bare_step_seconds(session)}
    url = session.serve(parse(ServeParams, {}))["url"]
    for clients in (1, 8):
        result[f"directTokensPerSecondBatch{clients}"] = direct_tokens_per_second(session, clients, 48 // clients)
        result[f"httpTokensPerSecondConcurrency{clients}"] = http_tokens_per_second(url, clients, 48 // clients)
    session.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
