"""The workflow's output folders are its own (merit_repro.plan.folders): new or empty ones are claimed, its own are
accepted, an earlier version's layout is adopted, anything else is refused in one line naming what it holds."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from merit_repro.plan import folders
from merit_repro.utils import UserError, read_json

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = ("val_loss_vs_batch", "lr_sensitivity", "mal_vs_step")


def make(folder, *names):
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    return folder


def plan(results, figures, adopt=False):
    return folders.plan_claims({"results": str(results), "figures": str(figures)}, ARTIFACTS, adopt)


def refusal(results, figures, adopt=False):
    with pytest.raises(UserError) as err:
        plan(results, figures, adopt)
    line = str(err.value)
    assert "\n" not in line
    return line


def legacy_figures(folder):
    outputs = [f"{a}/sweep{ext}" for a in ARTIFACTS[:2] for ext in folders.ARTIFACT_SUFFIXES]
    return make(folder, "README.md", "claims.csv", ".gitkeep", *outputs)


def legacy_results(folder):
    return make(folder, "runs/S/262144/adamw/bs16/lr1e-3/seed0/summary.json", "tables/runs.csv",
                "logs/report/collect_runs.log", "tuning/x/final.json", "gpu_check.json")


def test_new_folders_are_claimed_when_the_run_starts_and_then_are_its_own(tmp_path):
    claims = plan(tmp_path / "results", tmp_path / "figures")
    assert {r["role"]: r["claimed"] for r in claims.values()} == {"results": "new", "figures": "new"}
    assert not (tmp_path / "results").exists()   # planning writes nothing
    folders.claim(claims)
    record = read_json(tmp_path / "figures" / folders.RECORD)
    assert record["what"] == folders.WHAT and record["role"] == "figures" and record["found"] == []
    make(tmp_path / "figures", "README.md", "claims.csv", "notes.txt")   # its own now, whatever it holds
    assert plan(tmp_path / "results", tmp_path / "figures") == {}


def test_an_empty_folder_or_a_clones_placeholder_is_claimed(tmp_path):
    (tmp_path / "results").mkdir()
    make(tmp_path / "figures", ".gitkeep")
    claims = plan(tmp_path / "results", tmp_path / "figures")
    assert [r["claimed"] for r in claims.values()] == ["empty", "empty"]


def test_the_repos_committed_paper_figures_files_are_placeholders():
    tracked = subprocess.run(["git", "ls-files", "paper_figures"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode:
        pytest.skip("not a git checkout")
    assert all(Path(name).name in folders.PLACEHOLDERS for name in tracked.stdout.split())


def test_a_hand_written_readme_in_figures_is_refused_even_when_asked_to_adopt(tmp_path):
    config = make(tmp_path / "config", "README.md", "config.yaml", "paper.yaml", "gpu1.yaml")
    for adopt in (False, True):
        line = refusal(tmp_path / "results", config, adopt)
        assert str(config) in line and "README.md, config.yaml, gpu1.yaml, ..." in line
        assert "overwrite README.md" in line and "--config figures=PATH" in line and "adopt_folders" not in line
    assert (config / "README.md").read_text() == "x" and not (config / folders.RECORD).exists()


def test_foreign_files_are_named_and_adopting_keeps_them_on_record(tmp_path):
    results = make(tmp_path / "results", "notes.txt", "old/a.csv")
    line = refusal(results, tmp_path / "figures")
    assert "results folder" in line and "notes.txt, old/" in line and "--config adopt_folders=true" in line
    claims = plan(results, tmp_path / "figures", adopt=True)
    assert claims[str(results)]["found"] == ["notes.txt", "old/"]
    assert claims[str(results)]["claimed"].startswith("adopted")


def test_an_earlier_versions_layout_is_adopted(tmp_path):
    results, figures = legacy_results(tmp_path / "results"), legacy_figures(tmp_path / "paper_figures")
    legacy_results(results / "mechanism")   # another config's folders inside, as config/mechanism.yaml puts them
    legacy_figures(figures / "mechanism")
    make(figures / "lion", folders.RECORD)
    claims = plan(results, figures)
    assert [r["claimed"] for r in claims.values()] == ["laid out by the workflow"] * 2


def test_a_rebuild_from_a_bundle_gets_its_own_folder_beside_the_runs(tmp_path):
    """bundle.rebuild_folder puts a rebuild's results under results/from_bundle/: claimed there, and the results
    folder around it still the workflow's layout."""
    results, figures = legacy_results(tmp_path / "results"), tmp_path / "paper_figures"
    rebuild = results / "from_bundle" / "demo-0123456789ab"
    folders.claim(plan(rebuild, figures))
    make(rebuild, "runs/S/x/summary.json", "origin/tables/runs.csv")
    assert plan(rebuild, figures) == {}
    assert plan(results, figures)[str(results)]["claimed"] == "laid out by the workflow"


@pytest.mark.parametrize("stray", ["README.md", "val_loss_vs_batch/notes.txt", "val_loss_vs_batch/sub/a.png",
                                   "unknown_artifact/sweep.png", "mechanism/notes/a.txt"])
def test_a_layout_with_anything_else_is_refused(tmp_path, stray):
    figures = make(tmp_path / "figures", "val_loss_vs_batch/sweep.png", stray)
    assert stray.split("/")[0] in refusal(tmp_path / "results", figures)


def test_folders_that_overlap_or_swap_roles_are_refused(tmp_path):
    assert "overlap" in refusal(tmp_path / "out", tmp_path / "out")
    assert "overlap" in refusal(tmp_path / "results", tmp_path / "results" / "figures")
    assert "overlap" in refusal(tmp_path / "figures" / "results", tmp_path / "figures")
    folders.claim(plan(tmp_path / "results", tmp_path / "figures"))
    assert "is the workflow's figures folder (" in refusal(tmp_path / "figures", tmp_path / "results")
    make(tmp_path, "file")
    assert "is a file" in refusal(tmp_path / "file", tmp_path / "figures")


def test_the_figures_layout_holds_every_artifact_file_the_workflow_writes():
    rule = (REPO / "workflow" / "rules" / "report.smk").read_text().split("rule artifact:")[1].split("\nrule ")[0]
    output = rule.split("output:")[1].split("log:")[0]
    suffixes = set(re.findall(r'"(\.[a-z]+)"', output)) | set(re.findall(r"\{experiment\}\}(\.[a-z]+)", output))
    assert suffixes == set(folders.ARTIFACT_SUFFIXES)


def test_default_configs_keep_results_and_figures_apart():
    import yaml

    for path in sorted((REPO / "config").glob("*.yaml")) + sorted((REPO / "examples").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        if "results" in config and "figures" in config:
            folders.check_apart({"results": config["results"], "figures": config["figures"]})


@pytest.mark.slow
def test_figures_in_a_folder_with_a_readme_are_refused_before_any_job(tmp_path):
    from test_workflow import TINY, copy_workflow

    workdir = copy_workflow(tmp_path / "wf")
    readme = make(workdir / "notes", "README.md") / "README.md"
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(TINY),
           "--config", "figures=notes"]
    r = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    lines = [line for line in (r.stdout + r.stderr).splitlines() if "README.md" in line]
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(lines) == 1 and "figures folder notes holds" in lines[0] and "overwrite README.md" in lines[0], lines
    assert "Job stats" not in r.stdout + r.stderr and not (workdir / "results").exists()
    assert readme.read_text() == "x"
