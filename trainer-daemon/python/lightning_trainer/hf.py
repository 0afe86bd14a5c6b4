"""Hugging Face causal LMs as policies, through transformers (+ peft for LoRA). Both are optional imports.

The chat template is the tokenizer's own (`apply_chat_template` with tools); tool calls in the output are read in
the Qwen/Hermes style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. `fromConfig: true` builds the
model from its config.json with random weights (nothing downloaded; the GPU check uses it), the pad token's
embedding row random too. On CUDA, LoRA runs on a
bfloat16 base (adapters and trained norms in float32, peft's default); full fine-tuning keeps float32 weights;
both compute under bf16 autocast.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import uuid
from typing import Optional

import torch

from .params import HfModel
from .policy import Policy
from .schema import BadParams

DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _gpt2_byte_alphabet() -> dict[str, int]:
    """GPT-2's byte alphabet read back (the characters byte-level BPE spells tokens in → their bytes): a byte that is
    a printable Latin-1 character is that character; each of the others, in byte order, is U+0100 onward."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [byte for byte in range(256) if byte not in printable]
    return {chr(byte): byte for byte in printable} | {chr(0x100 + n): byte for n, byte in enumerate(others)}


_BYTE_DECODER = _gpt2_byte_alphabet()


def _import_transformers():
    try:
        import transformers
    except ImportError as error:
        raise RuntimeError(
            "model kind 'hf' needs the transformers package: pip install transformers peft (run `lightning doctor`)"
        ) from error
    return transformers


def _message_for_template(message: dict) -> dict:
    """Chat templates expect tool-call arguments as objects, the OpenAI wire format sends JSON strings."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    fixed = []
    for call in calls:
        function = dict(call.get("function", {}))
        if isinstance(function.get("arguments"), str):
            function["arguments"] = json.loads(function["arguments"] or "{}")
        fixed.append({**call, "function": function})
    return {**message, "tool_calls": fixed}


def parse_hermes_tool_calls(text: str, tools: Optional[list]) -> tuple[Optional[str], list[dict]]:
    if not tools:
        return text, []
    names = {t.get("function", t).get("name") for t in tools}
    calls = []
    for raw in _TOOL_CALL.findall(text):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict) and parsed.get("name") in names:
            calls.append(
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": parsed["name"], "arguments": json.dumps(parsed.get("arguments") or {})},
                }
            )
    if not calls:
        return text, []
    content = _TOOL_CALL.sub("", text).strip()
    return content or None, calls


def hermes_certain_content(text: str, tools: Optional[list]) -> int:
    """Policy.certain_content for Hermes tool calls: with any <tool_call> block parsed, the content is the text
    around the blocks, stripped. Text before a block, or before what may start one, is content less its trailing
    whitespace; leading whitespace waits for the end (it stays only when there is no call)."""
    if not tools:
        return len(text)
    if text[:1].isspace():
        return 0
    cut = text.find(TOOL_CALL_OPEN)
    if cut < 0:
        begun = [k for k in range(1, min(len(TOOL_CALL_OPEN), len(text) + 1)) if text.endswith(TOOL_CALL_OPEN[:k])]
        cut = len(text) - max(begun, default=0)
    return len(text[:cut].rstrip())


def _random_pad_embedding(model, config) -> None:
    """transformers initializes the pad token's embedding row to zeros, a state no trained model is in. A pad token
    inside a sequence then carries an all-zero hidden state through every layer, and RMSNorm's backward scales its
    gradient by 1/sqrt(eps) (~1000) per layer: at 24 layers the gradients overflow to inf/NaN (the GPU check's
    failure). A random row like the others avoids it."""
    pad = getattr(config, "pad_token_id", None)
    if pad is not None:
        with torch.no_grad():
            model.get_input_embeddings().weight[pad].normal_(0.0, getattr(config, "initializer_range", 0.02))


BASE_ADAPTER = "__base__"  # peft's name for "no adapter" in a mixed batch


def _adapter_segment(name: str) -> re.Pattern:
    """Where adapter `name` sits in a peft parameter name (`….lora_A.<name>.weight`); only there, so a policy named
    like a module (`model`, `layers`) never matches the rest of the path."""
    return re.compile(rf"\.(lora_A|lora_B|lora_embedding_A|lora_embedding_B)\.{re.escape(name)}(?=\.|$)")


def _policies_error(adapter) -> Optional[str]:
    """Why this adapter spec cannot hold several policies, or None."""
    if adapter.kind != "lora":
        return "params.policies: several policies are LoRA adapters on one base model: give adapter.kind 'lora'"
    if adapter.train_norms:
        return (
            "params.policies: norms are shared by every adapter of the base model, so with several policies they "
            "cannot train: give adapter.trainNorms false"
        )
    return None


class HfPolicy(Policy):
    def __init__(self, spec: HfModel, adapter, device: torch.device, policies: Optional[list[str]] = None):
        transformers = _import_transformers()
        # bf16 weights for a frozen base under LoRA on CUDA; full fine-tuning keeps float32 master weights (bf16
        # would round small updates away) and computes in bf16 through autocast.
        default = "bfloat16" if device.type == "cuda" and adapter.kind == "lora" else "float32"
        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[spec.dtype or default]
        dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(spec.name)
        if spec.from_config:
            config = transformers.AutoConfig.from_pretrained(spec.name)
            model = transformers.AutoModelForCausalLM.from_config(config, **{dtype_key: dtype})
            _random_pad_embedding(model, config)
        else:
            model = transformers.AutoModelForCausalLM.from_pretrained(spec.name, **{dtype_key: dtype})
        model.to(device)
        self.lora = adapter.kind == "lora"
        if policies:
            problem = _policies_error(adapter)
            if problem:
                raise BadParams(problem)
            self.adapters = list(policies)
        if self.lora:
            model = self._with_lora(model, adapter, self.adapters)
        self.model = model
        self._tuner_layers = None  # peft's adapter layers, found on the first adapters_disabled()
        self.device = device
        self.name = spec.name.rstrip("/").split("/")[-1] if spec.from_config else spec.name
        config = model.config
        self.vocab_size = config.vocab_size
        self.context = getattr(config, "max_position_embeddings", None)
        self.stop_ids = frozenset(self._stop_ids(model))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.stop_ids)
        forward = inspect.signature(model.get_base_model().forward if self.lora else model.forward).parameters
        self.keep_arg = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in forward), None)

    @staticmethod
    def _with_lora(model, adapter, names: Optional[list[str]] = None):
        try:
            import peft
        except ImportError as error:
            raise RuntimeError("LoRA on Hugging Face models needs the peft package: pip install peft") from error
        targets = adapter.targets or [
            t for t in DEFAULT_LORA_TARGETS if any(n.endswith("." + t) for n, _ in model.named_modules())
        ]
        if not targets:
            raise BadParams("params.adapter.targets: none of the default LoRA targets exist in this model; name them")
        config = peft.LoraConfig(
            r=adapter.rank,
            lora_alpha=adapter.alpha,
            lora_dropout=adapter.dropout,
            target_modules=targets,
            task_type="CAUSAL_LM",
        )
        if names:
            # One adapter per policy, made in order from the same seeded RNG: the first one's initial weights are
            # those a single-adapter model gets, so a one-policy run starts where a plain LoRA run does.
            model = peft.get_peft_model(model, config, adapter_name=names[0])
            for name in names[1:]:
                model.add_adapter(name, config)
            return model
        model = peft.get_peft_model(model, config)
        if adapter.train_norms:  # trained in float32 (bf16 would round small updates away)
            for name, parameter in model.named_parameters():
                if "norm" in name.lower():
                    parameter.data = parameter.data.float()
                    parameter.requires_grad_(True)
        return model

    def _stop_ids(self, model) -> set[int]:
        ids = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        generation = getattr(model, "generation_config", None)
        configured = getattr(generation, "eos_token_id", None) if generation else None
        ids.update(configured if isinstance(configured, list) else [configured] if configured is not None else [])
        end_of_turn = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(end_of_turn, int) and end_of_turn != self.tokenizer.unk_token_id:
            ids.add(end_of_turn)
        if not ids:
            raise RuntimeError("the tokenizer names no EOS token; generation could not stop")
        return ids

    # --- several policies: one adapter each ----------------------------------------------------------------------
    def activate(self, name: str) -> None:
        """Makes `name` the adapter that trains (and that a forward without per-row adapters runs): its LoRA weights
        are the only parameters with a gradient, so `trainable()` and the update see that policy alone."""
        self.model.base_model.set_adapter(name)
        own = _adapter_segment(name)
        for parameter_name, parameter in self.model.named_parameters():
            parameter.requires_grad_(own.search(parameter_name) is not None)

    def adapter_weights(self, name: str) -> dict[str, torch.nn.Parameter]:
        """Adapter `name`'s weights under the names a single-adapter model gives them (peft's `default`), in the
        model's order: a policy's checkpoint is an ordinary LoRA checkpoint that any worker loads and exports."""
        self.activate(name)
        return {_adapter_segment(name).sub(r".\1.default", n): p for n, p in self.trainable().items()}

    def _forward(self, module, ids, attention_mask, position_ids, past, keep, adapters=None):
        kwargs = {
            "input_ids": ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "past_key_values": past,
            "use_cache": keep == 1,
        }
        if keep is not None and self.keep_arg:
            kwargs[self.keep_arg] = keep
        if adapters is not None:
            # Rows of several policies decode together: peft runs the base layers once for the whole batch and each
            # adapter's low-rank update on its own rows (its mixed-batch forward); None is the base model alone.
            kwargs["adapter_names"] = [name or BASE_ADAPTER for name in adapters]
        out = module(**kwargs)
        logits = out.logits if keep is None or self.keep_arg else out.logits[:, -keep:]
        return logits, out.past_key_values

    def cache_layers(self, past):
        if hasattr(past, "layers"):  # transformers 5
            return [(layer.keys, layer.values) for layer in past.layers]
        if hasattr(past, "key_cache"):
            return list(zip(past.key_cache, past.value_cache))
        return [(layer[0], layer[1]) for layer in past]

    def cache_from_layers(self, layers):
        from transformers import DynamicCache

        if hasattr(DynamicCache, "from_legacy_cache"):
            return DynamicCache.from_legacy_cache(tuple(layers))
        return DynamicCache(ddp_cache_data=layers)

    def _template(self, messages: list[dict], tools: Optional[list], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [_message_for_template(m) for m in messages],
            tools=tools or None,
            add_generation_prompt=generation_prompt,
            tokenize=False,
        )

    def _ids(self, text: str) -> list[int]:
        # A fast tokenizer's Rust backend directly: the same ids without the Python wrapper's batch machinery (most
        # of the cost of tokenizing a served request's prompt).
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            return backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def render_prompt(self, messages, tools):
        return self._ids(self._template(messages, tools, True))

    def render_completion(self, messages, tools, completion):
        prompt = self._template(messages, tools, True)
        full = self._template(messages + [{"role": "assistant", **completion}], tools, False)
        if not full.startswith(prompt):
            raise RuntimeError(
                "this chat template renders the conversation differently once a reply is added; "
                "SFT cannot tell the completion tokens apart"
            )
        ids = self._ids(full[len(prompt) :])
        ends = [i for i, token in enumerate(ids) if token in self.stop_ids]
        return ids[: ends[0] + 1] if ends else ids

    def parse_output(self, text, tools):
        return parse_hermes_tool_calls(text, tools)

    def decode(self, ids):
        return self.tokenizer.decode(ids)

    def certain_content(self, text, tools):
        return hermes_certain_content(text, tools)

    def encode_prompt(self, text):
        return self.tokenizer(text)["input_ids"]

    def token_info(self, token_id):
        text = self.tokenizer.decode([token_id])
        return text, self._token_bytes(token_id, text)

    def _token_bytes(self, token_id, text: str) -> list[int]:
        """The token's own bytes: a token that holds part of a UTF-8 character decodes alone to U+FFFD, whose bytes
        are not its. Byte-level BPE (GPT-2, Qwen, Llama 3) spells its bytes in GPT-2's byte alphabet; SentencePiece's
        byte fallback (Llama 2, Mistral) as `<0xE4>`; other tokens are whole text."""
        piece = self.tokenizer.convert_ids_to_tokens(int(token_id))
        if isinstance(piece, str):
            if self._byte_level():
                decoded = [_BYTE_DECODER.get(char) for char in piece]
                if all(byte is not None for byte in decoded):
                    return decoded  # type: ignore[return-value]
            fallback = _BYTE_PIECE.match(piece)
            if fallback:
                return [int(fallback.group(1), 16)]
        return list(text.encode("utf-8"))

    def _byte_level(self) -> bool:
        decoder = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "decoder", None)
        return type(decoder).__name__ == "ByteLevel"

    def _functional_dropout(self) -> bool:
        config = self.model.config.to_dict()
        return any(
            ("dropout" in key or "pdrop" in key) and isinstance(value, (int, float)) and value > 0
            for key, value in config.items()
        )

    @contextlib.contextmanager
    def adapters_disabled(self):
        """The base model, as peft's `disable_adapter()` gives it (each adapter layer's `enable_adapters(False)`, then
        back on) without its check of the whole model's adapter status, which cost more than a reference pass on
        small batches."""
        if not self.lora:
            yield
            return
        from peft.tuners.tuners_utils import BaseTunerLayer

        if self._tuner_layers is None:
            self._tuner_layers = [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]
        enabled = [layer for layer in self._tuner_layers if not layer.disable_adapters]
        for layer in enabled:
            layer.enable_adapters(False)
        try:
            yield
        finally:
            for layer in enabled:
                layer.enable_adapters(True)
