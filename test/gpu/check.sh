#!/usr/bin/env bash
# The prepared GPU check (check.py): a ~0.5B Qwen2 built from a config, trained in bf16 with LoRA by
# `lightning train`, exported (PEFT and merged), the exports loaded by stock transformers, and update and serving
# tokens/s printed beside the bounds a bare bf16 matmul gives on the device. Then the worker-level probe
# (worker_check.py: every loss type, served vs training logprobs, resume) unless `train` is given.
#
#   test/gpu/check.sh [all|train|worker]        # default all; on a CUDA machine
#   LIGHTNING_GPU_CHECK_CPU=1 test/gpu/check.sh  # the same steps with a tiny model on the CPU (a dry run)
#
# Needs: Node ≥ 20 (22.5+ when better-sqlite3's binary does not load: the store falls back to node:sqlite), a
# Python with torch (CUDA), transformers, peft and tokenizers (PYTHON=/path/to/python picks it; NODE= the node).
# dist/cli.js is built first when it is missing and node_modules is there. Nothing is downloaded. Each part is
# bounded (9 and 6 minutes); any failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
NODE="${NODE:-node}"
export NODE
what="${1:-all}"
case "$what" in all | train | worker) ;; *) echo "usage: $0 [all|train|worker]" >&2; exit 2 ;; esac
if [ "$what" != worker ]; then
  "$NODE" -e 'const [major] = process.versions.node.split(".").map(Number); if (major < 20) { console.error(`Node ${process.versions.node}: the CLI needs 20 or later`); process.exit(1); }'
  if [ ! -f dist/cli.js ]; then
    [ -d node_modules ] || { echo "dist/cli.js is missing and there is no node_modules to build it (npm ci && npm run build)" >&2; exit 1; }
    npm run build
  fi
  timeout 540 "$PYTHON" test/gpu/check.py
fi
if [ "$what" != train ]; then
  timeout 360 "$PYTHON" test/gpu/worker_check.py
fi
