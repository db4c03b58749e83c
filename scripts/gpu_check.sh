#!/usr/bin/env bash
# Check a GPU machine before spending GPU-hours on config/paper.yaml or config/gpu1.yaml: the trainer through the
# workflow on CUDA, bf16 and torch.compile parity, DDP with a stop and resume through torchrun (two ranks sharing
# the GPU when there is one), host syncs in MERIT's and LAMB's steps, the micro-batch fit with real steps, tokens/s
# and MFU per model size, the optimizers against the float64 reference, and config/gpu1.yaml's GPU-hours from a
# compiled trainer cell's measured tokens/s (python -m merit_repro.gpu_check --help says what each part checks).
# Prints one table, writes it as JSON (results/gpu_check.json unless --out is given), exits 1 on any mismatch.
#   bash scripts/gpu_check.sh [--parts 2,4] [--quick] [--out FILE.json] [--device cpu] [--keep] [--wheelhouse DIR]
#
# On a bare GPU machine (this repo and the package registries only) it sets itself up first, about 5 minutes:
# Debian's python3-venv, a C compiler and Python's headers (torch.compile builds C) when missing and apt-get is
# there; then .venv (scripts/setup.sh) with the torch wheel built for the newest CUDA the driver supports
# (nvidia-smi's "CUDA Version"; TORCH_CUDA_BUILDS lists the builds tried, newest first). A .venv whose torch
# cannot use the GPU gets that wheel instead. --device cpu installs nothing and needs .venv.
# Where no registry answers (many clusters' compute nodes): --wheelhouse DIR, a folder scripts/wheelhouse.sh filled
# elsewhere, sets .venv up from it alone on top of the machine's own CUDA torch (WHEELHOUSE=DIR scripts/setup.sh),
# with --device cpu too; nothing from apt-get.
TORCH_CUDA_BUILDS=${TORCH_CUDA_BUILDS:-"13.0:cu130 12.8:cu128 12.6:cu126"}   # the CUDA builds of torch 2.13
TORCH_WHEELS=${TORCH_WHEELS:-https://download.pytorch.org/whl}
say() { echo "[gpu_check.sh] $*" >&2; }
fail() { echo "error: $*" >&2; exit 1; }

driver_cuda() {   # "12.8" from nvidia-smi's header, "" without a driver
  nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1
}

wheel_for() {   # the newest build in TORCH_CUDA_BUILDS whose CUDA the driver supports: "cu128"
  local have=$1 entry
  for entry in $TORCH_CUDA_BUILDS; do
    if [ "$(printf '%s\n%s\n' "${entry%%:*}" "$have" | sort -V | head -n 1)" = "${entry%%:*}" ]; then
      echo "${entry#*:}"
      return
    fi
  done
}

apt_install() {   # Debian packages, when this user can install them
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    say "installing $* (apt-get)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    return 1
  fi
}

set_up() {
  local cuda wheel
  cuda=$(driver_cuda)
  [ -n "$cuda" ] || fail "no NVIDIA driver answers here (nvidia-smi): run this on the GPU machine, or add --device cpu (then run 'bash scripts/setup.sh' first)"
  wheel=$(wheel_for "$cuda")
  [ -n "$wheel" ] || fail "the driver supports CUDA $cuda, older than every torch build tried ($TORCH_CUDA_BUILDS): update the driver, or set TORCH_CUDA_BUILDS to a build it supports"
  python3 -c "import ensurepip" 2>/dev/null || apt_install python3-venv ||
    fail "python3 cannot make a venv (no ensurepip): install Debian's python3-venv (or your distribution's) and run again"
  compiler_ready || apt_install build-essential python3-dev || say "$NO_COMPILER"
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    return
  fi
  local torch
  torch=$(torch_requirement)
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
    say "the torch in .venv cannot use this GPU (driver CUDA $cuda): installing $torch for $wheel"
    .venv/bin/python -m pip install -q --force-reinstall "$torch" --index-url "$TORCH_WHEELS/$wheel"
  else
    say "setting up .venv with $torch for $wheel (driver CUDA $cuda)"
  fi
  TORCH_REQUIREMENT="$torch" TORCH_PIP_ARGS="--index-url $TORCH_WHEELS/$wheel" bash scripts/setup.sh
}

torch_requirement() {   # the torch scripts/setup.sh installs ("torch==2.13.0"), or $TORCH_REQUIREMENT
  # shellcheck source=SCRIPTDIR/setup.sh
  (source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" && echo "$TORCH_REQUIREMENT")
}

NO_COMPILER="warning: no C compiler or no Python.h: torch.compile's parts will fail; install them"

compiler_ready() {   # torch.compile builds C
  local include
  include=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  command -v cc >/dev/null && [ -f "$include/Python.h" ]
}

set_up_from() {   # $1: a wheelhouse; $2: 1 for --device cpu
  [ -d "$1" ] ||
    fail "--wheelhouse $1: no such folder: give the folder scripts/wheelhouse.sh filled, copied whole to this machine"
  if [ "$2" = 0 ]; then
    compiler_ready || say "$NO_COMPILER"
  fi
  WHEELHOUSE="$1" bash scripts/setup.sh
  if [ "$2" = 0 ] && command -v nvidia-smi >/dev/null &&
    ! .venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is None)"; then
    fail "the torch .venv sees is a CPU-only build ($(.venv/bin/python -c "import torch; print(torch.__path__[0])")):" \
      "remove .venv and run again with PYTHON set to the Python that has the machine's CUDA torch"
  fi
}

main() {
  local on_cpu=0 wheelhouse="" args=()
  while [ $# -gt 0 ]; do   # --wheelhouse is this script's; the rest goes to the check
    case $1 in
      --wheelhouse) [ $# -gt 1 ] || fail "--wheelhouse needs a folder: --wheelhouse DIR"; wheelhouse=$2; shift ;;
      --wheelhouse=*) wheelhouse=${1#*=} ;;
      *) args+=("$1") ;;
    esac
    shift
  done
  set -- "${args[@]+"${args[@]}"}"
  if [ -n "$wheelhouse" ] && [ -d "$wheelhouse" ]; then
    wheelhouse=$(cd "$wheelhouse" && pwd)   # before leaving the folder it is relative to
  fi
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  case " $* " in *" --device cpu "* | *" --device=cpu "*) on_cpu=1 ;; esac
  if [ -n "$wheelhouse" ]; then
    set_up_from "$wheelhouse" "$on_cpu"
  elif [ "$on_cpu" = 1 ] || ! command -v nvidia-smi >/dev/null; then
    if [ ! -x .venv/bin/python ]; then
      fail "no .venv here and no GPU driver (nvidia-smi): run 'bash scripts/setup.sh' first (on a GPU machine this script sets itself up)"
    fi
  else
    set_up
  fi
  case " $* " in
    *" --out "* | *" --out="*) ;;
    *) set -- "$@" --out results/gpu_check.json ;;
  esac
  exec .venv/bin/python -m merit_repro.gpu_check "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then   # run, not sourced (the tests source it for its functions) ...
  set -euo pipefail   # ... so that the strict options are this script's own, never a sourcing shell's
  main "$@"
fi
