"""The workflow's output folders are its own (merit_repro.plan.folders): new or empty ones are claimed, its own are
accepted, an earlier version's layout is adopted, anything else is refused in one line naming what it holds."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from merit_repro.plan import folders, paths, records
from merit_repro.utils import UserError, atomic_write_json, read_json, sha256_file

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


def finished_run(folder):
    """A run's result files as the trainer leaves them: its summary.json records their sha256."""
    make(folder, *paths.VOUCHED)
    (folder / "metrics.csv").write_text("step,loss\n1,3.0\n")
    atomic_write_json(folder / paths.SUMMARY, {"status": "completed", "files": records.vouch(folder)})
    return folder


def prepared_corpus(folder):
    """A corpus's token files as the data rule leaves them: its meta.json records their sha256."""
    make(folder, "train.bin", "val.bin")
    splits = {s: {"file": f"{s}.bin", "sha256": sha256_file(folder / f"{s}.bin")} for s in ("train", "val")}
    atomic_write_json(folder / "meta.json", {"splits": splits})
    return folder


def copied_results(folder):
    """Runs and a corpus copied without the folder's record (rsync of runs/ and data/ from another machine)."""
    finished_run(folder / "runs/S/262144/adamw/bs16/lr1e-3/seed0")
    corpus = prepared_corpus(folder / "data/shakespeare-bytes")
    marks = {name: {"size": 1, "mtime_ns": 2, "ino": 3, "ctime_ns": 4} for name in ("train.bin", "val.bin")}
    atomic_write_json(corpus / ".verified.json", marks)   # data.tokens' marker, shown by what it is of
    make(folder, "gpu_check.json", "pilot/mechanism/pilot.csv")   # the project's other tools, beside the workflow
    return folder


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


@pytest.mark.parametrize("role, names", [
    ("results", ["tables/runs.csv"]),
    ("results", ["runs/notes.txt", "logs/mine.log"]),
    ("figures", ["README.md", "claims.csv"]),
    ("figures", ["val_loss_vs_batch/sweep.csv", "val_loss_vs_batch/sweep.md"]),
])
def test_files_named_as_the_workflow_names_its_own_are_never_claimed_by_their_names(tmp_path, role, names):
    """A user's tables/runs.csv, or a README.md beside a claims.csv, is laid out as the workflow lays out its own:
    their names show nothing, so the folder is refused, and adopting it is refused too, since the run would
    overwrite them."""
    folder = make(tmp_path / role, *names)
    other = tmp_path / ("figures" if role == "results" else "results")
    pair = (folder, other) if role == "results" else (other, folder)
    for adopt in (False, True):
        line = refusal(*pair, adopt)
        assert f"{role} folder" in line and "would overwrite" in line and names[0] in line, line
    assert all((folder / name).read_text() == "x" for name in names)


def test_foreign_files_are_named_and_adopting_keeps_them_on_record(tmp_path):
    results = make(tmp_path / "results", "notes.txt", "old/a.csv")
    line = refusal(results, tmp_path / "figures")
    assert "results folder" in line and "notes.txt, old/a.csv" in line
    assert f"({folders.ADOPT})" in line and folders.ADOPT == "--config adopt_folders=True"
    claims = plan(results, tmp_path / "figures", adopt=True)
    assert claims[str(results)]["found"] == ["notes.txt", "old/"]
    assert claims[str(results)]["claimed"].startswith("adopted")


def test_runs_and_corpora_copied_without_the_record_are_shown_by_their_hashes(tmp_path):
    results, figures = copied_results(tmp_path / "results"), tmp_path / "paper_figures"
    copied_results(results / "mechanism")
    folders.claim(plan(results / "mechanism", tmp_path / "fig2"))   # another config's folder: its record shows it
    folders.claim(plan(tmp_path / "r2", figures / "lion"))   # another config's figures, inside
    assert plan(results, figures)[str(results)]["claimed"] == "its content shown to be the workflow's"
    make(figures / "val_loss_vs_batch", folders.RECORD, "sweep.csv")   # a record where the workflow writes shields nothing
    make(results / "tables", folders.RECORD, "runs.csv")   # nor does one that is not a record
    assert "would overwrite tables/" in refusal(results, figures, adopt=True)
    assert "would overwrite val_loss_vs_batch/" in refusal(tmp_path / "r3", figures, adopt=True)


@pytest.mark.parametrize("change", ["edited", "extra", "weights", "corpus"])
def test_a_copied_run_or_corpus_that_its_records_do_not_show_is_refused(tmp_path, change):
    results = copied_results(tmp_path / "results")
    run, corpus = results / "runs/S/262144/adamw/bs16/lr1e-3/seed0", results / "data/shakespeare-bytes"
    changed = {"edited": run / "metrics.csv", "extra": run / "notes.txt", "weights": run / "model.pt",
               "corpus": corpus / "train.bin"}[change]
    if change == "weights":   # weights the summary records, then other bytes
        changed.write_bytes(b"w")
        summary = read_json(run / paths.SUMMARY)
        atomic_write_json(run / paths.SUMMARY, {**summary, "weights": records.weights_record(run)})
    changed.write_text("the user's own")
    assert "would overwrite " in refusal(results, tmp_path / "figures", adopt=True)
    assert changed.relative_to(results).as_posix() in set(folders.unproven(results, "results", ARTIFACTS))


def test_links_and_special_files_are_never_followed_or_read(tmp_path):
    """A record that is a FIFO (a hang when read) or a link to /dev/zero (a read without end) is damaged, in one
    line; a FIFO or a link inside a folder is someone else's file."""
    import os

    results = tmp_path / "results"
    results.mkdir()
    os.mkfifo(results / folders.RECORD)
    assert "damaged (not a plain file)" in refusal(results, tmp_path / "figures")
    (results / folders.RECORD).unlink()
    (results / folders.RECORD).symlink_to("/dev/zero")
    assert "damaged (a symlink or special file" in refusal(results, tmp_path / "figures")
    (results / folders.RECORD).unlink()
    os.mkfifo(results / "pipe")
    (results / "runs").mkdir()
    (results / "runs" / "link").symlink_to("/dev/zero")
    line = refusal(results, tmp_path / "figures", adopt=True)
    assert "would overwrite runs/link" in line and "pipe" in line


def test_hostile_layouts_end_in_one_line_without_a_hang(tmp_path):
    """Weights recorded as 0 bytes and a FIFO named model.pt (its hash would never end), a record nested past the
    parser's depth, a tree deeper than the stack, a name with a newline, a symlink loop: one line each."""
    import os

    results = copied_results(tmp_path / "results")
    run = results / "runs/S/262144/adamw/bs16/lr1e-3/seed0"
    atomic_write_json(run / paths.SUMMARY, {**read_json(run / paths.SUMMARY), "weights": {"size": 0, "sha256": "x"}})
    os.mkfifo(run / records.WEIGHTS)
    assert "seed0/" in refusal(results, tmp_path / "figures", adopt=True)
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / folders.RECORD).write_text("[" * 30000 + "]" * 30000)
    assert "damaged (nested too deep)" in refusal(deep, tmp_path / "figures")
    tree = leaf = tmp_path / "tree"
    for _ in range(1100):   # (os.makedirs recurses once a level)
        leaf = leaf / "d"
        leaf.mkdir(parents=True)
    make(leaf, "leaf", "odd\nname")
    line = refusal(tree, tmp_path / "figures")
    assert "holds 2 file(s)" in line and "odd\\nname" in line
    for name in ("leaf", "odd\nname"):
        (leaf / name).unlink()
    while leaf != tmp_path:   # bottom up: shutil.rmtree, pytest's clean-up, recurses once a level
        leaf.rmdir()
        leaf = leaf.parent
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert "symlink loop" in refusal(tmp_path / "loop" / "results", tmp_path / "figures")


@pytest.mark.parametrize("planted", ["proof in figures", "proof in tables", "unhashed run files", "partial summary",
                                     "weights unrecorded", "corpus marker", "benchmarks", "other case", "null role"])
def test_what_no_record_hashes_where_it_lies_shows_nothing(tmp_path, planted):
    """A second red team: hash proofs count only where the workflow keeps them (a run's folder under runs/, a
    corpus's under data/), and for the names they hash; benchmarks/ is the workflow's (its rules' benchmark files);
    names are compared as a case-insensitive file system would; a nested record must name a role."""
    results, figures = tmp_path / "results", tmp_path / "figures"
    run, corpus = results / "runs/S/262144/adamw/bs16/lr1e-3/seed0", results / "data/shakespeare-bytes"
    if planted.startswith("proof in"):
        folder = figures / "val_loss_vs_batch" if planted == "proof in figures" else results / "tables"
        prepared_corpus(folder)
        (folder / "train.bin").rename(folder / "sweep.png")
        meta = read_json(folder / "meta.json")
        meta["splits"]["train"]["file"] = "sweep.png"
        atomic_write_json(folder / "meta.json", meta)
    elif planted == "unhashed run files":
        make(finished_run(run), "cell.yaml", "train.log")
    elif planted == "partial summary":
        finished_run(run)
        summary = read_json(run / paths.SUMMARY)
        del summary["files"]["eval.json"]   # the user's eval.json beside the recorded files
        atomic_write_json(run / paths.SUMMARY, summary)
    elif planted == "weights unrecorded":
        make(finished_run(run), records.WEIGHTS)
    elif planted == "corpus marker":   # a file of the marker's name that is no marker of these files
        make(prepared_corpus(corpus), ".verified.json")
    elif planted == "benchmarks":
        make(results, "benchmarks/thesis.tex")
    elif planted == "other case":
        make(figures, "readme.md")
    else:
        make(results / "runs", "mine.txt")
        atomic_write_json(results / "runs" / folders.RECORD, {"role": None})
    for adopt in (False, True):
        assert "would overwrite" in refusal(results, figures, adopt), planted


@pytest.mark.parametrize("meta", [{"splits": {"train": {"file": ["x"], "sha256": "0"}}},
                                  {"splits": {"train": {"file": "x\u0000y", "sha256": "0"}}},
                                  {"files": {"metrics.csv": "abc"}}])
def test_records_of_odd_kinds_show_nothing_in_one_line(tmp_path, meta):
    corpus = make(tmp_path / "results/data/c", "x")
    name = "summary.json" if "metrics.csv" in meta.get("files", {}) else "meta.json"
    atomic_write_json(corpus / name, meta)
    assert "would overwrite data/c/" in refusal(tmp_path / "results", tmp_path / "figures")


def test_a_claim_keeps_a_record_written_since_the_plan_and_checks_its_role(tmp_path):
    """Two runs started at once with the folders swapped: the second claim finds the first's record, not its own."""
    claims = plan(tmp_path / "results", tmp_path / "figures")
    folders.claim(plan(tmp_path / "figures", tmp_path / "results"))   # the other run, between this plan and claim
    with pytest.raises(UserError, match="is the workflow's figures folder"):
        folders.claim(claims)
    assert read_json(tmp_path / "results" / folders.RECORD)["role"] == "figures"   # the first claim stands
    assert not list((tmp_path / "results").glob(f".{folders.RECORD}.*"))   # and no draft is left


def test_a_folder_that_cannot_be_made_is_refused_in_one_line(tmp_path):
    make(tmp_path, "file")
    assert "lies under" in refusal(tmp_path / "file" / "results", tmp_path / "figures")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert "is a symlink to nothing" in refusal(tmp_path / "dangling", tmp_path / "figures")


def test_a_rebuild_from_a_bundle_gets_its_own_folder_beside_the_runs(tmp_path):
    """bundle.rebuild_folder puts a rebuild's results under results/from_bundle/: claimed there, and the results
    folder around it still the workflow's."""
    results, figures = copied_results(tmp_path / "results"), tmp_path / "paper_figures"
    rebuild = results / "from_bundle" / "demo-0123456789ab"
    folders.claim(plan(rebuild, figures))
    make(rebuild, "runs/S/x/summary.json", "origin/tables/runs.csv")
    assert plan(rebuild, figures) == {}
    assert plan(results, figures)[str(results)]["claimed"] == "its content shown to be the workflow's"


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

    checked = []
    for path in sorted((REPO / "config").glob("*.yaml")) + sorted((REPO / "examples").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        if "results" in config and "figures" in config:
            folders.check_apart({"results": config["results"], "figures": config["figures"]})   # raises if not
            checked.append(path.name)
    assert {"config.yaml", "mechanism.yaml", "mechanism_gpu.yaml"} <= set(checked), checked


@pytest.mark.slow
def test_figures_in_a_folder_with_a_readme_are_refused_before_any_job(tmp_path):
    from helpers import WORKFLOW, copy_workflow

    workdir = copy_workflow(tmp_path / "wf")
    readme = make(workdir / "notes", "README.md") / "README.md"
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(WORKFLOW),
           "--config", "figures=notes"]
    r = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    lines = [line for line in (r.stdout + r.stderr).splitlines() if "README.md" in line]
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(lines) == 1 and "figures folder notes holds" in lines[0] and "overwrite README.md" in lines[0], lines
    assert "Job stats" not in r.stdout + r.stderr and not (workdir / "results").exists()
    assert readme.read_text() == "x"


@pytest.mark.slow
def test_the_refusals_advice_works_as_printed(tmp_path):
    """The refusal of a folder holding a user's notes advises --config adopt_folders=True: given to Snakemake as
    printed, the dry run goes on and the notes stay."""
    from helpers import WORKFLOW, copy_workflow

    workdir = copy_workflow(tmp_path / "wf")
    notes = make(workdir / "results", "notes.txt") / "notes.txt"
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(WORKFLOW)]
    refused = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    (line,) = [line for line in (refused.stdout + refused.stderr).splitlines() if "notes.txt" in line]
    advice = re.search(r"\((--config \S+)\)$", line)
    assert refused.returncode != 0 and advice, line
    adopted = subprocess.run(cmd + advice.group(1).split(), cwd=workdir, capture_output=True, text=True)
    assert adopted.returncode == 0, adopted.stderr[-3000:]
    assert notes.read_text() == "x"
