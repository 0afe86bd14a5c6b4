#!/usr/bin/env bash
# Prepared GPU check of the trainer worker (see check.py). Needs torch (CUDA), transformers, peft, tokenizers.
# PYTHON=/path/to/python to pick the interpreter; LIGHTNING_GPU_CHECK_CPU=1 for the tiny CPU variant.
# Exits non-zero on any failure; bounded to 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec timeout 480 "${PYTHON:-python3}" test/gpu/check.py
