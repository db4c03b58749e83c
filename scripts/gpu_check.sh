#!/usr/bin/env bash
# Check a CUDA machine before spending GPU-hours on config/paper.yaml (about 3 minutes on one H100):
# the optimizers on CUDA against the float64 reference (fp32 and bf16 parameters, both code paths),
# GPT-2 Small training eager and compiled (tokens/s, MFU, peak memory), MERIT/LAMB step time against
# fused AdamW, the MAL probe and micro-batch fitting. Exits non-zero on any mismatch; without a GPU it
# says so and exits 0.  Usage: bash scripts/gpu_check.sh [--out gpu_check.json] [--steps 30]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
exec "$PYTHON" -m merit_repro.gpu_check "$@"
