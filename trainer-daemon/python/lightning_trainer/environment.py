"""What this Python can do: versions of torch/transformers/peft, CUDA and the GPU. Used by the worker's ready line
and by doctor.py."""

from __future__ import annotations

import importlib
import platform
from typing import Optional


def module_version(name: str) -> Optional[str]:
    try:
        return importlib.import_module(name).__version__
    except Exception:  # missing or broken install: reported as absent
        return None


def cuda_info() -> Optional[dict]:
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return {
        "name": torch.cuda.get_device_name(0),
        "memoryFreeBytes": int(free),
        "memoryTotalBytes": int(total),
        "devices": torch.cuda.device_count(),
    }


def describe() -> dict:
    torch_version = module_version("torch")
    cuda = cuda_info() if torch_version else None
    return {
        "python": platform.python_version(),
        "torch": torch_version,
        "device": "cuda" if cuda else "cpu",
        "cuda": cuda,
        "transformers": module_version("transformers"),
        "peft": module_version("peft"),
    }
