"""Optimizers from outside the package: how a config names them, what is refused, how their cells are built."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from merit_repro.config import optimizer_sources as sources
from merit_repro.config.registry import OPTIMIZERS
from merit_repro.optim import build
from merit_repro.optim.check import problems as build_problems
from merit_repro.plan import grid
from merit_repro.plan.cell import CellConfig, identity
from merit_repro.plan.validate import source_problems

REPO = Path(__file__).resolve().parents[1]
LION = {"class": "pytorch_optimizer.Lion", "betas": [0.9, 0.99], "weight_decay": 1.0}
LION_VERSION = sources.installed_version("pytorch-optimizer")
TORCH_VERSION = sources.installed_version("torch")


def params():
    return [torch.nn.Parameter(torch.randn(3, 3))]


@pytest.mark.parametrize("name, spec, message", [
    ("sgd", {"lr": 0.1}, "optimizers.sgd is not a built-in optimizer"),
    ("evil", {"class": "os.system"}, "optimizers.evil.class='os.system' is not a class of a known library"),
    ("deep", {"class": "torch.optim.lr_scheduler.LambdaLR"}, "is not a class of a known library"),
    ("hidden", {"class": "torch.optim._functional"}, "is not a class of a known library"),
    ("adamw", {"class": "torch.optim.AdamW"}, "optimizers.adamw is a built-in optimizer"),
    ("both", {"class": "torch.optim.SGD", "entry_point": "x", "package": "p"}, "both a class and an entry point"),
    ("nopkg", {"entry_point": "signum"}, "without package"),
    ("badep", {"entry_point": "a.b:c", "package": "p"}, "is not an entry-point name"),
    ("wrongpkg", {"class": "torch.optim.SGD", "package": "numpy"}, "torch.optim comes from torch"),
    ("lion\n", {"class": "pytorch_optimizer.Lion"}, "an optimizer's name is a path segment"),
    ("newline", {"class": "torch.optim.SGD\n"}, "is not a class of a known library"),
    ("merit", {"package": "x", "version": "1"}, "optimizers.merit is built in: package, version apply to an optimizer "
                                                "from outside only"),
    ("ideal", {"class": "torch.optim.SGD"}, "'ideal' names a figure's own line"),
    ("pkgnl", {"entry_point": "x", "package": "pkg\n"}, "is not a package name"),
])
def test_a_config_never_names_a_module(name, spec, message):
    (problem,) = sources.form_problems(name, spec)
    assert message in problem


def test_a_library_class_and_a_built_in_have_no_form_problem():
    assert sources.form_problems("sgd", {"class": "torch.optim.SGD", "momentum": 0.9}) == []
    assert sources.form_problems("merit", {"betas": [0.9, 0.95]}) == []


def test_what_is_missing_is_named_with_the_package_to_install():
    with pytest.raises(ValueError, match=r"needs package heavyball, which is not installed: pip install heavyball"):
        sources.resolve("hb", {"class": "heavyball.ForeachAdamW"})
    with pytest.raises(ValueError, match=r"needs package merit-example-nowhere, which is not installed"):
        sources.resolve("x", {"entry_point": "x", "package": "merit-example-nowhere"})
    with pytest.raises(ValueError, match=r"package torch .* registers no optimizer 'signum' in entry-point group "
                                         r"merit_repro.optimizers \(it registers: none\)"):
        sources.resolve("signum", {"entry_point": "signum", "package": "torch"})
    with pytest.raises(ValueError, match=r"pins torch 0.0.1 but .* is installed: pip install 'torch==0.0.1'"):
        sources.resolve("sgd", {"class": "torch.optim.SGD", "version": "0.0.1"})


def test_pin_writes_the_installed_version_in():
    config = {"optimizers": {"adamw": {"eps": 1e-8}, "sgd": {"class": "torch.optim.SGD", "momentum": 0.9}}}
    sources.pin(config)
    assert config["optimizers"]["sgd"]["version"] == TORCH_VERSION
    assert "version" not in config["optimizers"]["adamw"]
    with pytest.raises(ValueError, match="optimizers.evil.class"):
        sources.pin({"optimizers": {"evil": {"class": "subprocess.run"}}})


def test_with_jobs_in_another_environment_the_version_must_be_pinned():
    """--sdm conda: the workflow cannot see the jobs' packages, so it reads no version; a pinned one is kept."""
    with pytest.raises(ValueError, match=r"optimizers.lion: the jobs run in the workflow/envs/merit.yaml environment .* pin it "
                                         r"\(optimizers.lion.version\)"):
        sources.pin({"optimizers": {"lion": {"class": "pytorch_optimizer.Lion"}}}, installed_here=False)
    pinned = {"optimizers": {"lion": {"class": "pytorch_optimizer.Lion", "version": "0.0.1"}}}
    assert sources.pin(pinned, installed_here=False)["optimizers"]["lion"]["version"] == "0.0.1"


def test_a_config_without_versions_takes_a_bundles_for_the_same_optimizers():
    theirs = {"optimizers": {"lion": {"class": "pytorch_optimizer.Lion", "version": "4.1.0"},
                             "sgd": {"class": "torch.optim.SGD", "version": "2.0"}}}
    ours = {"optimizers": {"lion": {"class": "pytorch_optimizer.Lion"}, "sgd": {"class": "torch.optim.Adam"},
                           "adamw": {}}}
    sources.with_versions_of(ours, theirs)
    assert ours["optimizers"]["lion"]["version"] == "4.1.0"
    assert "version" not in ours["optimizers"]["sgd"]   # another class: another optimizer, no version taken
    assert sources.with_versions_of({"optimizers": {"x": {"class": "torch.optim.SGD"}}}, {"optimizers": [1]})


def test_a_library_optimizer_builds_from_its_source_and_checks_its_version():
    source = {"package": "torch", "version": TORCH_VERSION, "class": "torch.optim.SGD"}
    opt = build("sgd", params(), source, lr=0.1, momentum=0.9)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["momentum"] == 0.9
    with pytest.raises(ValueError, match=r"this cell trains with torch 1.0 but .* is installed"):
        build("sgd", params(), {**source, "version": "1.0"}, lr=0.1)
    with pytest.raises(ValueError, match="names no version of torch"):
        build("sgd", params(), {**source, "version": None}, lr=0.1)
    with pytest.raises(ValueError, match="Bad hyperparameter for optimizer 'sgd'"):
        build("sgd", params(), source, lr=0.1, momentun=0.9)
    with pytest.raises(ValueError, match=r"torch.optim \(torch .*\) has no 'Lion'"):
        build("lion", params(), {**source, "class": "torch.optim.Lion"}, lr=0.1)
    with pytest.raises(ValueError, match=r"torch.optim.lr_scheduler \(torch .*\) is not a torch.optim.Optimizer class"):
        build("x", params(), {**source, "class": "torch.optim.lr_scheduler"}, lr=0.1)


@pytest.mark.skipif(LION_VERSION is None, reason="pytorch-optimizer is not installed (the test extra installs it)")
def test_a_hyperparameter_the_optimizer_would_swallow_is_refused():
    """pytorch_optimizer's Lion takes **kwargs: a mistyped key would be ignored, so it is refused by name."""
    source = {"package": "pytorch-optimizer", "version": LION_VERSION, "class": "pytorch_optimizer.Lion"}
    opt = build("lion", params(), source, lr=1e-4, betas=[0.9, 0.99], weight_decay=1.0)
    assert opt.defaults["betas"] == (0.9, 0.99)
    with pytest.raises(ValueError, match=r"'lion' does not name betaz among its hyperparameters \(lr, betas, "):
        build("lion", params(), source, lr=1e-4, betaz=[0.9, 0.99])


def tiny_config(**optimizers):
    config = yaml.safe_load((REPO / "tests" / "workflow_config.yaml").read_text())
    config["optimizers"].update(optimizers)
    config["experiments"] = {"sweep": {**config["experiments"]["sweep"], "optimizers": ["adamw", "merit", *optimizers],
                                       "lr_grid": {**config["experiments"]["sweep"]["lr_grid"],
                                                   **{o: [1e-3] for o in optimizers}}}}
    return sources.pin(config)


@pytest.mark.skipif(LION_VERSION is None, reason="pytorch-optimizer is not installed (the test extra installs it)")
def test_an_outside_optimizers_cell_takes_its_source_and_only_its_configs_hyperparameters():
    config = tiny_config(lion={**LION, "label": "Lion", "color": "gold"})
    cell = grid.cell_config(config, "T", 4096, "lion", 4, "1e-3", 0)
    assert cell["optimizer_source"] == {"package": "pytorch-optimizer", "version": LION_VERSION,
                                        "class": "pytorch_optimizer.Lion"}
    assert cell["optimizer_hparams"] == {"betas": [0.9, 0.99]} and cell["weight_decay"] == 1.0
    assert not {"label", "color", "class", "version"} & set(cell) and "betas" not in cell
    cfg = CellConfig.from_dict(cell).validate()
    assert cfg.optimizer_kwargs() == {"lr": 1e-3, "betas": [0.9, 0.99]}   # no eps: Lion has none
    built_in = grid.cell_config(config, "T", 4096, "adamw", 4, "3e-3", 0)
    assert "optimizer_source" not in built_in and built_in["betas"] == [0.9, 0.95]   # the demo's cells as they were
    assert CellConfig.from_dict(built_in).optimizer_kwargs()["eps"] == 1e-6


@pytest.mark.skipif(LION_VERSION is None, reason="pytorch-optimizer is not installed (the test extra installs it)")
def test_the_preflight_builds_an_outside_optimizer_once_and_names_its_key():
    from merit_repro.plan.validate import optimizer_settings
    config = tiny_config(lion={**LION, "betas": [0.9, 1.5]})
    (problem,) = build_problems(optimizer_settings(config))
    assert problem.startswith("optimizers.lion: ") and "beta" in problem


def test_every_optimizer_gets_a_label_and_a_colour_of_its_own():
    config = {"optimizers": {"adamw": {}, "lion": {"class": "pytorch_optimizer.Lion", "label": "Lion"},
                             "sgd": {"class": "torch.optim.SGD"},
                             "mine": {"class": "torch.optim.Adam", "color": "navy"}}}
    styles = sources.styles(config)
    assert styles["adamw"] == ("AdamW", OPTIMIZERS["adamw"].color) and styles["lion"][0] == "Lion"
    assert styles["sgd"][0] == "sgd" and styles["mine"][1] == "navy"
    added = [styles[o][1] for o in ("lion", "sgd", "mine")]
    assert len(set(added)) == 3 and not set(added) & {spec.color for spec in OPTIMIZERS.values()}
    assert sources.styles({"optimizers": {"merit": {"color": "red"}}})["merit"] == ("MERIT", "red")   # the config's


def test_runs_of_another_version_stop_the_workflow_before_they_are_retrained(tmp_path):
    config = {"results": str(tmp_path), "optimizers": {"sgd": {"class": "torch.optim.SGD", "version": "2.0"}}}
    run = tmp_path / "runs" / "T" / "4096" / "sgd" / "bs4" / "lr1e-3" / "seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"config": {"optimizer_source": {"package": "torch", "version": "1.0",
                                                                                  "class": "torch.optim.SGD"}}}))
    (problem,) = source_problems(config)
    assert f"optimizers.sgd: {run} trained with torch 1.0, and the config's is 2.0" in problem
    assert "optimizers.sgd.version: '1.0'" in problem
    config["optimizers"]["sgd"]["version"] = "1.0"
    assert source_problems(config) == []


@pytest.mark.slow
@pytest.mark.parametrize("spec, message", [
    ("{class: os.system}", "optimizers.mine.class='os.system' is not a class of a known library"),
    ("{entry_point: nothing_here, package: torch}", "package torch"),
    ("{class: heavyball.ForeachAdamW}", "needs package heavyball, which is not installed: pip install heavyball"),
])
def test_an_outside_optimizer_that_cannot_be_had_is_refused_before_any_job(tmp_path, spec, message):
    """Parsing the workflow refuses it with one line (a dry run, so no job could have started either way)."""
    text = (REPO / "tests" / "workflow_config.yaml").read_text()
    text = text.replace("optimizers:\n", f"optimizers:\n  mine: {spec}\n", 1)
    text = text.replace("    optimizers: [adamw, merit]\n", "    optimizers: [adamw, merit, mine]\n", 1)
    text = text.replace("lr_grid: {adamw: [3.0e-3], merit: [5.0e-3]}",
                        "lr_grid: {adamw: [3.0e-3], merit: [5.0e-3], mine: [1.0e-3]}", 1)
    config = tmp_path / "config.yaml"
    config.write_text(text)
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(config),
                        "--directory", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode != 0
    lines = [line for line in (r.stdout + r.stderr).splitlines() if message in line]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "results").exists()


def compare_config(config):
    """The tiny workflow's sweep with an installed package's optimizer (the example's Signum) and a library's (Lion)
    beside AdamW and MERIT."""
    config["optimizers"].update(
        signum={"entry_point": "signum", "package": "merit-example-signum", "label": "Signum", "momentum": 0.9,
                "weight_decay": 0.1},
        lion={**LION, "label": "Lion"})
    sweep = config["experiments"]["sweep"]
    config["experiments"] = {"sweep": {**sweep, "optimizers": ["adamw", "merit", "signum", "lion"],
                                       "lr_grid": {**sweep["lr_grid"], "signum": [1.0e-3], "lion": [1.0e-3]},
                                       "artifacts": ["val_loss_vs_batch", "mal_tables"]}}
    config.pop("zeroshot")


@pytest.mark.slow
@pytest.mark.skipif(LION_VERSION is None, reason="pytorch-optimizer is not installed (the test extra installs it)")
def test_an_installed_packages_optimizer_is_tuned_tabled_drawn_compared_and_bundled(tmp_path):
    """examples/signum_optimizer installed, a tiny workflow with its optimizer and Lion beside AdamW and MERIT: their
    cells carry their package and version, the tables, a figure and claims.csv name them (a family apart from the
    paper's statements); the bundle of those runs, with the config they trained with, rebuilds the report on a
    machine without the package."""
    from helpers import copy_workflow, dump_config, edited, snakemake

    site = tmp_path / "site"   # the package installed where this test alone sees it: the rebuild runs without it
    package = shutil.copytree(REPO / "examples" / "signum_optimizer", tmp_path / "package")   # its build stays here
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(package)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    with_package = {**os.environ,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    config = tmp_path / "compare.yaml"
    config.write_text(dump_config(edited(compare_config)))
    workdir = copy_workflow(tmp_path / "wf")
    r = snakemake(workdir, config=config, env=with_package)
    assert r.returncode == 0, r.stderr[-4000:]

    summary = json.loads(next((workdir / "results" / "runs").glob("T/*/signum/bs8/*/seed1/summary.json")).read_text())
    assert summary["config"]["optimizer_source"] == {"package": "merit-example-signum", "version": "0.1.0",
                                                    "entry_point": "signum"}
    table = (workdir / "paper_figures" / "val_loss_vs_batch" / "sweep.md").read_text().splitlines()[0]
    assert "| signum |" in table and "| lion |" in table
    assert {"signum", "lion"} <= set(pd.read_csv(workdir / "paper_figures" / "val_loss_vs_batch" / "sweep.csv").columns)
    assert (workdir / "paper_figures" / "val_loss_vs_batch" / "sweep.png").stat().st_size > 0
    claims = pd.read_csv(workdir / "paper_figures" / "claims.csv")
    for text in ("Signum vs AdamW: lower validation loss", "MERIT vs Signum: lower validation loss",
                 "Lion vs AdamW: lower validation loss", "MERIT vs Lion: lower peak MAL"):
        rows = claims[claims.claim.str.startswith(text)]
        assert sorted(rows.batch.astype(str)) == ["4", "8"], text   # at each batch, none only descriptive
        assert set(rows.verdict) <= {"held", "did not hold", "equivalent", "inconclusive"}, rows.verdict
        assert set(rows.origin) == {"added by the config"}
    assert set(claims[claims.claim.str.startswith("MERIT vs AdamW")].origin) == {"paper"}
    index = (workdir / "paper_figures" / "README.md").read_text()
    assert "\nStatements: " in index and "\nComparisons the config adds (not the paper's): " in index

    r = snakemake(workdir, "bundle", config=config, env=with_package)
    assert r.returncode == 0, r.stderr[-3000:]
    (bundle,) = (workdir / "results" / "bundle").glob("*.tar.gz")
    inspected = subprocess.run([sys.executable, "-m", "merit_repro.bundle", "inspect", str(bundle), "--config"],
                               capture_output=True, text=True, cwd=REPO)
    assert inspected.returncode == 0, inspected.stderr
    assert yaml.safe_load(inspected.stdout)["optimizers"]["signum"]["version"] == "0.1.0"
    fresh = copy_workflow(tmp_path / "fresh")
    r = snakemake(fresh, "--config", f"bundle={bundle}", config=config)   # no package on this PYTHONPATH
    assert r.returncode == 0, r.stderr[-3000:]
    claims_csv = Path("paper_figures", "claims.csv")
    assert (fresh / claims_csv).read_bytes() == (workdir / claims_csv).read_bytes()


def test_the_comparisons_a_config_adds_are_summarised_and_corrected_apart_from_the_papers():
    from merit_repro.report.artifacts.index import summary

    def stmt(result, p, origin=None):
        return {"result": result, "why": "", "p_value": p, **({"origin": origin} if origin else {})}
    paper = [stmt("held", 0.001), stmt("held", 0.04)]
    alone = summary([{"statements": paper}], 0.05)
    added = [stmt("held", 0.03, "added by the config"), stmt("did not hold", 0.02, "added by the config")]
    both = summary([{"statements": paper + added}], 0.05)
    assert both[0] == alone[0]   # the paper's statements are counted and corrected as without an optimizer added
    assert both[1] == alone[1].replace("the whole report", "the paper's statements")
    assert both[2].startswith("Comparisons the config adds (not the paper's): 1 held, 1 did not hold.")
    assert "Across the 2 distinct tested statements" in both[-1] and "multiplicity of these comparisons" in both[-1]
    assert summary([{"statements": added}], 0.05)[0].startswith("Comparisons the config adds")


@pytest.mark.parametrize("name", ["lion.yaml", "signum.yaml"])
def test_the_example_configs_are_valid_and_share_the_demos_cells(name):
    """Each example config passes the schema and every check that needs no package; its AdamW and MERIT cells are
    the demo's own (the same settings), so after the demo only the added optimizer trains."""
    from merit_repro.config import configfiles
    from merit_repro.plan.validate import validate

    example = validate(configfiles.load(REPO / "examples" / name))
    demo = configfiles.load(REPO / "config" / "config.yaml")
    for optimizer, lr in [("adamw", "2e-3"), ("merit", "4e-2")]:   # the train rule's params: what identifies a cell
        assert (identity(grid.cell_config(example, "S", 262144, optimizer, 64, lr, 1))
                == identity(grid.cell_config(demo, "S", 262144, optimizer, 64, lr, 1)))
    (added,) = sources.external_names(example)
    assert added in example["experiments"][next(iter(example["experiments"]))]["optimizers"]
