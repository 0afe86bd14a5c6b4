"""GRPO's pipeline against TRL's GRPOTrainer, from rewards to gradients (run by test/integration/trlPipeline.test.ts).

stdin: one JSON object from the daemon's own code: `rewards` (one per rollout, groups of `numGenerations` in a row,
as TRL lays a batch out), `rows` (each rollout's promptIds/responseIds/mask: prompts of different lengths) and
`cases`, each a worker `train` request that training/grpo.ts builds from them under some config (its advantages,
the rows it keeps). stdout: one JSON object comparing the two sides for each case.

* Advantages: TRL's own code computes them from the rewards — the statements of
  `GRPOTrainer._generate_and_score_completions` from the reward aggregation to `nan_to_num`, read from the installed
  trl and run unchanged on the rewards (the rest of that method generates, which this comparison does not need).
* Kept rows and normaliser: TRL trains on every row of the batch (a zero advantage too) with `num_items_in_batch`
  the batch's loss-mask sum; ours on the rows the daemon sent, normalised by the worker.
* Loss and gradients: `GRPOTrainer._compute_loss` on each micro-batch (left-padded prompts, as TRL pads them) with
  the harness of test_trl_parity.py, against `policy_update` on a LoRA Qwen2 built from a config (SGD at lr 0: the
  parameters' .grad afterwards is the update's gradient).
"""

import inspect
import json
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace

import torch
from conftest import hf_model_dir
from test_trl_parity import _lora_off_zero, trl_loss
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import nanstd

from lightning_trainer.params import LoadParams, TrainParams
from lightning_trainer.schema import parse
from lightning_trainer.session import Session
from lightning_trainer.train import policy_update, sequence_logprobs

FIRST = 'if self.multi_objective_aggregation == "sum_then_normalize":'
LAST = "advantages = torch.nan_to_num(advantages, nan=0.0)"


def trl_advantages(rewards: list[float], num_generations: int, scale_rewards: str) -> list[float]:
    """TRL's statements from `_generate_and_score_completions`, run on one reward function's rewards."""
    source = textwrap.dedent(inspect.getsource(GRPOTrainer._generate_and_score_completions))
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == FIRST)
    end = next(i for i, line in enumerate(lines) if line.strip() == LAST and i > start)
    block = textwrap.dedent("\n".join(lines[start : end + 1]))
    rewards_per_func = torch.tensor(rewards, dtype=torch.float32)[:, None]
    scope = {
        "self": SimpleNamespace(
            multi_objective_aggregation="sum_then_normalize", scale_rewards=scale_rewards, reward_weights=torch.ones(1)
        ),
        "rewards_per_func": rewards_per_func,
        "unscorable_mask": torch.isnan(rewards_per_func).all(dim=1),
        "num_generations": num_generations,
        "device": torch.device("cpu"),
        "torch": torch,
        "nanstd": nanstd,
    }
    exec(compile(block, "trl._generate_and_score_completions", "exec"), scope)  # noqa: S102 (TRL's own statements)
    return scope["advantages"].tolist()


def trl_inputs(
    rows: list[dict], advantages: list[float], references: list[list[float]], tokens: float, pad: int
) -> dict:
    """A micro-batch as TRL lays it out: prompts left-padded, completions right-padded."""
    prompt_width = max(len(r["promptIds"]) for r in rows)
    width = max(len(r["responseIds"]) for r in rows)
    n = len(rows)
    prompt = torch.full((n, prompt_width), pad, dtype=torch.long)
    prompt_mask = torch.zeros((n, prompt_width), dtype=torch.long)
    completion = torch.full((n, width), pad, dtype=torch.long)
    completion_mask = torch.zeros((n, width), dtype=torch.long)
    tool_mask = torch.ones((n, width), dtype=torch.long)
    old, ref = torch.zeros((n, width)), torch.zeros((n, width))
    for i, r in enumerate(rows):
        p, c = len(r["promptIds"]), len(r["responseIds"])
        prompt[i, prompt_width - p :] = torch.tensor(r["promptIds"])
        prompt_mask[i, prompt_width - p :] = 1
        completion[i, :c] = torch.tensor(r["responseIds"])
        completion_mask[i, :c] = 1
        tool_mask[i, :c] = torch.tensor(r["mask"])
        old[i, :c] = torch.tensor(r["logprobs"])
        ref[i, :c] = torch.tensor(references[i])
    return {
        "prompt_ids": prompt,
        "prompt_mask": prompt_mask,
        "completion_ids": completion,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.tensor(advantages),
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(tokens),
    }


def compare(
    model_dir: str, folder: str, rewards: list[float], num_generations: int, given_rows: list[dict], train: dict
) -> dict:
    rows = [dict(r) for r in given_rows]
    torch.manual_seed(0)
    session = Session(lambda _: None)
    session.load(
        parse(
            LoadParams,
            {
                "model": {"kind": "hf", "name": model_dir, "fromConfig": True},
                "adapter": {"kind": "lora", "rank": 4, "trainNorms": False},
                "seed": 0,
            },
        )
    )
    policy = session.policy
    generator = torch.Generator().manual_seed(1)
    _lora_off_zero(session, generator)
    ids = [t for r in rows for t in r["promptIds"] + r["responseIds"]]
    assert all(0 <= t < policy.vocab_size and t != policy.pad_id for t in ids), "token ids must be real, not pad"
    # Behaviour logprobs: the current policy's, shifted by noise so that ratios are clipped both ways.
    with torch.no_grad():
        prompts, responses = [r["promptIds"] for r in rows], [r["responseIds"] for r in rows]
        current = sequence_logprobs(policy, prompts, responses)
        with policy.reference() as reference:
            ref = sequence_logprobs(policy, prompts, responses, module=reference)
    references = []
    for i, r in enumerate(rows):
        n = len(r["responseIds"])
        r["logprobs"] = (current.logprobs[i, -n:] + torch.randn(n, generator=generator) * 0.3).tolist()
        references.append(ref.logprobs[i, -n:].tolist())
    by_tokens = {(tuple(r["promptIds"]), tuple(r["responseIds"])): r for r in rows}
    ours_rows = [dict(t) for t in train["transitions"]]
    for t in ours_rows:
        t["logprobs"] = by_tokens[(tuple(t["promptIds"]), tuple(t["responseIds"]))]["logprobs"]

    # Ours: the daemon's request as it is, on one process.
    trainable = policy.trainable()
    policy.model.train()
    params = parse(TrainParams, {**train, "transitions": ours_rows})
    ours = policy_update(policy, torch.optim.SGD(list(trainable.values()), lr=0.0), 0.0, params, lambda _: None)
    our_grads = {n: p.grad.detach().clone() for n, p in trainable.items()}

    # TRL: its advantages from the rewards, every row kept, the same micro-batches in the same order; the loss
    # type, clipping and KL weight as ours, TRL's defaults for the rest (use_bias_correction_kl, scale_rewards).
    advantages = trl_advantages(rewards, num_generations, GRPOConfig.scale_rewards)
    micro_batch, tokens = params.micro_batch, float(sum(sum(r["mask"]) for r in rows))
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(params.seed)).tolist()
    micro = [order[i : i + micro_batch] for i in range(0, len(order), micro_batch)]
    max_length = params.max_response_length or max(len(r["responseIds"]) for r in rows)
    args = GRPOConfig(
        output_dir=folder,
        report_to=[],
        bf16=False,
        use_cpu=True,
        loss_type=params.loss_type,
        beta=params.kl_coef,
        epsilon=params.clip,
        epsilon_high=params.clip_high,
        temperature=1.0,
        max_completion_length=max_length,
        entropy_coef=params.entropy_coef,
        steps_per_generation=len(micro),
        gradient_accumulation_steps=len(micro),
    )
    trainer = trl_loss(args, policy.model, len(micro))
    policy.model.zero_grad(set_to_none=True)
    policy.model.train()
    theirs = 0.0
    for chunk in micro:
        inputs = trl_inputs(
            [rows[i] for i in chunk],
            [advantages[i] for i in chunk],
            [references[i] for i in chunk],
            tokens,
            policy.pad_id,
        )
        loss = trainer._compute_loss(policy.model, inputs)
        loss.backward()
        theirs += float(loss.detach())
    grad_diff = max(float((our_grads[n] - p.grad).abs().max()) for n, p in trainable.items())
    scale = max(float(p.grad.abs().max()) for p in trainable.values())
    session.close()
    ours_advantages = {(tuple(t["promptIds"]), tuple(t["responseIds"])): t["advantage"] for t in ours_rows}
    return {
        "advantages": {
            "trl": advantages,
            "ours": [ours_advantages.get((tuple(r["promptIds"]), tuple(r["responseIds"]))) for r in rows],
        },
        "rows": {"trl": len(rows), "ours": len(ours_rows)},
        "loss": {"trl": theirs, "ours": ours["loss"]},
        "kl": ours["kl"],
        "gradients": {"largestDifference": grad_diff, "largest": scale},
        "useBiasCorrectionKlDefault": args.use_bias_correction_kl,
    }


def main() -> None:
    given = json.load(sys.stdin)
    with tempfile.TemporaryDirectory() as folder:
        model_dir = hf_model_dir(Path(folder) / "qwen")
        print(
            json.dumps(
                {
                    name: compare(model_dir, folder, given["rewards"], given["numGenerations"], given["rows"], train)
                    for name, train in given["cases"].items()
                }
            )
        )


if __name__ == "__main__":
    main()
