"""The tiny byte-level GPT (plain torch, no downloads) and LoRA adapters for it.

Decoder-only transformer with learned positions and tied embeddings, default d=96, 3 layers, 4 heads, context 128
(~0.37M parameters): small enough to learn short tool-use tasks by RL on a laptop CPU (see recipes/README.md).
`forward` takes a KV cache, an attention mask over all keys (cache + new tokens, 1 = real token) and explicit
position ids, so left-padded batches generate correctly: positions = cumsum(mask) - 1, padding rows attend to
themselves (a row with no allowed key would softmax to NaN), masks applied with torch.where.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .tokenizer import VOCAB_SIZE

KVCache = list  # one (keys, values) pair per layer, each (batch, heads, time, head_dim)


@dataclass
class TinyConfig:
    """The network's shape; the defaults a user gets live once, in params.TinyModelConfig."""

    d_model: int
    layers: int
    heads: int
    context: int
    vocab: int = VOCAB_SIZE


class Attention(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor, past: Optional[tuple]) -> tuple:
        batch, time, width = x.shape
        q, k, v = (t.view(batch, time, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, dim=-1))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        keys = k.shape[2]
        query_pos = torch.arange(time, device=x.device) + (keys - time)
        key_pos = torch.arange(keys, device=x.device)
        causal = key_pos[None, :] <= query_pos[:, None]
        allowed = (causal[None] & key_mask[:, None, :].bool()) | (key_pos[None, :] == query_pos[:, None])[None]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = torch.where(allowed[:, None], scores, torch.full_like(scores, float("-inf")))
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, time, width)
        return self.out(y), (k, v)


class Block(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.attn = Attention(config)
        self.up = nn.Linear(config.d_model, 4 * config.d_model)
        self.down = nn.Linear(4 * config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor, past: Optional[tuple]) -> tuple:
        attended, cache = self.attn(self.ln1(x), key_mask, past)
        x = x + attended
        return x + self.down(F.gelu(self.up(self.ln2(x)))), cache


class TinyGPT(nn.Module):
    def __init__(self, config: TinyConfig):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.d_model)
        self.positions = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past: Optional[KVCache] = None,
        keep: Optional[int] = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Logits for the new tokens `ids` (the last `keep` of them if given) and the extended cache.

        attention_mask covers the cached keys and the new tokens: (batch, cached + new)."""
        x = self.tokens(ids) + self.positions(position_ids)
        cache = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(x, attention_mask, past[i] if past else None)
            cache.append(layer_cache)
        if keep is not None:
            x = x[:, -keep:]
        return self.ln_f(x) @ self.tokens.weight.t(), cache


class LoRALinear(nn.Module):
    """y = W x + (alpha / rank) · B A dropout(x), with W frozen, A random and B zero (the update starts at 0)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float):
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank
        self.dropout = nn.Dropout(dropout)
        self.enabled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if self.enabled:
            y = y + (self.dropout(x) @ self.lora_a.t() @ self.lora_b.t()) * self.scale
        return y


TINY_LORA_TARGETS = ["qkv", "out", "up", "down"]


def apply_lora(model: nn.Module, rank: int, alpha: float, dropout: float, targets: list[str], train_norms: bool) -> int:
    """Freeze every weight, wrap the Linear layers named in `targets` with adapters; returns how many."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    wrapped = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and name in targets:
                setattr(module, name, LoRALinear(child, rank, alpha, dropout))
                wrapped += 1
    if train_norms:
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                for parameter in module.parameters():
                    parameter.requires_grad_(True)
    return wrapped


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """The base model: what the KL penalty compares against when training LoRA adapters."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    for layer in layers:
        layer.enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.enabled = True
