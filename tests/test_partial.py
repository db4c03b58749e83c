"""What a run stopped at any minute returns (merit_repro.report.partial, scripts/mechanism_gpu.sh --out): the finished
cells copied off, and a report naming them, on a results tree made here; and the script on a tiny CPU workflow,
stopped by a SIGTERM as `timeout` sends it, returning the cells that had finished."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, cli_error, copy_workflow, dump_config, slow_trainer_env, tiny_config
from synthetic import RUN_FILES, SUMMARY, make_tree

from merit_repro.plan import paths
from merit_repro.report import partial

COPIED = set(paths.RUN_FILES)   # summary.json, metrics.csv, mal.csv, diagnostics.csv, eval.json
RUN = "runs/T/4096/adamw/bs8"


def add_run(results, cell, summary=None, mal=None, files=RUN_FILES):
    """A run folder as the trainer leaves it (files), with summary.json's content and mal.csv changed if given;
    summary=False leaves summary.json out: a run still training (or killed) has none."""
    run = results / cell
    run.mkdir(parents=True)
    for name, text in files.items():
        if name != "summary.json" or summary is not False:
            (run / name).write_text(text)
    if summary:
        (run / "summary.json").write_text(json.dumps({**SUMMARY, **summary}))
    if mal:
        (run / "mal.csv").write_text(mal)
    (run / "ckpt.pt").write_bytes(b"weights never go in")
    return run


def tree(tmp_path):
    """make_tree's two finished cells (lr 1e-3 and 2e-3, final loss 2.5, peak MAL 0.5), a third seed at 2e-3 that
    diverged with a non-finite MAL, a fourth cell at 2e-3 with MAL 8, and a cell half-written (no summary.json)."""
    results, _ = make_tree(tmp_path)
    add_run(results, f"{RUN}/lr2e-3/seed1", {"status": "diverged", "final_val_loss": None},
            mal="step,layer,head,mal\n4,1,1,3.0\n8,1,1,nan\n")
    add_run(results, f"{RUN}/lr2e-3/seed2", {"final_val_loss": 2.7}, mal="step,layer,head,mal\n8,1,1,8.0\n8,2,1,2\n")
    add_run(results, f"{RUN}/lr4e-3/seed0", summary=False)
    return results


def cells_in(out):
    return sorted(str(p.parent.relative_to(out / "cells")) for p in (out / "cells").rglob("summary.json"))


def test_the_finished_cells_are_copied_and_tabled_and_a_half_written_one_is_not(tmp_path):
    results, out = tree(tmp_path), tmp_path / "out"
    assert partial.main(["--results", str(results), "--out", str(out)]) == 0
    finished = ["T/4096/adamw/bs8/lr1e-3/seed0", "T/4096/adamw/bs8/lr2e-3/seed0", "T/4096/adamw/bs8/lr2e-3/seed1",
                "T/4096/adamw/bs8/lr2e-3/seed2"]
    assert cells_in(out) == finished
    for cell in finished:   # the result files as they are, no log, checkpoint or weights
        copy = out / "cells" / cell
        assert {p.name for p in copy.iterdir()} == COPIED
        for name in COPIED:
            assert (copy / name).read_bytes() == (results / "runs" / cell / name).read_bytes()
    assert not (out / "cells/T/4096/adamw/bs8/lr4e-3").exists()
    rows = (out / "partial.csv").read_text().splitlines()
    assert rows[0] == ",".join(partial.COLUMNS)
    assert rows[1:] == ["T,4096,adamw,8,1e-3,0,ok,2.5,0.5,8,1.0", "T,4096,adamw,8,2e-3,0,ok,2.5,0.5,8,1.0",
                        "T,4096,adamw,8,2e-3,1,diverged,,inf,8,1.0", "T,4096,adamw,8,2e-3,2,ok,2.7,8.0,8,1.0"]
    md = (out / "partial.md").read_text().splitlines()
    assert md[0].startswith("partial: 4 cells finished at ") and md[0].endswith(" UTC, the run may still be going")
    assert "| T | 4096 | adamw | 8 | 2e-3 | 1 | diverged | – | inf | 8 | 1.0 |" in md
    assert "## T, 4096 tokens, adamw, batch 8" in md
    # per LR over its seeds: the mean final loss of the ok ones, the geometric mean of every peak MAL (inf: a spike)
    assert "| 1e-3 | 1 | 0 | 2.5000 | 0.5 |" in md and "| 2e-3 | 3 | 1 | 2.6000 | inf |" in md
    assert [p for p in out.rglob("*") if p.name.endswith(".tmp")] == []


def test_running_again_copies_only_what_changed(tmp_path):
    results, out = tree(tmp_path), tmp_path / "out"
    args = ["--results", str(results), "--out", str(out)]
    assert partial.main(args) == 0
    kept = out / "cells" / "T/4096/adamw/bs8/lr1e-3/seed0" / "mal.csv"
    before = kept.stat().st_ino, kept.stat().st_mtime_ns
    shutil.rmtree(results / RUN / "lr2e-3/seed1")   # deleted to retrain: its copy stays, its row goes
    (results / RUN / "lr4e-3/seed0/summary.json").write_text(json.dumps(SUMMARY))   # finished since
    retrained = results / RUN / "lr2e-3/seed2"
    (retrained / "summary.json").write_text(json.dumps({**SUMMARY, "final_val_loss": 2.2}))
    (retrained / "mal.csv").write_text("step,layer,head,mal\n8,1,1,32.0\n")
    assert partial.main(args) == 0
    assert (kept.stat().st_ino, kept.stat().st_mtime_ns) == before
    assert (out / "cells" / "T/4096/adamw/bs8/lr2e-3/seed2/mal.csv").read_text().endswith("32.0\n")
    md = (out / "partial.md").read_text()
    assert md.startswith("partial: 4 cells finished") and "| 2e-3 | 2 | 0 | 2.3500 | 4 |" in md   # sqrt(0.5 * 32)
    assert "| 4e-3 | 1 | 0 | 2.5000 | 0.5 |" in md
    assert (out / "cells" / "T/4096/adamw/bs8/lr2e-3/seed1/summary.json").exists()


def test_a_copy_cut_short_has_no_summary_and_leaves_the_previous_report(tmp_path, monkeypatch):
    """A kill while a retrained cell is copied again (SystemExit, as the CLI's TERM handler raises it): the copy has
    no summary.json, neither the new one nor the old one beside new files, so it does not pass for a whole cell, and
    partial.md is the previous one; the next run completes both."""
    results, out = tree(tmp_path), tmp_path / "out"
    args = ["--results", str(results), "--out", str(out)]
    assert partial.main(args) == 0
    previous = (out / "partial.md").read_text()
    shutil.rmtree(results / RUN / "lr2e-3/seed2")
    add_run(results, f"{RUN}/lr2e-3/seed2", {"final_val_loss": 2.2})
    real = partial.copy_plain

    def killed(src, dest):
        if Path(src).name == "mal.csv" and "seed2" in str(src):
            raise SystemExit(143)
        real(src, dest)

    monkeypatch.setattr(partial, "copy_plain", killed)
    with pytest.raises(SystemExit):
        partial.main(args)
    assert (out / "partial.md").read_text() == previous
    assert not (out / "cells" / "T/4096/adamw/bs8/lr2e-3/seed2/summary.json").exists()
    monkeypatch.setattr(partial, "copy_plain", real)
    assert partial.main(args) == 0
    assert "T/4096/adamw/bs8/lr2e-3/seed2" in cells_in(out) and "| 2e-3 | 3 | 1 | 2.3500 | inf |" in \
        (out / "partial.md").read_text()


def test_links_and_records_that_are_not_summaries_are_not_followed_or_tabled(tmp_path):
    results, out = tree(tmp_path), tmp_path / "out"
    elsewhere = add_run(tmp_path / "elsewhere", "seed0")
    (results / RUN / "lr8e-3").symlink_to(elsewhere.parent, target_is_directory=True)   # a linked folder: not entered
    linked = add_run(results, f"{RUN}/lr1.6e-2/seed0", summary=False)
    (linked / "summary.json").symlink_to(elsewhere / "summary.json")   # a linked summary: not read
    add_run(results, f"{RUN}/lr3.2e-2/seed0", summary=False)
    (results / RUN / "lr3.2e-2/seed0/summary.json").write_text(json.dumps({**SUMMARY, "final_val_loss": "low"}))
    add_run(results, "runs/T/4096/adamw/bs8/other/seed0")   # not a cell's folder
    assert partial.main(["--results", str(results), "--out", str(out)]) == 0
    assert len(cells_in(out)) == 4 and not (out / "cells" / "T/4096/adamw/bs8/lr8e-3").exists()
    md = (out / "partial.md").read_text()
    assert "lr1.6e-2/seed0: summary.json skipped (a symlink or special file)" in md
    assert "lr3.2e-2/seed0: summary.json skipped (final_val_loss is \"low\", not a number or null)" in md
    assert "other" not in md


def test_at_the_end_the_report_and_the_bundle_are_copied_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = tree(tmp_path)
    figures = tmp_path / "figs"
    (figures / "mal_vs_lr").mkdir(parents=True)
    (figures / "README.md").write_text("the report\n")
    (figures / "mal_vs_lr" / "mechanism.md").write_text("| lr |\n")
    (figures / "linked.md").symlink_to(figures / "README.md")
    (results / "bundle").mkdir()
    (results / "bundle" / "tiny.tar.gz").write_bytes(b"a bundle")
    config = tmp_path / "tiny.yaml"
    config.write_text(dump_config({"results": "results", "figures": "figs"}))
    args = ["--configfile", str(config), "--out", "out"]
    assert partial.main([*args, "--state", "stopped"]) == 0
    assert "the run was stopped" in Path("out/partial.md").read_text() and not Path("out/figures").exists()
    assert partial.main([*args, "--state", "finished"]) == 0
    assert Path("out/partial.md").read_text().startswith(
        f"partial: 4 cells finished at {time.strftime('%Y-%m-%d', time.gmtime())}")
    assert ", the run finished; the report: figures/ (a copy of figs); the bundle: tiny.tar.gz\n" in \
        Path("out/partial.md").read_text()
    assert Path("out/figures/mal_vs_lr/mechanism.md").read_text() == "| lr |\n"
    assert Path("out/tiny.tar.gz").read_bytes() == b"a bundle" and not Path("out/figures/linked.md").exists()
    (figures / "README.md").write_text("the report, again\n")
    assert partial.main([*args, "--state", "finished"]) == 0   # the copy replaced whole
    assert Path("out/figures/README.md").read_text() == "the report, again\n"
    assert not [p for p in Path("out").iterdir() if p.name.startswith(".")]


def test_bad_folders_are_one_error_line(tmp_path, capsys):
    results = tree(tmp_path)
    (tmp_path / "a file").write_text("x")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    missing = cli_error(partial.main, ["--results", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], capsys)
    assert missing == f"error: --results {tmp_path / 'nope'}: no such folder: give the results folder of a run"
    for out, says in ((tmp_path / "a file", "is a file: give a folder"),
                      (tmp_path / "a file" / "o", "lies under"), (tmp_path / "gone", "is a symlink to nothing"),
                      (tmp_path / "loop" / "o", ""), (results / "partial", "and the results folder"),
                      (tmp_path, "and the results folder")):
        said = cli_error(partial.main, ["--results", str(results), "--out", str(out)], capsys)
        assert said.startswith(f"error: --out {out}") and says in said, said
    assert not (results / "partial").exists()


def test_the_report_layer_module_stays_light():
    code = "import sys, merit_repro.report.partial; print(sorted({'torch', 'pandas', 'numpy'} & set(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


# ---------------------------------------------------------------- the script, stopped


@pytest.mark.parametrize("args, says", [
    (["--out"], "--out needs a value"), (["--out", "a file"], "--out a file is a file: give a folder"),
    (["--out", "out", "--dry-run"], "--out with --dry-run: a dry run trains nothing to copy"),
    (["--no-setup", "--configfile", "nope.yaml"], "--configfile nope.yaml: no such file"),
    (["--no-setup", "--wheelhouse", "w"], "--wheelhouse with --no-setup: --no-setup installs nothing"),
    (["--no-setup", "--configfile", "tiny.yaml", "--out", "results/mine"], "--out {tmp}/results/mine and the "
     "results folder {tmp}/results overlap: give --out a folder of its own, outside the workflow's"),
    (["--no-setup", "--configfile", "tiny.yaml", "--out", "."], "--out {tmp} and the results folder"),
])
def test_the_runner_refuses_a_bad_out_in_one_line_before_anything_runs(tmp_path, args, says):
    """(A copy of scripts/ alone: the script goes to its parent, where no workflow would run if it went on.)"""
    shutil.copytree(REPO / "scripts", tmp_path / "wf" / "scripts")
    (tmp_path / "a file").write_text("x")
    (tmp_path / "tiny.yaml").write_text(dump_config({"results": str(tmp_path / "results"), "figures": "figs"}))
    r = subprocess.run(["bash", "wf/scripts/mechanism_gpu.sh", *args], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHON": sys.executable}, timeout=60)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {says.format(tmp=tmp_path)}"), lines
    assert not (tmp_path / "results").exists() and not (tmp_path / "out").exists()


def tiny_mechanism(workdir):
    """A config of the mechanism experiment's shape on the CPU: demo-tiny (gpus: 0), 16 steps a cell, 3 LRs."""
    config = tiny_config()
    config.pop("zeroshot")
    config.update(results="results/tiny", figures="paper_figures/tiny")
    config["experiments"] = {"mechanism": {
        "models": ["T"], "tokens": 4096, "optimizers": ["adamw", "merit"], "batch_sizes": [8],
        "lr_grid": {"adamw": [1e-3, 3e-3, 1e-2], "merit": [3e-3, 1e-2, 3e-2]},
        "artifacts": ["mal_vs_lr", "mal_vs_step"], "paper": {"batch_sizes": {8: 1024}}}}
    path = workdir.parent / "tiny.yaml"
    path.write_text(dump_config(config))
    return path


def row_of(cell):
    """The coordinates partial.csv gives a cell path: model,tokens,optimizer,batch,lr,seed."""
    model, tokens, optimizer, batch, lr, seed = cell.split("/")
    return ",".join([model, tokens, optimizer, batch[2:], lr[2:], seed[4:]])


def left_in(workdir):
    """Processes still running in workdir (the script's snakemake and its jobs)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(workdir):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_a_stopped_gpu_run_returns_the_cells_that_finished(tmp_path):
    """`timeout` signals the script's process group: the script stops snakemake's (its own group), writes the
    partial report once more and exits non-zero; DIR holds every cell that had finished, and only those. Each
    launcher exits 8 s after its trainer, longer than the copies' period: the stop meets a cell copied, whose job
    has not ended (its trainer shutting down, or its launcher after it), and the job outlives it (the cell stays in
    results too). Fresh trainers, as GPU cells have (no warm trainer), each step 0.2 s slower; DIR and the config
    relative to where the script is started, not where it goes. Started again, it finishes: every cell, the report
    and the bundle."""
    workdir = copy_workflow(tmp_path / "wf")
    shutil.copytree(REPO / "scripts", workdir / "scripts")
    tiny_mechanism(workdir)
    out = tmp_path / "out"
    env = {**os.environ, **slow_trainer_env(tmp_path, step_seconds=0.2, exit_seconds=8), "PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1", "MERIT_WARM_START": "0"}
    cmd = ["bash", "wf/scripts/mechanism_gpu.sh", "--no-setup", "--configfile", "tiny.yaml", "--out", "out"]
    started = time.time()
    script = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        while time.time() - started < 300 and script.poll() is None:
            if (out / "partial.csv").exists() and len((out / "partial.csv").read_text().splitlines()) > 1:
                break
            time.sleep(0.2)
        assert script.poll() is None, script.communicate()[0][-3000:]
        first = time.time() - started
        assert "the run may still be going" in (out / "partial.md").read_text()
        os.killpg(script.pid, signal.SIGTERM)
        killed = time.time()
        log = script.communicate(timeout=60)[0]
        stopped = time.time() - started
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
    assert script.returncode == 143, log[-3000:]
    deadline = time.time() + 30   # snakemake's group ends with the script, its jobs just after
    while left_in(workdir) and time.time() < deadline:
        time.sleep(0.5)
    leftover = left_in(workdir)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, "processes left running after the stop"
    runs = workdir / "results" / "tiny" / "runs"
    finished = sorted(str(p.parent.relative_to(runs)) for p in runs.rglob("summary.json"))
    copied = cells_in(out)
    assert copied == finished and 1 <= len(copied) < 8, (copied, finished)
    logs = [(workdir / paths.log("results/tiny", "train", cell)).read_text() for cell in copied]
    ended = [float(t) for text in logs for t in re.findall(r"\[test\] trainer ended at ([0-9.]+)", text)]
    assert any(t + 8 > killed for t in ended), (killed, ended)   # the stop met a copied cell's job still running
    for cell in copied:
        assert {p.name for p in (out / "cells" / cell).iterdir()} == COPIED
        assert (out / "cells" / cell / "summary.json").read_bytes() == (runs / cell / "summary.json").read_bytes()
    md, rows = (out / "partial.md").read_text(), (out / "partial.csv").read_text().splitlines()[1:]
    assert md.startswith(f"partial: {len(copied)} cell") and "the run was stopped" in md.splitlines()[0]
    assert sorted(",".join(r.split(",")[:6]) for r in rows) == sorted(map(row_of, copied))
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    # started again, it resumes and ends with every cell, the report and the bundle in DIR
    env = {k: v for k, v in env.items() if not k.startswith("SLOW_")}
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    finished = time.time() - started
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert len(cells_in(out)) == 8 and copied[0] in cells_in(out)
    assert ", the run finished; the report: figures/ (a copy of paper_figures/tiny); the bundle: tiny.tar.gz\n" in \
        (out / "partial.md").read_text()
    assert (out / "figures" / "mal_vs_lr" / "mechanism.md").exists() and (out / "figures" / "README.md").exists()
    assert (out / "tiny.tar.gz").read_bytes() == (workdir / "results/tiny/bundle/tiny.tar.gz").read_bytes()
    print(f"first cell copied after {first:.0f} s, stopped after {stopped:.0f} s with {len(copied)} cell(s); "
          f"resumed and finished after {finished:.0f} s")


def test_an_out_folder_is_the_reports_by_its_record_never_by_names(tmp_path, capsys):
    """A folder holding someone's partial.md is refused, naming it, and left as it was; a new folder is claimed by
    its record (partial.json) and written again on every pass; a record of another role, or a damaged one, is
    refused."""
    results = tree(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "partial.md").write_text("my notes\n")
    said = cli_error(partial.main, ["--results", str(results), "--out", str(theirs)], capsys)
    assert said == (f"error: --out {theirs} holds 1 entry this report did not write (partial.md): give --out a new or "
                    "empty folder")
    assert (theirs / "partial.md").read_text() == "my notes\n" and sorted(os.listdir(theirs)) == ["partial.md"]
    ours = tmp_path / "ours"
    for _ in range(2):
        assert partial.main(["--results", str(results), "--out", str(ours)]) == 0
    assert json.loads((ours / "partial.json").read_text())["role"] == "partial"
    (ours / "partial.json").write_text(json.dumps({"role": "results"}))
    said = cli_error(partial.main, ["--results", str(results), "--out", str(ours)], capsys)
    assert said == (f"error: {ours} is the workflow's results folder (partial.json), not a partial folder: give --out "
                    "a new or empty folder")
    (ours / "partial.json").write_text("{")
    said = cli_error(partial.main, ["--results", str(results), "--out", str(ours)], capsys)
    assert said.startswith(f"error: {ours / 'partial.json'} is damaged (")
    assert said.endswith(f"remove it if {ours} holds only the workflow's files, else give --out a new or empty folder")
