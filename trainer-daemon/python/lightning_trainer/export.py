"""A checkpoint in the formats other tools load (`export` in PROTOCOL.md; `lightning checkpoints export`).

* `peft`: a PEFT adapter directory (adapter_config.json + adapter_model.safetensors, the tokenizer and its chat
  template) that `PeftModel.from_pretrained(base, DIR)` loads onto the base model the run trained. Norms trained
  beside the adapters (`trainNorms`, the default) travel as PEFT's `modules_to_save`, so the loaded model is the
  served one; an adapter without them is plain LoRA (what vLLM's `--enable-lora` expects).
* `hf` / `merged`: a `save_pretrained` directory (safetensors, config, generation config, tokenizer, chat
  template) that plain `AutoModelForCausalLM.from_pretrained(DIR)` loads: a full fine-tune's weights, or LoRA's
  adapters merged into the base (`merged` says so; on a LoRA checkpoint `hf` is the same thing).

Weights are rebuilt on the CPU in float32 (a merge in bf16 would round the update away) from the checkpoint's own
config.json, as `load {checkpoint}` rebuilds them. The directory is written to a temporary sibling and renamed, so
a failed export leaves nothing under DIR. The tiny built-in policy is not a transformers architecture: it is refused
with the reason (its own format is the checkpoint folder itself, PROTOCOL.md "save").
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

from . import checkpoint
from .params import ExportParams, HfModel, LoadParams, LoraAdapter, TinyModel
from .schema import BadParams, parse


class ExportRefused(BadParams):
    """This checkpoint cannot be written in the asked format; the message says why and what works instead."""


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _saved_load_params(folder: str) -> LoadParams:
    saved = checkpoint.read_config(folder)
    params = parse(LoadParams, {k: v for k, v in saved.items() if k in ("model", "adapter", "seed")})
    model = params.model
    if isinstance(model, HfModel):
        model = dataclasses.replace(model, dtype="float32")
    return dataclasses.replace(params, model=model, device="cpu")


def _check(params: LoadParams, fmt: str, folder: str) -> None:
    if isinstance(params.model, TinyModel):
        raise ExportRefused(
            f"checkpoint {folder} is the tiny built-in policy (a byte-level GPT of this project, not a transformers "
            "architecture): no PEFT or Hugging Face loader reads it. Its own format is the checkpoint folder itself "
            "(trainable.pt + config.json, documented in PROTOCOL.md), which `lightning run --checkpoint` serves; "
            "train a Hugging Face model (--model PATH) to export one"
        )
    if fmt == "peft" and not isinstance(params.adapter, LoraAdapter):
        raise ExportRefused(
            f"checkpoint {folder} is a full fine-tune: it has no adapter to write as PEFT; use --format hf"
        )
    if fmt == "peft" and params.model.from_config:
        raise ExportRefused(
            f"checkpoint {folder} trained LoRA on a base built from {params.model.name}/config.json with random "
            "weights (fromConfig): PeftModel.from_pretrained could never rebuild that base. Use --format merged "
            "(the whole model, base included)"
        )


def _target(out: str) -> Path:
    target = Path(out).resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BadParams(
            f"params.out: {target} already exists and is not an empty folder; name a new folder "
            "(the export never writes over files)"
        )
    return target


def export(params: ExportParams) -> dict:
    if params.adapters is not None:
        return export_set(params)
    target = _target(params.out)
    load = _saved_load_params(params.checkpoint)
    _check(load, params.format, params.checkpoint)
    from .session import build_policy

    torch.manual_seed(load.seed)  # a fromConfig base is the random init this seed made when the run loaded it
    policy = build_policy(load, torch.device("cpu"))
    checkpoint.restore_weights(params.checkpoint, policy)
    policy.model.eval()

    def write(folder: Path) -> None:
        if params.format == "peft":
            _write_adapter(policy, load, folder)
        else:
            model = policy.model.merge_and_unload() if policy.lora else policy.model
            model.save_pretrained(folder, safe_serialization=True)
        policy.tokenizer.save_pretrained(folder)

    _publish(target, write)
    return {
        "path": str(target),
        "format": params.format,
        "bytes": _dir_bytes(target),
        "files": sorted(p.name for p in target.iterdir()),
        "baseModel": load.model.name if params.format == "peft" else None,
    }


def _publish(target: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a hidden folder beside `target`, renamed to it once whole: a failed export leaves nothing
    half-written where the user asked for it (`target`, if it exists, is empty: checked by `_target`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        checkpoint.sync_tree(tmp)
        if target.exists():
            target.rmdir()
        checkpoint.durable_rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _lora_config(policy, modules_to_save=None):
    """A stock PEFT LoraConfig with the run's rank, alpha, dropout and targets (what `PeftModel.from_pretrained` reads)."""
    import peft

    lora = policy.model.peft_config["default"]
    return peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.lora_alpha,
        lora_dropout=lora.lora_dropout,
        target_modules=sorted(lora.target_modules),
        task_type="CAUSAL_LM",
        modules_to_save=modules_to_save,
    )


def _write_adapter(policy, load: LoadParams, folder: Path) -> None:
    """A fresh PEFT model on the stock base with the run's LoRA config (+ its trained norms as modules_to_save),
    given the checkpoint's weights, saved by PEFT itself: the adapter is what `PeftModel.from_pretrained` reads."""
    import peft
    import transformers

    trained = {n: p.detach() for n, p in policy.trainable().items()}
    norms = {n: v for n, v in trained.items() if "lora_" not in n}
    # modules_to_save matches module names by suffix: the leaf names of the modules whose norms trained.
    leaves = sorted({n.rsplit(".", 2)[-2] for n in norms})
    config = _lora_config(policy, modules_to_save=leaves or None)
    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    base = transformers.AutoModelForCausalLM.from_pretrained(load.model.name, **{dtype_key: torch.float32})
    fresh = peft.get_peft_model(base, config)
    named = dict(fresh.named_parameters())
    with torch.no_grad():
        for name, value in trained.items():
            prefix, leaf = name.rsplit(".", 1)
            key = name if name in named and "lora_" in name else f"{prefix}.modules_to_save.default.{leaf}"
            if key not in named:
                raise RuntimeError(f"the checkpoint's tensor {name} has no place in the PEFT adapter ({key})")
            named[key].copy_(value)
    fresh.save_pretrained(folder, safe_serialization=True)


def export_set(params: ExportParams) -> dict:
    """Several policies' checkpoints (one LoRA adapter each, `save {adapter}`) as one PEFT folder, written by PEFT
    itself from a model holding every adapter under its policy's name: `<out>/<policy>/adapter_config.json` and
    `adapter_model.safetensors` per policy, the tokenizer at the top. `PeftModel.from_pretrained(base, out,
    subfolder=NAME, adapter_name=NAME)` loads one; `load_adapter(out, adapter_name=OTHER, subfolder=OTHER)` adds the
    others (the layout `save_pretrained` gives any multi-adapter model)."""
    target = _target(params.out)
    loads = [(a.name, a.checkpoint, _saved_load_params(a.checkpoint)) for a in params.adapters]
    for _, folder, load in loads:
        _check(load, "peft", folder)
    bases = {load.model.name for _, _, load in loads}
    if len(bases) > 1:
        raise ExportRefused(
            f"these checkpoints trained adapters on different base models ({', '.join(sorted(bases))}): one PEFT "
            "folder holds adapters of one base; export them one at a time"
        )
    import peft
    import transformers

    from .session import build_policy

    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    base = transformers.AutoModelForCausalLM.from_pretrained(loads[0][2].model.name, **{dtype_key: torch.float32})
    fresh = None
    for name, folder, load in loads:
        torch.manual_seed(load.seed)
        policy = build_policy(load, torch.device("cpu"))  # the checkpoint's own LoRA config, its weights loaded
        checkpoint.restore_weights(folder, policy)
        if any("lora_" not in n for n in policy.trainable()):
            raise ExportRefused(
                f"checkpoint {folder} trained norms beside its adapter (trainNorms): they belong to the base model, "
                "which the adapters of one folder share; export it alone (--format peft without the set)"
            )
        config = _lora_config(policy)
        if fresh is None:
            fresh = peft.get_peft_model(base, config, adapter_name=name)
        else:
            fresh.add_adapter(name, config)
        named = dict(fresh.named_parameters())
        with torch.no_grad():
            for key, value in policy.trainable().items():
                own = key.replace(".default.", f".{name}.")
                if own not in named:
                    raise RuntimeError(f"the checkpoint's tensor {key} has no place in adapter {name} ({own})")
                named[own].copy_(value)

    def write(folder: Path) -> None:
        fresh.save_pretrained(folder, safe_serialization=True, selected_adapters=[name for name, _, _ in loads])
        policy.tokenizer.save_pretrained(folder)

    _publish(target, write)
    return {
        "path": str(target),
        "format": "peft",
        "bytes": _dir_bytes(target),
        "files": sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()),
        "baseModel": loads[0][2].model.name,
    }
