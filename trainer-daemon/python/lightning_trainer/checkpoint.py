"""Checkpoints: trainable weights (LoRA adapters + norms, or the whole model) + optimizer + step + config + metrics.

Written to a temporary sibling folder, flushed to disk (its files and folder fsynced), and renamed into place, the
rename itself flushed: a crash or a power loss never leaves a half-written checkpoint under the final name, nor a name
the daemon recorded that comes back empty. Layout: trainable.pt, optimizer.pt, config.json ({model, adapter, optimizer, step, ...}),
metrics.json. optimizer.pt is only needed to resume a run: the daemon's retention deletes it from every checkpoint
but the newest (training/retention.ts), and a checkpoint without it loads with a fresh optimizer.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from pathlib import Path

import torch

from .policy import Policy


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def save(path: str, policy: Policy, optimizer: torch.optim.Optimizer, config: dict, metrics: dict) -> dict:
    weights = {n: p.detach().cpu() for n, p in policy.trainable().items()}
    return write(path, weights, optimizer.state_dict(), config, metrics)


# Some file systems (network, FUSE) cannot fsync a folder: its entries are then as durable as they make them.
_FOLDER_SYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if not (path.is_dir() and error.errno in _FOLDER_SYNC_UNSUPPORTED):
            raise
    finally:
        os.close(fd)


def sync_tree(folder: Path) -> None:
    """Flushes every file under `folder` and the folders themselves (their entries) to disk."""
    for entry in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        _fsync(entry)
    _fsync(folder)


def durable_rename(tmp: Path, target: Path) -> None:
    """`tmp`, flushed already (sync_tree), becomes `target`, the rename flushed with its parent folder."""
    os.rename(tmp, target)
    _fsync(target.parent)


def write(path: str, weights: dict, optimizer_state: dict, config: dict, metrics: dict) -> dict:
    """The checkpoint folder from its parts (FSDP gathers them from the ranks first: fsdp.py)."""
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        torch.save(weights, tmp / "trainable.pt")
        torch.save(optimizer_state, tmp / "optimizer.pt")
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
        # Flushed before the name moves: the renames below sit back to back, never with a long flush between them.
        sync_tree(tmp)
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(target, old)
            try:
                durable_rename(tmp, target)
            except BaseException:
                if not target.exists():
                    os.rename(old, target)  # the previous checkpoint keeps its name
                raise
            shutil.rmtree(old)
        else:
            durable_rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"path": str(target), "bytes": _dir_bytes(target)}


def read_config(path: str) -> dict:
    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint (no config.json)")
    return json.loads(file.read_text())


def restore(path: str, policy: Policy, optimizer: torch.optim.Optimizer) -> int:
    """Load weights and optimizer state into an already built policy; returns the checkpoint's step."""
    step = restore_weights(path, policy)
    if has_optimizer(path):
        optimizer.load_state_dict(read_optimizer(path, policy.device))
    return step


def has_optimizer(path: str) -> bool:
    """Whether the checkpoint kept its optimizer state (retention keeps it only for the checkpoint a run resumes)."""
    return (Path(path) / "optimizer.pt").is_file()


def read_optimizer(path: str, device: torch.device) -> dict:
    return torch.load(Path(path) / "optimizer.pt", map_location=device)


def restore_weights(path: str, policy: Policy) -> int:
    """The checkpoint's trainable weights into a built (unsharded) policy; returns the checkpoint's step."""
    return _copy_weights(path, policy.trainable(), policy.device)


def restore_named(path: str, into: dict, optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """A checkpoint into the given parameters (one policy's adapter, by the names its checkpoint uses) and their
    optimizer (when the checkpoint kept its state); returns the checkpoint's step."""
    step = _copy_weights(path, into, device)
    if has_optimizer(path):
        optimizer.load_state_dict(read_optimizer(path, device))
    return step


def _copy_weights(path: str, trainable: dict, device: torch.device) -> int:
    weights = torch.load(Path(path) / "trainable.pt", map_location=device)
    if set(weights) != set(trainable):
        raise ValueError(
            f"checkpoint {path} was written for a different model or adapter "
            f"({len(weights)} tensors, this model trains {len(trainable)})"
        )
    with torch.no_grad():
        for name, value in weights.items():
            trainable[name].copy_(value)
    return int(read_config(path).get("step", 0))
