"""The clipped policy-gradient loss, KL estimator and aggregation against hand-computed values."""

import math

import torch

from lightning_trainer.train import Totals, aggregate, clipped_pg, k3_kl


def test_clipped_pg_matches_hand_computation():
    behaviour = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]))
    # ratios: 1.0, 1.5, 0.6 for the first row; 1.1, 0.7, 1.3 for the second
    current = behaviour + torch.log(torch.tensor([[1.0, 1.5, 0.6], [1.1, 0.7, 1.3]]))
    advantages = torch.tensor([2.0, -1.0])
    loss, ratio, clipped = clipped_pg(current, behaviour, advantages, clip=0.2)
    # A=+2: -min(r·2, clip(r)·2) → -2.0, -min(3.0, 2.4) = -2.4, -min(1.2, 1.6) = -1.2
    # A=-1: -min(-1.1, -1.1) = 1.1, -min(-0.7, -0.8) = 0.8, -min(-1.3, -1.2) = 1.3
    expected = torch.tensor([[-2.0, -2.4, -1.2], [1.1, 0.8, 1.3]])
    assert torch.allclose(loss, expected, atol=1e-5)
    assert torch.allclose(ratio, torch.tensor([[1.0, 1.5, 0.6], [1.1, 0.7, 1.3]]), atol=1e-6)
    assert clipped.tolist() == [[False, True, False], [False, True, False]]

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    totals = Totals(tokens=5, micro_batches=2, max_length=4)
    # dapo: token sum over the minibatch's 5 masked tokens: (-2.0 - 2.4 + 1.1 + 0.8 + 1.3) / 5 = -0.24
    assert math.isclose(float(aggregate(loss, mask, "dapo", totals)), -0.24, abs_tol=1e-5)
    # grpo: ((-2.0 - 2.4) / 2 + (1.1 + 0.8 + 1.3) / 3) / 2 sequences, / 2 micro-batches
    assert math.isclose(float(aggregate(loss, mask, "grpo", totals)), (-2.2 + 3.2 / 3) / 2 / 2, abs_tol=1e-5)
    # dr_grpo: token sum / (2 sequences × 4), / 2 micro-batches
    assert math.isclose(float(aggregate(loss, mask, "dr_grpo", totals)), -1.2 / 8 / 2, abs_tol=1e-6)
    # bnpo: this micro-batch's token mean (5 tokens) / 2 micro-batches
    assert math.isclose(float(aggregate(loss, mask, "bnpo", totals)), -0.24 / 2, abs_tol=1e-6)


def test_clip_higher_widens_only_the_upper_bound():
    behaviour = torch.zeros((1, 2))
    current = torch.log(torch.tensor([[1.25, 0.75]]))
    loss, _, clipped = clipped_pg(current, behaviour, torch.tensor([1.0]), clip=0.2, clip_high=0.28)
    # ratio 1.25 < 1.28 is not clipped for A > 0; ratio 0.75 < 0.8: min(0.75, 0.8) = 0.75, the unclipped branch
    assert torch.allclose(loss, torch.tensor([[-1.25, -0.75]]), atol=1e-6)
    assert clipped.tolist() == [[False, False]]
    loss, _, clipped = clipped_pg(current, behaviour, torch.tensor([1.0]), clip=0.2)
    assert torch.allclose(loss, torch.tensor([[-1.2, -0.75]]), atol=1e-6) and clipped.tolist() == [[True, False]]


def test_k3_kl_is_zero_at_the_reference_and_matches_formula():
    logp = torch.log(torch.tensor([0.2, 0.5]))
    reference = torch.log(torch.tensor([0.4, 0.5]))
    kl = k3_kl(logp, reference)
    # ratio ref/p = 2 → 2 - ln 2 - 1; equal → 0
    assert math.isclose(float(kl[0]), 2 - math.log(2) - 1, abs_tol=1e-6)
    assert float(kl[1]) == 0.0
