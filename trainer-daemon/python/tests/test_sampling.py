"""The sampler (generate._sample) draws every sampled row of a step together: each row's tokens must still follow its
own temperature- and top-p-shaped distribution whatever the other rows are, a greedy row takes the argmax, a token
top-p cuts is never drawn, and a row's tokens depend on its seed alone (not on the rows beside it)."""

import math

import torch

from lightning_trainer.generate import Row, Sampling, _sample

LOGITS = [2.0, 1.0, 0.5, 0.0, -1.0, -3.0]
SETTINGS = [
    Sampling(max_tokens=1, temperature=1.0),
    Sampling(max_tokens=1, temperature=0.5),
    Sampling(max_tokens=1, temperature=1.0, top_p=0.7),
    Sampling(max_tokens=1, temperature=0.0),
    Sampling(max_tokens=1, temperature=2.0, top_p=0.95),
]


def expected(settings: Sampling) -> list[float]:
    """The distribution a row should be drawn from, computed by hand."""
    if settings.temperature <= 0:
        best = max(range(len(LOGITS)), key=LOGITS.__getitem__)
        return [1.0 if i == best else 0.0 for i in range(len(LOGITS))]
    weights = [math.exp(x / settings.temperature) for x in LOGITS]
    probs = [w / sum(weights) for w in weights]
    if settings.top_p < 1.0:
        kept, mass = set(), 0.0
        for i in sorted(range(len(probs)), key=lambda i: -probs[i]):
            if mass < settings.top_p:
                kept.add(i)
            mass += probs[i]
        total = sum(probs[i] for i in kept)
        probs = [p / total if i in kept else 0.0 for i, p in enumerate(probs)]
    return probs


def draws(settings: list[Sampling], seeds: list[int], steps: int) -> list[list[int]]:
    rows = [Row(s, steps, torch.Generator().manual_seed(seed)) for s, seed in zip(settings, seeds)]
    logits = torch.tensor([LOGITS] * len(rows))
    tokens: list[list[int]] = [[] for _ in rows]
    for _ in range(steps):
        for row_tokens, token in zip(tokens, _sample(logits, rows).tolist()):
            row_tokens.append(token)
    return tokens


def test_each_row_follows_its_own_distribution_in_a_mixed_batch():
    steps = 20_000
    tokens = draws(SETTINGS, list(range(len(SETTINGS))), steps)
    for settings, row in zip(SETTINGS, tokens):
        want = expected(settings)
        for token, p in enumerate(want):
            seen = row.count(token) / steps
            # 5 standard deviations of a frequency over 20,000 draws (at most ~0.018).
            assert abs(seen - p) <= 5 * math.sqrt(max(p * (1 - p), 1e-12) / steps) + 1e-9, (settings, token, seen, p)
            if p == 0.0:
                assert seen == 0.0, f"{settings}: token {token} is outside the distribution but was drawn"


def test_a_row_draws_the_same_tokens_alone_or_beside_others():
    seeded = Sampling(max_tokens=1, temperature=0.9, top_p=0.95, seed=7)
    alone = draws([seeded], [7], 200)[0]
    beside = draws([SETTINGS[0], seeded, SETTINGS[3], SETTINGS[2]], [1, 7, 2, 3], 200)[1]
    assert beside == alone
    assert draws([seeded], [8], 200)[0] != alone, "another seed should draw differently"


def test_the_tokens_are_those_torch_multinomial_draws_row_by_row():
    steps = 300
    batched = draws(SETTINGS, [10, 11, 12, 13, 14], steps)
    for settings, seed, row in zip(SETTINGS, [10, 11, 12, 13, 14], batched):
        if settings.temperature <= 0:
            assert row == [max(range(len(LOGITS)), key=LOGITS.__getitem__)] * steps
            continue
        generator = torch.Generator().manual_seed(seed)
        logits = torch.tensor(LOGITS) / settings.temperature
        probs = logits.softmax(dim=-1)
        if settings.top_p < 1.0:
            ordered, order = probs.sort(descending=True)
            keep = ordered.cumsum(-1) - ordered < settings.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
        alone = [int(torch.multinomial(probs, 1, generator=generator)[0]) for _ in range(steps)]
        assert row == alone, settings
