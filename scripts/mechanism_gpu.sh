#!/usr/bin/env bash
# The mechanism experiment on one GPU (config/mechanism_gpu.yaml, about 10 minutes on an H200): many cells at once on
# the GPU, one process a cell, then a results bundle to carry home (rebuild its report anywhere with
# `snakemake --configfile config/mechanism_gpu.yaml --config bundle=FILE`).
#   bash scripts/mechanism_gpu.sh [--cells-per-gpu 12] [--gpus 1] [--cores N] [--wheelhouse DIR] [--dry-run]
#                                 [-- SNAKEMAKE ARGS...]
#
# It sets .venv up first as scripts/gpu_check.sh does (its functions: the CUDA build of torch the driver supports;
# with --wheelhouse DIR, a folder scripts/wheelhouse.sh filled, from it alone, for machines no registry answers), then
#   MERIT_CELLS_PER_GPU=12 MERIT_GPUS=1 snakemake --configfile config/mechanism_gpu.yaml --cores N --resources gpu=12
#   snakemake --configfile config/mechanism_gpu.yaml bundle      # results/mechanism_gpu/bundle/mechanism_gpu.tar.gz
# --cells-per-gpu: cells sharing each GPU (src/merit_repro/launch/gpu_slots.py); --gpus: GPUs to use; --cores:
# default all of the machine's; --dry-run: plan only (snakemake -n), needs .venv, no GPU. The report is written to
# paper_figures/mechanism_gpu/. A run stopped part-way resumes where it stopped when started again.
CONFIG=config/mechanism_gpu.yaml
tell() { echo "[mechanism_gpu.sh] $*" >&2; }
refuse() { echo "error: $*" >&2; exit 2; }   # (not fail: sourcing gpu_check.sh defines its own)

usage() {
  sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
}

# Bounds of the flags (cells per GPU: src/merit_repro/launch/gpu_slots.py's MAX_CELLS_PER_GPU, which the jobs check)
MAX_CELLS_PER_GPU=64 MAX_GPUS=64 MAX_CORES=4096

whole() {   # $1: a flag, $2: its value, $3: its largest; digits of bounded length first: bash arithmetic wraps around
  if ! [[ $2 =~ ^[1-9][0-9]{0,5}$ ]] || (($2 > $3)); then
    refuse "$1 $2 must be a whole number >= 1 and <= $3: give one in that range"
  fi
}

main() {
  local cells=12 gpus=1 cores="" wheelhouse="" dry_run=0 extra=()
  while [ $# -gt 0 ]; do
    case $1 in
      -h | --help) usage; return 0 ;;
      --cells-per-gpu | --gpus | --cores | --wheelhouse)
        [ $# -gt 1 ] || refuse "$1 needs a value"
        case $1 in
          --cells-per-gpu) cells=$2 ;;
          --gpus) gpus=$2 ;;
          --cores) cores=$2 ;;
          --wheelhouse) wheelhouse=$2 ;;
        esac
        shift ;;
      --dry-run) dry_run=1 ;;
      --) shift; extra=("$@"); break ;;
      *) refuse "unknown argument $1 (see --help)" ;;
    esac
    shift
  done
  whole --cells-per-gpu "$cells" "$MAX_CELLS_PER_GPU"
  whole --gpus "$gpus" "$MAX_GPUS"
  [ -z "$cores" ] || whole --cores "$cores" "$MAX_CORES"
  if [ -n "$wheelhouse" ] && [ -d "$wheelhouse" ]; then
    wheelhouse=$(cd "$wheelhouse" && pwd)   # before leaving the folder it is relative to
  fi
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  # shellcheck source=SCRIPTDIR/gpu_check.sh
  source scripts/gpu_check.sh   # its functions only: it runs itself only when executed
  if [ "$dry_run" = 1 ]; then
    [ -x .venv/bin/python ] || refuse "no .venv here: run 'bash scripts/setup.sh' first (a dry run installs nothing)"
  elif [ -n "$wheelhouse" ]; then
    set_up_from "$wheelhouse" 0
  else
    set_up
  fi
  cores=${cores:-$(nproc)}
  local snakemake=(.venv/bin/python -m snakemake --configfile "$CONFIG")
  local slots=$((cells * gpus))
  if [ "$dry_run" = 1 ]; then
    "${snakemake[@]}" -n --cores "$cores" --resources gpu="$slots" "${extra[@]+"${extra[@]}"}"
    return
  fi
  tell "training: $cells cells at once on each of $gpus GPU(s), $cores cores"
  MERIT_CELLS_PER_GPU=$cells MERIT_GPUS=$gpus "${snakemake[@]}" --cores "$cores" --resources gpu="$slots" \
    "${extra[@]+"${extra[@]}"}"
  "${snakemake[@]}" --cores 1 bundle
  tell "done: the report in paper_figures/mechanism_gpu/, the bundle in results/mechanism_gpu/bundle/"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then   # run, not sourced
  set -euo pipefail
  main "$@"
fi
