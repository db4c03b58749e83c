"""The package's layers (pyproject.toml's import-linter contracts), the names each stage looks up once, and the
mutation check's list, which must still apply to the code it mutates."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    """Each stage imports only the stages below it; config, plan and report never import torch; the optimizers
    and models need torch and numpy only."""
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    run = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    broken = re.findall(r"(\d+) broken", run.stdout.lower().split("contracts:")[-1])
    assert broken and all(n == "0" for n in broken), run.stdout   # ("10 broken" holds "0 broken")


def test_every_optimizer_of_the_registry_builds_with_its_fixed_switches():
    import torch

    from merit_repro.config.registry import OPTIMIZERS
    from merit_repro.optim import build

    for name, spec in OPTIMIZERS.items():
        opt = build(name, [torch.nn.Parameter(torch.zeros(2, 2))], lr=1e-3)
        assert type(opt).__name__ == spec.cls
        for key, value in spec.fixed.items():
            assert opt.defaults[key] == value, (name, key)


def test_every_artifact_of_the_registry_has_its_module():
    from merit_repro.config.registry import ARTIFACTS
    from merit_repro.report.artifacts import ARTIFACT_FUNCTIONS

    assert set(ARTIFACT_FUNCTIONS) == set(ARTIFACTS)


def test_every_mutation_of_the_mutation_check_still_applies():
    """scripts/mutation_check.py stops at the first mutation whose text it does not find exactly once in its file: a
    module moved or edited takes its mutations along, and each names test files that exist."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutation_check", REPO / "scripts" / "mutation_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    stale = [(m.name, m.path, old[:60]) for m in check.MUTATIONS for old, _ in m.edits
             if not (REPO / m.path).is_file() or (REPO / m.path).read_text().count(old) != 1]
    missing = [(m.name, t) for m in check.MUTATIONS for t in m.tests if not (REPO / t).is_file()]
    assert not stale and not missing, (stale, missing)
