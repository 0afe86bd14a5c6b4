"""The worker's state and methods: one loaded policy, its optimizer and step, and the serving endpoint.

Every method takes validated params (params.py) and returns the result object of PROTOCOL.md. A lock serializes
weight updates with generation, so after `train` returns the next generated tokens use the new weights.
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import Optional

import torch

from . import checkpoint
from .model import TinyConfig
from .params import (
    EvaluateParams,
    ExportParams,
    LoadParams,
    SaveParams,
    ServeParams,
    SftParams,
    TinyModel,
    TokenizeParams,
    TrainParams,
)
from .policy import Policy, TinyPolicy
from .schema import BadParams, camel, parse
from .supervised import evaluate as evaluate_examples
from .supervised import supervised
from .train import phase_clock, policy_update, set_lr, unchanged_on_error


def keep_freed_memory() -> None:
    """glibc hands large freed blocks back to the OS (munmap, heap trimming) and the next step's tensors fault
    their pages in again: on the CPU that made an update's forward pass ~3× the bare step's (torch 1.13, the
    bench). Blocks up to 32 MiB (glibc's largest mmap threshold) then come from the heap, and freed memory stays for
    the next step — the worker's memory stays at its peak, as PyTorch's own CUDA allocator keeps it."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl): its allocator has no such thresholds
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)
    libc.mallopt(m_trim_threshold, 1024 * 1024 * 1024)


class StateError(RuntimeError):
    """A method was called in the wrong state (e.g. `train` before `load`)."""


class SessionLock:
    """The session's re-entrant lock, counting the threads that wait for it: the serving engine holds it while rows
    are being decoded and, when an update waits, admits no new request until it has had its turn."""

    def __init__(self):
        self._lock = threading.RLock()
        self._count = threading.Lock()
        self.waiting = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        with self._count:
            self.waiting += 1
        try:
            return self._lock.acquire(True, timeout)
        finally:
            with self._count:
                self.waiting -= 1

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> SessionLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _wire(obj) -> object:
    """A params dataclass back to its camelCase JSON form (for config.json)."""
    if dataclasses.is_dataclass(obj):
        return {camel(f.name): _wire(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_wire(v) for v in obj]
    return obj


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise StateError("device 'cuda' was requested but torch.cuda.is_available() is false")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def build_policy(params: LoadParams, device: torch.device) -> Policy:
    names = [p.name for p in params.policies] if params.policies else None
    if isinstance(params.model, TinyModel):
        if names:
            raise BadParams(
                "params.policies: several policies are LoRA adapters on a Hugging Face base model; the tiny built-in "
                "policy has none: give model {kind: 'hf', name: …} (lightning train --model HF_NAME)"
            )
        c = params.model.config
        return TinyPolicy(TinyConfig(c.d_model, c.layers, c.heads, c.context), params.adapter, device)
    from .hf import HfPolicy  # transformers is optional

    return HfPolicy(params.model, params.adapter, device, names)


def with_checkpoint_config(params: LoadParams) -> LoadParams:
    """`load {checkpoint}` without model or adapter: both (and the optimizer) from the checkpoint's config.json."""
    if params.checkpoint and (params.model is None or params.adapter is None):
        saved = parse(
            LoadParams,
            {
                k: v
                for k, v in checkpoint.read_config(params.checkpoint).items()
                if k in ("model", "adapter", "optimizer")
            },
        )
        params = dataclasses.replace(
            params,
            model=params.model or saved.model,
            adapter=params.adapter or saved.adapter,
            optimizer=saved.optimizer,
        )
    return params


class Session:
    def __init__(self, emit: Callable[[dict], None]):
        keep_freed_memory()
        self.emit = emit
        self.lock = SessionLock()
        self.policy: Optional[Policy] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.load_params: Optional[LoadParams] = None
        self.step = 0
        self.server = None
        # Several policies (`load {policies}`): each adapter's own optimizer and update count, by policy name.
        self.policy_optimizers: dict[str, torch.optim.Optimizer] = {}
        self.policy_steps: dict[str, int] = {}

    def _loaded(self) -> Policy:
        if self.policy is None:
            raise StateError("no model is loaded: call `load` first")
        return self.policy

    @property
    def serving_policy(self) -> Policy:
        """The copy the HTTP endpoint generates with (under FSDP, rank 0's full copy of the sharded policy)."""
        return self.policy

    def load(self, params: LoadParams) -> dict:
        if params.fsdp:
            raise StateError(
                "params.fsdp shards the policy across torchrun ranks: it needs the torchrun worker "
                "(lightning train --nproc-per-node N --fsdp), not the one-process worker"
            )
        params = with_checkpoint_config(params)
        device = pick_device(params.device)
        if device.type == "cpu":
            torch.set_num_threads(params.threads or 1)  # recipes: 1 thread (+ OpenBLAS's own 2) is fastest on CPU
        torch.manual_seed(params.seed)
        with self.lock:
            policy = build_policy(params, device)
            policy.prepare_reference()
            o = params.optimizer
            if params.policies:
                optimizers, steps = self._policy_optimizers(policy, params)
                optimizer, step = None, max(steps.values())
                trainable = sum(p.numel() for name in optimizers for p in policy.adapter_weights(name).values())
            else:
                optimizer = torch.optim.AdamW(list(policy.trainable().values()), lr=o.lr, weight_decay=o.weight_decay)
                step = checkpoint.restore(params.checkpoint, policy, optimizer) if params.checkpoint else 0
                if params.checkpoint and not policy.lora:
                    policy.prepare_reference()  # full fine-tuning: the KL is to the policy this run resumed from
                # The optimizer state restores the saved lr; the lr asked for now (e.g. a resumed run's) wins.
                set_lr(optimizer, o.lr)
                optimizers, steps = {}, {}
                trainable = sum(p.numel() for p in policy.trainable().values())
            policy.model.eval()
            self.policy, self.optimizer, self.load_params, self.step = policy, optimizer, params, step
            self.policy_optimizers, self.policy_steps = optimizers, steps
        total = sum(p.numel() for p in policy.model.parameters())
        dtype = next(policy.model.parameters()).dtype
        return {
            "parameters": total,
            "trainable": trainable,
            "device": str(device),
            "dtype": str(dtype).replace("torch.", ""),
            "step": step,
            "modelName": policy.name,
            **({"policies": list(optimizers)} if params.policies else {}),
        }

    @staticmethod
    def _policy_optimizers(policy: Policy, params: LoadParams) -> tuple[dict, dict]:
        """One AdamW per policy over its adapter alone (separate moments: one policy's update never moves another's),
        each restored from the policy's checkpoint when it has one; and each policy's step."""
        o = params.optimizer
        optimizers, steps = {}, {}
        for adapter in params.policies:
            weights = policy.adapter_weights(adapter.name)
            optimizer = torch.optim.AdamW(list(weights.values()), lr=o.lr, weight_decay=o.weight_decay)
            steps[adapter.name] = 0
            if adapter.checkpoint:
                steps[adapter.name] = checkpoint.restore_named(adapter.checkpoint, weights, optimizer, policy.device)
            set_lr(optimizer, o.lr)
            optimizers[adapter.name] = optimizer
        return optimizers, steps

    def _policy_adapter(self, name: Optional[str], path: str) -> Optional[str]:
        """The adapter a `train` or `save` names: required with several policies, refused without them."""
        policy = self._loaded()
        if not policy.adapters:
            if name is not None:
                raise BadParams(f"{path}.adapter: this worker loaded one policy (no `policies` at load)")
            return None
        if name not in policy.adapters:
            raise BadParams(f"{path}.adapter must name one of the loaded policies ({', '.join(policy.adapters)})")
        return name

    def serve(self, params: ServeParams) -> dict:
        from .serve import PolicyServer

        self._loaded()
        if self.server is not None:
            raise StateError(f"already serving at {self.server.url}")
        self.server = PolicyServer(self, params.host, params.port, params.max_batch)
        return {"url": self.server.url}

    def sft(self, params: SftParams) -> dict:
        policy = self._loaded()
        self._one_policy("sft")
        with self.lock, unchanged_on_error(list(policy.trainable().values()), self.optimizer):
            result = supervised(policy, self.optimizer, self.load_params.optimizer.grad_clip, params, self._progress)
            if not policy.lora:
                # Full fine-tuning from a warm start: RL's reference is the warm-started policy, not the random or
                # pretrained weights before it (LoRA's stays the base model, adapters off, as in TRL).
                policy.prepare_reference()
            return result

    def evaluate(self, params: EvaluateParams) -> dict:
        """Held-out demonstrations' loss and greedy exact-match accuracy (supervised.py); changes no weight."""
        policy = self._loaded()
        self._one_policy("evaluate")
        with self.lock:
            return evaluate_examples(policy, params)

    def train(self, params: TrainParams, reducer=None, phases: Optional[dict] = None) -> dict:
        """One update; `reducer` all-reduces gradients across data-parallel ranks (distributed.py); `phases` gets
        the seconds of each phase (the bench's breakdown). With several policies, of `params.adapter` alone."""
        policy = self._loaded()
        adapter = self._policy_adapter(params.adapter, "params")
        clock = phase_clock(policy.device)
        with self.lock:
            if adapter is not None:
                policy.activate(adapter)  # its LoRA weights alone have gradients; the reference is the base model
            optimizer = self.optimizer if adapter is None else self.policy_optimizers[adapter]
            snapshot_started = clock()
            with unchanged_on_error(list(policy.trainable().values()), optimizer):
                if phases is not None:
                    phases["snapshot"] = clock() - snapshot_started
                result = policy_update(
                    policy,
                    optimizer,
                    self.load_params.optimizer.grad_clip,
                    params,
                    self._progress,
                    reducer,
                    phases,
                )
                if adapter is None:
                    self.step += 1
                else:
                    self.policy_steps[adapter] += 1
        step = self.step if adapter is None else self.policy_steps[adapter]
        return {"step": step, **result}

    def save(self, params: SaveParams) -> dict:
        policy = self._loaded()
        adapter = self._policy_adapter(params.adapter, "params")
        with self.lock:
            if adapter is None:
                return checkpoint.save(params.dir, policy, self.optimizer, self._checkpoint_config(), params.metrics)
            # A policy's checkpoint is an ordinary LoRA checkpoint of its adapter (its config names no policies), so
            # Use Checkpoint and export read it as any other; `policy` says whose it is.
            weights = {n: p.detach().cpu() for n, p in policy.adapter_weights(adapter).items()}
            config = {**self._checkpoint_config(), "policies": None, "policy": adapter}
            config["step"] = self.policy_steps[adapter]
            optimizer = self.policy_optimizers[adapter].state_dict()
            return checkpoint.write(params.dir, weights, optimizer, config, params.metrics)

    def _one_policy(self, method: str) -> None:
        if self._loaded().adapters:
            raise StateError(
                f"`{method}` trains or scores one policy; this worker holds several (`load {{policies}}`): load one"
            )

    def export(self, params: ExportParams) -> dict:
        """A checkpoint folder as a PEFT adapter or a Hugging Face model (export.py); needs no loaded policy."""
        from .export import export

        return export(params)

    def _checkpoint_config(self) -> dict:
        return {
            "protocol": 1,
            **_wire(self.load_params),
            "checkpoint": None,
            "step": self.step,
            "modelName": self._loaded().name,
        }

    def tokenize(self, params: TokenizeParams) -> dict:
        policy = self._loaded()
        ids = policy.render_prompt(params.messages, params.tools)
        return {"ids": ids, "text": policy.decode(ids)}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def _progress(self, data: dict) -> None:
        self.emit({"type": "event", "event": "progress", "data": data})
