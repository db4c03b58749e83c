#!/usr/bin/env bash
# The mechanism experiment on one GPU (config/mechanism_gpu.yaml, under 5 minutes of command time on an H100 or H200):
# many cells at once on the GPU, one process a cell, then a results bundle to carry home (rebuild its report anywhere with
# `snakemake --configfile config/mechanism_gpu.yaml --config bundle=FILE`).
#   bash scripts/mechanism_gpu.sh [--cells-per-gpu 12] [--gpus 1] [--cores N] [--wheelhouse DIR] [--dry-run]
#                                 [--out DIR] [--configfile FILE] [--no-setup] [-- SNAKEMAKE ARGS...]
#
# It sets .venv up first as scripts/gpu_check.sh does (its functions: the CUDA build of torch the driver supports;
# with --wheelhouse DIR, a folder scripts/wheelhouse.sh filled, from it alone, for machines no registry answers), then
#   MERIT_CELLS_PER_GPU=12 MERIT_GPUS=1 snakemake --configfile config/mechanism_gpu.yaml --cores N --resources gpu=12
#   snakemake --configfile config/mechanism_gpu.yaml bundle      # results/mechanism_gpu/bundle/mechanism_gpu.tar.gz
# --cells-per-gpu: cells sharing each GPU (src/merit_repro/launch/gpu_slots.py); --gpus: GPUs to use; --cores:
# default all of the machine's; --dry-run: plan only (snakemake -n) and its price at CELL_SECONDS (below), needs
# .venv, no GPU. The report is written to
# paper_figures/mechanism_gpu/. A run stopped part-way resumes where it stopped when started again.
# --out DIR, for a machine held a few minutes (`timeout 540 bash scripts/mechanism_gpu.sh --out DIR`): while it
# trains, every few seconds each finished cell's result files (not its checkpoints or weights) are copied to
# DIR/cells/<cell path>/ and DIR/partial.csv and partial.md (the finished cells; per LR the mean loss and peak MAL)
# written again (python -m merit_repro.report.partial); a SIGTERM or SIGINT stops snakemake's process group, writes
# them once more and exits non-zero; at the end the report and the bundle are copied there too (DIR/figures/,
# DIR/<bundle>.tar.gz). --configfile FILE: another config (default config/mechanism_gpu.yaml; its results and
# figures, not a --config override after --, are what --out copies); --no-setup: install nothing, run with $PYTHON
# or .venv/bin/python (a tiny config on the CPU, as the tests run it).
CONFIG=config/mechanism_gpu.yaml
tell() { echo "[mechanism_gpu.sh] $*" >&2; }
refuse() { echo "error: $*" >&2; exit 2; }   # (not fail: sourcing gpu_check.sh defines its own)

usage() {
  sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
}

# Seconds a cell of config/mechanism_gpu.yaml takes at each batch with 12 side by side: measured on one H200 at 2^23
# tokens (issue 43: 99-104 s at batch 16, 48-51 s at 128, about 15 s of it start-up), scaled to the config's 2^22
CELL_SECONDS=(16=58 128=33)

# Bounds of the flags (cells per GPU: src/merit_repro/launch/gpu_slots.py's MAX_CELLS_PER_GPU, which the jobs check)
MAX_CELLS_PER_GPU=64 MAX_GPUS=64 MAX_CORES=4096

whole() {   # $1: a flag, $2: its value, $3: its largest; digits of bounded length first: bash arithmetic wraps around
  if ! [[ $2 =~ ^[1-9][0-9]{0,5}$ ]] || (($2 > $3)); then
    refuse "$1 $2 must be a whole number >= 1 and <= $3: give one in that range"
  fi
}

absolute() {   # $1 made absolute against the folder the script was started in (before it leaves it)
  case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac
}

# With --out: the partial report (python -m merit_repro.report.partial) every WATCH_SECONDS from a background loop,
# and once more when training stops; snakemake runs in a process group of its own, which a stop ends (TERM, then
# KILL after STOP_SECONDS).
WATCH_SECONDS=3 STOP_SECONDS=20
OUT="" CONF="" PY="" WATCHER="" SNAKE=""

partial() {   # $1: what the report says of the run: running, stopped, failed, finished
  "$PY" -m merit_repro.report.partial --configfile "$CONF" --out "$OUT" --state "$1"
}

watch_cells() {   # in the background, until a TERM (which waits for the report in hand, if any)
  local nap=""
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep "$WATCH_SECONDS" & nap=$!
    wait "$nap" || true
    partial running || true
  done
}

stop_watcher() {
  [ -n "$WATCHER" ] || return 0
  kill -TERM "$WATCHER" 2>/dev/null || true
  wait "$WATCHER" 2>/dev/null || true
  WATCHER=""
}

in_own_group() {   # "$@" in a process group of its own (not the one a `timeout` signals), its status
  local status=0
  setsid "$@" & SNAKE=$!
  wait "$SNAKE" || status=$?
  SNAKE=""
  return "$status"
}

stopped() {   # the trap of TERM and INT: $1 the signal, $2 the exit status
  trap - TERM INT
  tell "$1: stopping snakemake; the finished cells and partial.md are in $OUT"
  [ -z "$SNAKE" ] || kill -TERM -- "-$SNAKE" 2>/dev/null || true
  stop_watcher
  partial stopped || true
  if [ -n "$SNAKE" ]; then
    local waited=0
    while kill -0 -- "-$SNAKE" 2>/dev/null && [ "$waited" -lt $((STOP_SECONDS * 2)) ]; do
      sleep 0.5
      waited=$((waited + 1))
    done
    kill -KILL -- "-$SNAKE" 2>/dev/null || true
  fi
  exit "$2"
}

watched() {   # "$@": the training command; then main's snakemake makes the bundle. Their status.
  tell "copying each finished cell to $OUT/cells/ and writing $OUT/partial.md every $WATCH_SECONDS s"
  trap 'stopped SIGTERM 143' TERM
  trap 'stopped SIGINT 130' INT
  watch_cells & WATCHER=$!
  local status=0
  in_own_group "$@" || status=$?
  [ "$status" != 0 ] || in_own_group "${snakemake[@]}" --cores 1 bundle || status=$?
  stop_watcher
  if [ "$status" = 0 ]; then partial finished; else partial failed || true; fi
  trap - TERM INT
  return "$status"
}

main() {
  local cells=12 gpus=1 cores="" wheelhouse="" dry_run=0 setup=1 out_dir="" config="" extra=()
  while [ $# -gt 0 ]; do
    case $1 in
      -h | --help) usage; return 0 ;;
      --cells-per-gpu | --gpus | --cores | --wheelhouse | --out | --configfile)
        [ $# -gt 1 ] && [ -n "$2" ] || refuse "$1 needs a value"
        case $1 in
          --cells-per-gpu) cells=$2 ;;
          --gpus) gpus=$2 ;;
          --cores) cores=$2 ;;
          --wheelhouse) wheelhouse=$2 ;;
          --out) out_dir=$2 ;;
          --configfile) config=$2 ;;
        esac
        shift ;;
      --dry-run) dry_run=1 ;;
      --no-setup) setup=0 ;;
      --) shift; extra=("$@"); break ;;
      *) refuse "unknown argument $1 (see --help)" ;;
    esac
    shift
  done
  whole --cells-per-gpu "$cells" "$MAX_CELLS_PER_GPU"
  whole --gpus "$gpus" "$MAX_GPUS"
  [ -z "$cores" ] || whole --cores "$cores" "$MAX_CORES"
  [ "$setup" = 1 ] || [ -z "$wheelhouse" ] || refuse "--wheelhouse with --no-setup: --no-setup installs nothing"
  if [ -n "$out_dir" ]; then
    [ "$dry_run" = 0 ] || refuse "--out with --dry-run: a dry run trains nothing to copy"
    [ ! -e "$out_dir" ] || [ -d "$out_dir" ] ||
      refuse "--out $out_dir is a file: give a folder (it is made when missing)"
    command -v setsid >/dev/null || refuse "--out needs setsid (util-linux) to stop snakemake's process group"
    out_dir=$(absolute "$out_dir")
  fi
  if [ -n "$config" ]; then
    [ -f "$config" ] || refuse "--configfile $config: no such file: give a workflow config (default $CONFIG)"
    config=$(absolute "$config")
  fi
  if [ -n "$wheelhouse" ] && [ -d "$wheelhouse" ]; then
    wheelhouse=$(cd "$wheelhouse" && pwd)   # before leaving the folder it is relative to
  fi
  local py=.venv/bin/python
  if [ "$setup" = 0 ] && [ -n "${PYTHON:-}" ]; then
    case $PYTHON in */*) py=$(absolute "$PYTHON") ;; *) py=$PYTHON ;; esac
  fi
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  config=${config:-$CONFIG}
  # shellcheck source=SCRIPTDIR/gpu_check.sh
  source scripts/gpu_check.sh   # its functions only: it runs itself only when executed
  if [ "$dry_run" = 1 ] || [ "$setup" = 0 ]; then
    command -v "$py" >/dev/null || refuse "no .venv here (nor \$PYTHON with --no-setup): run 'bash scripts/setup.sh'" \
      "first (a dry run and --no-setup install nothing)"
  elif [ -n "$wheelhouse" ]; then
    set_up_from "$wheelhouse" 0
  else
    set_up
  fi
  cores=${cores:-$(nproc)}
  local snakemake=("$py" -m snakemake --configfile "$config")
  local slots=$((cells * gpus))
  if [ "$dry_run" = 1 ]; then
    "${snakemake[@]}" -n --cores "$cores" --resources gpu="$slots" "${extra[@]+"${extra[@]}"}"
    if [ "$config" = "$CONFIG" ]; then
      "$py" -m merit_repro.plan.cost --configfile "$config" --slots "$slots" --cell-seconds "${CELL_SECONDS[@]}"
    fi
    return
  fi
  if [ -n "$out_dir" ]; then
    OUT=$out_dir CONF=$config PY=$py
    partial running   # refuses an --out that overlaps the config's results or figures before anything trains
  fi
  tell "training: $cells cells at once on each of $gpus GPU(s), $cores cores"
  local train=(env MERIT_CELLS_PER_GPU="$cells" MERIT_GPUS="$gpus" "${snakemake[@]}" --cores "$cores"
    --resources gpu="$slots" "${extra[@]+"${extra[@]}"}")
  if [ -n "$out_dir" ]; then
    watched "${train[@]}"
    tell "done: the report (figures/) and the bundle copied to $OUT, beside the finished cells"
    return
  fi
  "${train[@]}"
  "${snakemake[@]}" --cores 1 bundle
  if [ "$config" = "$CONFIG" ]; then
    tell "done: the report in paper_figures/mechanism_gpu/, the bundle in results/mechanism_gpu/bundle/"
  else
    tell "done: the report in the config's figures folder, the bundle in its results folder's bundle/"
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then   # run, not sourced
  set -euo pipefail
  main "$@"
fi
