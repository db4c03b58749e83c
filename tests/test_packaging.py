"""MERIT for people who only want the optimizer: the wheel's own requirements are torch and numpy, and installed
into an empty virtual environment it gives the optimizers and models without any of the pipeline's packages."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
from helpers import REPO

PIPELINE_ONLY = {"pyyaml", "pandas", "scipy", "matplotlib", "snakemake", "jsonschema", "tiktoken", "datasets",
                 "tokenizers", "tqdm", "lm-eval", "transformers", "accelerate"}
HUGGINGFACE_SIDE = {"datasets", "lm-eval", "transformers", "accelerate"}   # in pipeline, not in core

USE_IT = """
import json, sys
import torch
from merit_repro.optim import MERIT, Lamb
from merit_repro.models import GPT, GPTConfig
model = GPT(GPTConfig.named("demo-tiny", block_size=16, vocab_size=64))
opt = MERIT(model.parameters(), lr=1e-3)
x = torch.randint(0, 64, (2, 16))
_, loss = model(x, x)
loss.backward()
opt.step()
import merit_repro
print(merit_repro.__file__)
print(json.dumps(sorted(name for name in sys.modules if "." not in name)))
"""


def built_wheel(tmp_path):
    """The project's wheel, built from a copy of what it packages (the checkout stays free of build/)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ["pyproject.toml", "README.md", "LICENSE"]:
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return next((tmp_path / "dist").glob("merit_repro-*.whl"))


def test_the_wheel_requires_torch_and_numpy_and_the_pipeline_only_as_an_extra(tmp_path):
    """pipeline is core (by a self-reference, merit-repro[core]) and the HuggingFace side: what it installs is what
    it did before core was split off."""
    wheel = built_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    plain = {r.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip() for r in requires if ";" not in r}
    assert plain == {"torch", "numpy"}

    def extra(name):
        return {r.split(";")[0].split(">")[0].split("<")[0].strip() for r in requires if f'extra == "{name}"' in r}

    assert extra("core") == PIPELINE_ONLY - HUGGINGFACE_SIDE
    assert extra("pipeline") == HUGGINGFACE_SIDE | {"merit-repro[core]"}


@pytest.mark.slow
def test_merit_alone_installs_into_an_empty_venv_and_trains(tmp_path):
    """torch is the same release as here (scripts/setup.sh's pin: the CPU wheel on these machines)."""
    wheel = built_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip"]
    # Without the tests' PYTHONPATH (conftest: the checkout's src/): its merit_repro.egg-info, which an editable
    # install leaves there, would count as merit-repro "already installed" and the wheel would be skipped.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"
    r = subprocess.run([*pip, "install", "-q", "--no-compile", torch_pin, str(wheel)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([*pip, "list", "--format", "json"], capture_output=True, text=True, env=env)
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(r.stdout)}
    assert "merit-repro" in installed and not installed & PIPELINE_ONLY, installed & PIPELINE_ONLY
    r = subprocess.run([str(python), "-c", USE_IT], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[-2].startswith(str(venv))
    imported = set(json.loads(r.stdout.splitlines()[-1]))
    assert "merit_repro" in imported and not imported & {"yaml", "pandas", "scipy", "matplotlib", "snakemake"}
