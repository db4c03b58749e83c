#!/usr/bin/env bash
# Check a GPU machine before spending GPU-hours on config/paper.yaml or config/gpu1.yaml (under 5 minutes on
# one H200, torch.compile included): the trainer through the workflow on CUDA, bf16 and torch.compile parity,
# DDP with a stop and resume through torchrun, host syncs in MERIT's and LAMB's steps, the micro-batch fit
# with real steps, tokens/s and MFU per model size, the optimizers against the float64 reference
# (python -m merit_repro.gpu_check --help says what each part checks). Prints one table, writes it as JSON
# (results/gpu_check.json unless --out is given) and exits 1 on any mismatch.
#   bash scripts/gpu_check.sh [--parts 2,4] [--quick] [--out FILE.json] [--device cpu] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "gpu_check: no .venv here: run 'bash scripts/setup.sh' first (with a CUDA build of torch on a GPU machine)" >&2
  exit 1
fi
case " $* " in
  *" --out "* | *" --out="*) ;;
  *) set -- "$@" --out results/gpu_check.json ;;
esac
exec .venv/bin/python -m merit_repro.gpu_check "$@"
