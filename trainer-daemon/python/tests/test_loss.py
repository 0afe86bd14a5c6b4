"""The clipped policy-gradient loss, KL estimator and aggregation against hand-computed values."""
import math

import torch

from lightning_trainer.train import aggregate, clipped_pg, k3_kl


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
    # token-mean over the 5 masked tokens: (-2.0 - 2.4 + 1.1 + 0.8 + 1.3) / 5 = -0.24
    assert math.isclose(float(aggregate(loss, mask, "token-mean", tokens=5, sequences=2)), -0.24, abs_tol=1e-5)
    # seq-mean: ((-2.0 - 2.4) / 2 + (1.1 + 0.8 + 1.3) / 3) / 2 = (-2.2 + 1.0666…) / 2
    assert math.isclose(float(aggregate(loss, mask, "seq-mean", tokens=5, sequences=2)), (-2.2 + 3.2 / 3) / 2,
                        abs_tol=1e-5)


def test_k3_kl_is_zero_at_the_reference_and_matches_formula():
    logp = torch.log(torch.tensor([0.2, 0.5]))
    reference = torch.log(torch.tensor([0.4, 0.5]))
    kl = k3_kl(logp, reference)
    # ratio ref/p = 2 → 2 - ln 2 - 1; equal → 0
    assert math.isclose(float(kl[0]), 2 - math.log(2) - 1, abs_tol=1e-6)
    assert float(kl[1]) == 0.0
