"""`python3 -m lightning_trainer.doctor`: one JSON object saying what this Python can do for training, and how
to fix what is missing. `lightning doctor` runs it with the configured Python and shows the result."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .environment import describe


def _debian() -> bool:
    return os.path.exists("/etc/debian_version") and shutil.which("apt-get") is not None


def _pip_reaches_an_index() -> bool:
    """True when `pip download` can fetch a small package (no install happens)."""
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--retries",
                "0",
                "--timeout",
                "5",
                "-d",
                os.path.join(os.environ.get("TMPDIR", "/tmp"), "lightning-doctor-pip"),
                "six",
            ],
            capture_output=True,
            timeout=20,
        )
        return run.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _blas() -> str | None:
    """Which BLAS torch's CPU matmuls use: from torch.__config__, else from the libraries loaded in this process."""
    try:
        import torch
    except ImportError:
        return None
    torch.ones(4, 4) @ torch.ones(4, 4)  # make sure the BLAS library is loaded
    config = torch.__config__.show().replace(" ", "")
    for name in ("mkl", "openblas"):
        if f"BLAS_INFO={name}" in config:
            return name
    maps = Path("/proc/self/maps").read_text() if os.path.exists("/proc/self/maps") else ""
    if "openblas" in maps:
        return "openblas"
    if "libmkl" in maps:
        return "mkl"
    return "reference" if "libblas" in maps else "unknown"


def problems(info: dict, pip_ok: bool, debian: bool) -> list[dict]:
    found = []
    install = "pip install" if pip_ok else None
    if info["torch"] is None:
        fix = (
            "apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread"
            if debian and not pip_ok
            else "pip install torch"
            if pip_ok
            else "install PyTorch for this Python (https://pytorch.org)"
        )
        found.append({"problem": "PyTorch is not installed for this Python", "fix": fix})
    elif info["blas"] == "reference":
        fix = (
            "apt-get install -y --no-install-recommends libopenblas0-pthread"
            if debian
            else "install an optimized BLAS (OpenBLAS)"
        )
        found.append({"problem": "torch is using a slow reference BLAS", "fix": fix})
    for name in ("transformers", "peft"):
        if info[name] is None:
            fix = f"{install} {name}" if install else f"install {name} for this Python (pip cannot reach an index here)"
            found.append(
                {
                    "problem": f"{name} is not installed: Hugging Face models (kind 'hf') are unavailable; "
                    "the built-in tiny model still works",
                    "fix": fix,
                    "optional": True,
                }
            )
    if info["torch"] and info["cuda"] is None:
        found.append(
            {
                "problem": "no CUDA GPU is visible to torch: training runs on the CPU (fine for the tiny model)",
                "fix": "install a CUDA build of torch and the NVIDIA driver to train Hugging Face models",
                "optional": True,
            }
        )
    return found


def report() -> dict:
    info = describe()
    info["blas"] = _blas()
    pip_ok = _pip_reaches_an_index()
    info["executable"] = sys.executable
    info["pipReachesIndex"] = pip_ok
    info["problems"] = problems(info, pip_ok, _debian())
    info["ok"] = not any(not p.get("optional") for p in info["problems"])
    return info


def main() -> None:
    print(json.dumps(report()))


if __name__ == "__main__":
    main()
