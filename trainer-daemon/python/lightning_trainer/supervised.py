"""Supervised updates on demonstrations (`sft`: GRPO's warm start, and `lightning train --algorithm sft`) and their
held-out evaluation (`evaluate`).

A demonstration is a chat prompt and the assistant's reply (text or tool calls); the loss is the cross-entropy of
the reply's tokens as the chat template renders them (terminator included) given the prompt, whose own tokens carry
no loss. `sft` takes `steps` batches drawn with replacement (stopping early at a sampled accuracy if asked), or
`epochs` passes over the examples each in a fresh random order. `evaluate` reports the held-out token-mean loss and
the fraction of examples the policy reproduces token for token when decoding greedily.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Optional

import torch

from .generate import Sampling, generate
from .params import EvaluateParams, SftExample, SftParams
from .policy import Policy
from .schema import BadParams
from .train import Progress, checked_step, sequence_logprobs, set_lr


def rendered(policy: Policy, examples: list[SftExample], path: str) -> tuple[list[list[int]], list[list[int]]]:
    """Each example's prompt and completion token ids; one longer than the model's context is refused by index."""
    prompts = [policy.render_prompt(e.messages, e.tools) for e in examples]
    targets = [policy.render_completion(e.messages, e.tools, e.completion) for e in examples]
    if policy.context is not None:
        for i, (prompt, target) in enumerate(zip(prompts, targets)):
            if len(prompt) + len(target) > policy.context:
                raise BadParams(
                    f"{path}.examples[{i}] is {len(prompt)} prompt + {len(target)} completion tokens, longer than "
                    f"the model's context ({policy.context} tokens): leave it out, or train a model with a longer context"
                )
    return prompts, targets


def sampled_accuracy(policy: Policy, examples: list, samples: int, generator: torch.Generator) -> float:
    """Fraction of examples whose completion, sampled at temperature 1, equals the demonstration exactly."""
    picks = torch.randint(len(examples), (samples,), generator=generator).tolist()
    prompts = [policy.render_prompt(examples[i].messages, examples[i].tools) for i in picks]
    wanted = [policy.render_completion(examples[i].messages, examples[i].tools, examples[i].completion) for i in picks]
    seeds = torch.randint(2**31, (samples,), generator=generator).tolist()
    outputs = generate(policy, prompts, [Sampling(max_tokens=len(w) + 1, seed=s) for w, s in zip(wanted, seeds)])
    return sum(o.ids == w for o, w in zip(outputs, wanted)) / samples


def supervised(
    policy: Policy, optimizer: torch.optim.Optimizer, grad_clip: float, params: SftParams, progress: Progress
) -> dict:
    """Cross-entropy on the completion tokens; stops early once sampled accuracy reaches the threshold."""
    started = time.perf_counter()
    prompts, targets = rendered(policy, params.examples, "params")
    # An sft `lr` holds for this call only: the optimizer's own lr (the RL rate) comes back afterwards.
    saved_lrs = [group["lr"] for group in optimizer.param_groups]
    if params.lr is not None:
        set_lr(optimizer, params.lr)
    try:
        return _supervised_steps(policy, optimizer, grad_clip, params, progress, prompts, targets, started)
    finally:
        for group, lr in zip(optimizer.param_groups, saved_lrs):
            group["lr"] = lr


def _batches(count: int, params: SftParams, generator: torch.Generator) -> Iterator[list[int]]:
    """Example indices per step, drawn lazily so that a sampled-accuracy check in between keeps the random stream."""
    size = min(params.batch_size, count)
    if params.epochs is None:
        for _ in range(params.steps):
            yield torch.randint(count, (size,), generator=generator).tolist()
        return
    for _ in range(params.epochs):
        order = torch.randperm(count, generator=generator).tolist()
        for start in range(0, count, size):
            yield order[start : start + size]


def _supervised_steps(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    grad_clip: float,
    params: SftParams,
    progress: Progress,
    prompts: list,
    targets: list,
    started: float,
) -> dict:
    examples = params.examples
    generator = torch.Generator().manual_seed(params.seed)
    trainable = list(policy.trainable().values())
    until = params.until_sampled_accuracy
    loss, accuracy, steps, loss_sum, tokens = math.nan, None, 0, 0.0, 0
    for steps, picks in enumerate(_batches(len(examples), params, generator), start=1):
        policy.model.train()
        optimizer.zero_grad(set_to_none=True)
        result = sequence_logprobs(policy, [prompts[i] for i in picks], [targets[i] for i in picks])
        nll = -(result.logprobs * result.valid).sum() / result.valid.sum()
        nll.backward()
        loss = float(nll.detach())
        loss_sum += loss
        tokens += int(result.valid.sum())
        checked_step(optimizer, trainable, grad_clip, loss, f"sft step {steps}")
        if until and steps % until.every == 0:
            policy.model.eval()
            accuracy = sampled_accuracy(policy, examples, until.samples, generator)
            progress({"phase": "sft", "step": steps, "loss": loss, "sampledAccuracy": accuracy})
            if accuracy >= until.threshold:
                break
        elif steps % 10 == 0:
            progress({"phase": "sft", "step": steps, "loss": loss})
    policy.model.eval()
    return {
        "loss": loss,
        "meanLoss": loss_sum / max(steps, 1),
        "steps": steps,
        "tokens": tokens,
        "seconds": time.perf_counter() - started,
        "sampledAccuracy": accuracy,
    }


@torch.no_grad()
def evaluate(policy: Policy, params: EvaluateParams) -> dict:
    """Held-out loss (token mean over every example's completion) and greedy exact-match accuracy."""
    started = time.perf_counter()
    prompts, targets = rendered(policy, params.examples, "params")
    policy.model.eval()
    nll, tokens = 0.0, 0
    for start in range(0, len(prompts), params.batch_size):
        rows = slice(start, start + params.batch_size)
        result = sequence_logprobs(policy, prompts[rows], targets[rows])
        nll -= float((result.logprobs * result.valid).sum())
        tokens += int(result.valid.sum())
    count = len(prompts) if params.generate is None else min(params.generate, len(prompts))
    exact = 0
    for start in range(0, count, params.batch_size):
        rows = slice(start, min(start + params.batch_size, count))
        wanted = targets[rows]
        outputs = generate(policy, prompts[rows], [Sampling(max_tokens=len(w), temperature=0.0) for w in wanted])
        exact += sum(o.ids == w for o, w in zip(outputs, wanted))
    accuracy: Optional[float] = exact / count if count else None
    return {
        "loss": nll / max(tokens, 1),
        "tokens": tokens,
        "examples": len(prompts),
        "generated": count,
        "exact": exact,
        "accuracy": accuracy,
        "seconds": time.perf_counter() - started,
    }
