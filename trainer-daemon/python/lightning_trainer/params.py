"""Params of every worker method, as dataclasses checked by schema.parse (wire keys are camelCase).

This is the Python half of PROTOCOL.md and of protocol/trainer.ts's zod schemas: test/unit/workerContract.test.ts
compares the two (`python3 -m lightning_trainer.schema` prints these as shapes) and fails when they drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from .schema import require


@dataclass
class TinyModelConfig:
    d_model: int = 96
    layers: int = 3
    heads: int = 4
    context: int = 128

    def check(self, path: str) -> None:
        require(
            self.d_model > 0 and self.d_model % self.heads == 0, f"{path}.dModel must be a positive multiple of heads"
        )
        require(self.layers > 0 and self.heads > 0 and self.context > 1, f"{path}: layers, heads, context must be > 0")


@dataclass
class TinyModel:
    kind: Literal["tiny"]
    config: TinyModelConfig = field(default_factory=TinyModelConfig)


@dataclass
class HfModel:
    kind: Literal["hf"]
    name: str
    from_config: bool = False
    dtype: Optional[Literal["bfloat16", "float32"]] = None


@dataclass
class FullAdapter:
    kind: Literal["full"]


@dataclass
class LoraAdapter:
    kind: Literal["lora"]
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: Optional[list[str]] = None
    train_norms: bool = True

    def check(self, path: str) -> None:
        require(self.rank > 0, f"{path}.rank must be > 0")
        require(0 <= self.dropout < 1, f"{path}.dropout must be in [0, 1)")


@dataclass
class OptimizerParams:
    lr: float = 3e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0

    def check(self, path: str) -> None:
        require(self.lr > 0, f"{path}.lr must be > 0")


POLICY_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")
RESERVED_POLICY_NAMES = ("base", "default")  # the base model's route, and peft's name for a lone adapter


@dataclass
class PolicyAdapter:
    """One policy of a multi-policy run: a LoRA adapter of its own on the shared base model, named after the policy."""

    name: str
    # A checkpoint `save {adapter}` wrote for this policy: its weights (and optimizer state) are restored into it.
    checkpoint: Optional[str] = None

    def check(self, path: str) -> None:
        require(
            bool(POLICY_NAME.match(self.name)) and self.name not in RESERVED_POLICY_NAMES,
            f"{path}.name must be a letter then up to 39 letters, digits, _ or - (not base or default), "
            f"got {self.name!r}",
        )


@dataclass
class LoadParams:
    model: Optional[Union[TinyModel, HfModel]] = None
    adapter: Optional[Union[FullAdapter, LoraAdapter]] = None
    optimizer: OptimizerParams = field(default_factory=OptimizerParams)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 0
    checkpoint: Optional[str] = None
    threads: Optional[int] = None
    # Under torchrun only: shard parameters, gradients and optimizer state across the ranks (FSDP2, fsdp.py).
    fsdp: bool = False
    # Several policies: one LoRA adapter per policy on the one base model (hf.py), each with its own optimizer.
    policies: Optional[list[PolicyAdapter]] = None

    def check(self, path: str) -> None:
        require(
            self.checkpoint is not None or (self.model is not None and self.adapter is not None),
            f"{path}.model and {path}.adapter are required unless {path}.checkpoint is given",
        )
        if self.policies is not None:
            names = [p.name for p in self.policies]
            require(len(names) > 0, f"{path}.policies must not be empty (leave it out for one policy)")
            require(len(set(names)) == len(names), f"{path}.policies: each name once, got {names}")
            require(
                self.checkpoint is None,
                f"{path}.checkpoint and {path}.policies do not go together: give each policy its checkpoint",
            )


@dataclass
class ServeParams:
    host: str = "127.0.0.1"
    port: int = 0
    max_batch: int = 64

    def check(self, path: str) -> None:
        require(self.host in ("127.0.0.1", "localhost", "::1"), f"{path}.host must be a loopback address")
        require(0 <= self.port < 65536, f"{path}.port must be in [0, 65535]")
        require(self.max_batch > 0, f"{path}.maxBatch must be > 0")


@dataclass
class SftExample:
    messages: list[dict]
    completion: dict  # an assistant message's {content?, tool_calls?} (OpenAI wire names)
    tools: Optional[list[dict]] = None

    def check(self, path: str) -> None:
        keys = set(self.completion)
        require(
            bool(keys) and keys <= {"content", "tool_calls"},
            f"{path}.completion must have content and/or tool_calls (and nothing else)",
        )


@dataclass
class UntilSampledAccuracy:
    threshold: float
    every: int = 10
    samples: int = 64


@dataclass
class SftParams:
    examples: list[SftExample]
    steps: int = 200
    batch_size: int = 32
    lr: Optional[float] = None
    seed: int = 0
    until_sampled_accuracy: Optional[UntilSampledAccuracy] = None
    # Passes over the examples, each in a fresh random order (the last batch of a pass may be smaller), instead of
    # `steps` batches drawn with replacement: what `lightning train --algorithm sft` trains with, one pass a call.
    epochs: Optional[int] = None

    def check(self, path: str) -> None:
        require(len(self.examples) > 0, f"{path}.examples must not be empty")
        require(self.steps > 0 and self.batch_size > 0, f"{path}.steps and {path}.batchSize must be > 0")
        require(self.epochs is None or self.epochs > 0, f"{path}.epochs must be > 0")
        require(
            self.epochs is None or self.until_sampled_accuracy is None,
            f"{path}.epochs and {path}.untilSampledAccuracy do not go together (give steps to stop early)",
        )


@dataclass
class EvaluateParams:
    """Held-out demonstrations: their loss, and how many the policy reproduces when it decodes greedily."""

    examples: list[SftExample]
    # Greedy generations for the exact-match accuracy: the first `generate` examples (None: all of them).
    generate: Optional[int] = None
    batch_size: int = 32

    def check(self, path: str) -> None:
        require(len(self.examples) > 0, f"{path}.examples must not be empty")
        require(self.generate is None or self.generate >= 0, f"{path}.generate must be >= 0")
        require(self.batch_size > 0, f"{path}.batchSize must be > 0")


@dataclass
class Transition:
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    logprobs: Optional[list[float]] = None
    mask: Optional[list[int]] = None


@dataclass
class TrainParams:
    transitions: list[Transition]
    epochs: int = 2
    minibatch: int = 128
    micro_batch: int = 32
    clip: float = 0.2
    # DAPO's clip-higher: the upper ratio bound 1 + clipHigh (default: clip).
    clip_high: Optional[float] = None
    kl_coef: float = 0.0
    # With klCoef 0 the KL is only reported: whether this update measures it (a reference pass over every 8th row). The
    # GRPO loop asks on its first, validated and last iterations; the others skip that forward (TRL logs no KL at 0).
    kl_sample: bool = True
    # TRL's use_bias_correction_kl: the KL term weighted by the importance ratio π/π_behaviour (on, as TRL 1.13).
    kl_bias_correction: bool = True
    entropy_coef: float = 0.0
    # How per-token losses are averaged, as TRL's GRPOTrainer names it (train.py's docstring).
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    # dr_grpo's constant divisor per sequence; default: the longest response of the call.
    max_response_length: Optional[int] = None
    seed: int = 0
    # With several policies loaded: which one's adapter this update trains (required then, refused otherwise).
    adapter: Optional[str] = None

    def check(self, path: str) -> None:
        require(len(self.transitions) > 0, f"{path}.transitions must not be empty")
        require(
            self.clip > 0 and (self.clip_high is None or self.clip_high > 0),
            f"{path}.clip and {path}.clipHigh must be > 0",
        )
        require(
            self.max_response_length is None or self.max_response_length > 0, f"{path}.maxResponseLength must be > 0"
        )
        require(
            self.epochs > 0 and self.minibatch > 0 and self.micro_batch > 0,
            f"{path}: epochs, minibatch and microBatch must be > 0",
        )
        for i, t in enumerate(self.transitions):
            where = f"{path}.transitions[{i}]"
            require(
                len(t.prompt_ids) > 0 and len(t.response_ids) > 0,
                f"{where}: promptIds and responseIds must not be empty",
            )
            require(
                t.logprobs is None or len(t.logprobs) == len(t.response_ids),
                f"{where}.logprobs must have one entry per response token",
            )
            require(
                t.mask is None or (len(t.mask) == len(t.response_ids) and set(t.mask) <= {0, 1}),
                f"{where}.mask must have one 0/1 entry per response token",
            )


@dataclass
class SaveParams:
    dir: str
    metrics: dict = field(default_factory=dict)
    # With several policies loaded: the policy whose adapter (and optimizer) this checkpoint holds.
    adapter: Optional[str] = None


@dataclass
class ExportParams:
    format: Literal["peft", "hf", "merged"]
    out: str
    checkpoint: Optional[str] = None
    # A set of policies' checkpoints (one per adapter, `save {adapter}`): one PEFT folder with an adapter each.
    adapters: Optional[list[PolicyAdapter]] = None

    def check(self, path: str) -> None:
        require(
            (self.checkpoint is None) != (self.adapters is None),
            f"give {path}.checkpoint (one checkpoint) or {path}.adapters (a set of policies), not both",
        )
        require(
            bool(self.checkpoint or self.adapters) and bool(self.out),
            f"{path}.checkpoint and {path}.out must not be empty",
        )
        if self.adapters is not None:
            names = [a.name for a in self.adapters]
            require(len(set(names)) == len(names), f"{path}.adapters: each name once, got {names}")
            require(all(a.checkpoint for a in self.adapters), f"{path}.adapters: each needs its checkpoint")
            require(self.format == "peft", f"{path}.format: a set of adapters exports as peft only (one adapter each)")


@dataclass
class TokenizeParams:
    messages: list[dict]
    tools: Optional[list[dict]] = None


@dataclass
class Empty:
    pass
