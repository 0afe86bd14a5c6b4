"""Continuous batching (generate.Decoder): rows that join a running batch at different steps and leave when they
finish get exactly the tokens (and, within 1e-5, the logprobs) they get decoded alone — for the tiny policy and
for tiny Hugging Face Qwen2 / Llama models with LoRA, whose KV cache is a transformers Cache object."""

import pytest
import torch
from conftest import hf_model_dir, make_session

from lightning_trainer.generate import Decoder, Sampling, generate
from lightning_trainer.params import LoadParams
from lightning_trainer.schema import parse
from lightning_trainer.session import Session

QUESTIONS = [
    "hi",
    "what is 3 plus 4",
    "2 plus 3",
    "tools",
    "a longer question than the others, with more words",
    "x",
    "assistant",
    "what",
]


def scrambled(policy) -> None:
    """Random weights at their usual small scale give near-uniform logits that mostly repeat the last token, where
    float rounding could flip an argmax: every matrix (adapters too) drawn at std 1/sqrt(fan-in) gives varied,
    well-separated greedy tokens without changing any code path."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in policy.model.parameters():
            if parameter.dim() == 2:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / parameter.shape[-1] ** 0.5)


def cases(policy) -> tuple[list[list[int]], list[Sampling]]:
    prompts = [policy.render_prompt([{"role": "user", "content": q}], None) for q in QUESTIONS]
    settings = [Sampling(max_tokens=4 + 5 * (i % 4), temperature=0.0) for i in range(len(prompts))]
    settings[2] = Sampling(max_tokens=12, temperature=1.0, seed=5)  # seeded sampling: the row's own generator
    settings[3] = Sampling(max_tokens=16, temperature=0.0, top_logprobs=3)
    settings[5] = Sampling(max_tokens=20, temperature=0.8, top_p=0.9, seed=11)
    return prompts, settings


def staggered(policy, prompts, settings, joins: list[int]):
    """Decode with row i joining the running batch before step joins[i] (several may join at once)."""
    decoder, results, step, sizes = Decoder(policy), [None] * len(prompts), 0, []
    while any(r is None for r in results) or decoder.rows:
        now = [i for i, j in enumerate(joins) if j == step]
        if now:
            for i, row in zip(now, decoder.add([prompts[i] for i in now], [settings[i] for i in now])):
                results[i] = row.result
        if decoder.rows:
            sizes.append(len(decoder.rows))
            decoder.step()
        step += 1
    return results, sizes


def assert_same_as_alone(policy, prompts, settings, joins):
    alone = [generate(policy, [p], [s])[0] for p, s in zip(prompts, settings)]
    batched, sizes = staggered(policy, prompts, settings, joins)
    assert max(sizes) >= 4 and len(set(sizes)) > 2, f"rows did not join and leave: batch sizes {sizes}"
    for i, (a, b) in enumerate(zip(alone, batched)):
        assert b.ids == a.ids, f"row {i}: {b.ids} batched vs {a.ids} alone"
        assert b.finish_reason == a.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5, i
        assert [[t for t, _ in top] for top in b.top] == [[t for t, _ in top] for top in a.top]
    # generate() (all rows at once, finished rows leaving) agrees too.
    together = generate(policy, prompts, settings)
    assert [g.ids for g in together] == [a.ids for a in alone]


def test_tiny_rows_joining_and_leaving_decode_as_alone():
    session = make_session()
    try:
        scrambled(session.policy)
        prompts, settings = cases(session.policy)
        assert_same_as_alone(session.policy, prompts, settings, [0, 0, 0, 2, 3, 3, 7, 15])
    finally:
        session.close()


def test_stop_strings_end_rows_early_in_a_batch():
    session = make_session()
    try:
        scrambled(session.policy)
        prompts, settings = cases(session.policy)
        text = session.policy.decode(
            generate(session.policy, [prompts[0]], [Sampling(max_tokens=10, temperature=0.0)])[0].ids
        )
        stop = text[3:5]  # a stop string the greedy completion meets after a few tokens
        settings[0] = Sampling(max_tokens=10, temperature=0.0, stop=[stop])
        alone = generate(session.policy, [prompts[0]], [settings[0]])[0]
        assert alone.finish_reason == "stop" and alone.stop_text is not None and stop not in alone.stop_text
        assert alone.stop_string == stop, "which stop string ended it (the answer's stop_reason)"
        batched, _ = staggered(session.policy, prompts, settings, [1, 0, 0, 0, 0, 0, 0, 0])
        assert batched[0].ids == alone.ids and batched[0].stop_text == alone.stop_text
        assert batched[0].stop_string == stop
    finally:
        session.close()


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_hf_lora_rows_joining_and_leaving_decode_as_alone(tmp_path, arch):
    session = Session(lambda message: None)
    folder = hf_model_dir(tmp_path / arch, arch)
    session.load(
        parse(
            LoadParams,
            {
                "model": {"kind": "hf", "name": folder, "fromConfig": True},
                "adapter": {"kind": "lora", "rank": 4},
                "device": "cpu",
            },
        )
    )
    policy = session.policy
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # adapters that change the output (B starts at zero), and a sharper output layer (see
        for name, parameter in policy.model.named_parameters():  # scrambled(): untied, it need not be redrawn)
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
        policy.model.get_output_embeddings().weight.mul_(30)
    prompts, settings = cases(policy)
    assert_same_as_alone(policy, prompts, settings, [0, 0, 1, 1, 4, 4, 6, 13])
