"""A policy: a causal LM with its tokenizer, chat template, tool-call parser and reference (base) model.

Two kinds implement it: TinyPolicy (model.py's byte-level GPT) and hf.HfPolicy (transformers + peft). Serving,
training and checkpoints only use this interface, so both kinds share one generation loop, one loss and one
checkpoint format.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Iterator
from typing import Optional

import torch
from torch import nn

from . import model as tiny
from .schema import BadParams
from .tokenizer import ByteTokenizer, parse_tool_call, render_chat, render_completion

_MAYBE_CALL = re.compile(r"\s*[A-Za-z_][\w.-]*(\(.*)?$", re.S)  # what may still become `name(args)`


def compute_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """How the policy computes on `device`: bf16 autocast on CUDA (float32 master weights), as stored on the CPU."""
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Policy:
    """Subclasses set tokenizer, model, device, name, context, stop_ids and the adapter kind."""

    model: nn.Module
    device: torch.device
    name: str
    context: Optional[int]
    stop_ids: frozenset
    pad_id: int
    lora: bool
    vocab_size: int
    # Several policies (HF + LoRA only): one adapter per policy, by name; None for one policy (hf.HfPolicy).
    adapters: Optional[list[str]] = None

    # --- model calls -------------------------------------------------------------------------------------------
    def forward(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past=None,
        keep: Optional[int] = None,
        module: Optional[nn.Module] = None,
        adapters: Optional[list[Optional[str]]] = None,
    ) -> tuple[torch.Tensor, object]:
        """Logits of the last `keep` new tokens and the KV cache; bf16 autocast on CUDA (serving and training alike,
        so behaviour and recomputed logprobs agree). `module` swaps in the reference model; `adapters` (several
        policies, serving only) names each row's adapter, None for the base model."""
        with compute_precision(self.device):
            if adapters is None:
                return self._forward(module or self.model, ids, attention_mask, position_ids, past, keep)
            return self._forward(module or self.model, ids, attention_mask, position_ids, past, keep, adapters)

    def _forward(self, module: nn.Module, ids, attention_mask, position_ids, past, keep, adapters=None):
        raise NotImplementedError

    def cache_layers(self, past) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The KV cache `forward` returned as one (keys, values) pair per layer, each (batch, heads, time, dim)."""
        return past

    def cache_from_layers(self, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> object:
        """The inverse of cache_layers: what `forward` takes as `past` (rows selected or joined by the decoder)."""
        return layers

    # --- chat template -----------------------------------------------------------------------------------------
    def render_prompt(self, messages: list[dict], tools: Optional[list]) -> list[int]:
        raise NotImplementedError

    def render_completion(self, messages: list[dict], tools: Optional[list], completion: dict) -> list[int]:
        """Token ids the model should generate for `completion` after the prompt (terminator included)."""
        raise NotImplementedError

    def parse_output(self, text: str, tools: Optional[list]) -> tuple[Optional[str], list[dict]]:
        """Generated text (terminator removed) → (content, tool_calls)."""
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def certain_content(self, text: str, tools: Optional[list]) -> int:
        """How much of an unfinished completion's text is content whatever follows (parse_output will give content
        starting with it): what a stream may send before the completion ends. Without tools, all of it."""
        return len(text) if not tools else 0

    def token_info(self, token_id: int) -> tuple[str, list[int]]:
        """(token text, its UTF-8 bytes) for OpenAI-style logprobs entries."""
        raise NotImplementedError

    def encode_prompt(self, text: str) -> list[int]:
        """A raw-text prompt (/v1/completions) as token ids."""
        raise NotImplementedError

    # --- training support --------------------------------------------------------------------------------------
    def prepare_reference(self) -> None:
        """Remember the base policy for the KL penalty: adapters off + initial norms (LoRA), or a frozen copy."""
        if self.lora:
            self._initial_extra = {
                n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad and "lora_" not in n
            }
            self._frozen = None
        else:
            self._initial_extra = {}
            self._frozen = copy.deepcopy(self.model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def reference(self) -> Iterator[nn.Module]:
        """Yields the module computing the reference policy (the caller runs it under no_grad)."""
        if self._frozen is not None:
            yield self._frozen
            return
        if not self._initial_extra:  # LoRA without trained norms: adapters off is the whole reference
            with self.adapters_disabled():
                yield self.model
            return
        params = dict(self.model.named_parameters())
        saved = {n: params[n].detach().clone() for n in self._initial_extra}
        with torch.no_grad():
            for n, value in self._initial_extra.items():
                params[n].copy_(value)
        try:
            with self.adapters_disabled():
                yield self.model
        finally:
            with torch.no_grad():
                for n, value in saved.items():
                    params[n].copy_(value)

    def adapters_disabled(self):
        raise NotImplementedError

    def training_is_deterministic(self) -> bool:
        """Whether a forward in train mode gives what eval mode gives (no dropout anywhere): then an update's first
        training forward doubles as the behaviour logprobs it was not given. Checked once."""
        if getattr(self, "_deterministic", None) is None:
            modules = any(isinstance(m, nn.Dropout) and m.p > 0 for m in self.model.modules())
            self._deterministic = not modules and not self._functional_dropout()
        return self._deterministic

    def _functional_dropout(self) -> bool:
        """Dropout the model applies without an nn.Dropout module (a Hugging Face config's attention_dropout)."""
        return False

    def trainable(self) -> dict[str, nn.Parameter]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}


class TinyPolicy(Policy):
    def __init__(self, config: tiny.TinyConfig, adapter, device: torch.device):
        self.tokenizer = ByteTokenizer()
        self.model = tiny.TinyGPT(config).to(device)
        self.device = device
        self.name = f"tiny-d{config.d_model}-l{config.layers}"
        self.context = config.context
        self.stop_ids = self.tokenizer.stop_ids
        self.pad_id = self.tokenizer.pad_id
        self.vocab_size = self.tokenizer.vocab_size
        self.lora = adapter.kind == "lora"
        if self.lora:
            targets = adapter.targets or tiny.TINY_LORA_TARGETS
            if (
                tiny.apply_lora(self.model, adapter.rank, adapter.alpha, adapter.dropout, targets, adapter.train_norms)
                == 0
            ):
                raise BadParams(
                    f"params.adapter.targets {targets} matched no layer (tiny layers: {tiny.TINY_LORA_TARGETS})"
                )
            self.model.to(device)

    def _forward(self, module, ids, attention_mask, position_ids, past, keep, adapters=None):
        return module(ids, attention_mask, position_ids, past, keep)

    def render_prompt(self, messages, tools):
        return [self.tokenizer.bos_id] + self.tokenizer.encode(render_chat(messages, tools))

    def render_completion(self, messages, tools, completion):
        return self.tokenizer.encode(render_completion(completion, tools))

    def parse_output(self, text, tools):
        call = parse_tool_call(text, tools)
        return (None, [call]) if call else (text, [])

    def certain_content(self, text, tools):
        # A tool call is the whole text `name(...)`: text that can no longer take that form is content.
        return len(text) if not tools or not _MAYBE_CALL.match(text) else 0

    def decode(self, ids):
        return self.tokenizer.decode(ids)

    def encode_prompt(self, text):
        return [self.tokenizer.bos_id] + self.tokenizer.encode(text)

    def token_info(self, token_id):
        return self.tokenizer.token_text(token_id), self.tokenizer.token_bytes(token_id)

    def adapters_disabled(self):
        return tiny.adapters_disabled(self.model)
