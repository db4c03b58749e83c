"""Synthetic results for report tests: run directories as the trainer writes them, tuned by the real
merit_repro.plan.tuning rounds, collected by the real table code, from a loss landscape given in the test.

    paths = build(tmp_path, config, loss)            # loss(group, lr, seed) -> final val loss, None: diverged
    verdict = make_artifact(paths, config, "val_loss_vs_batch", "sweep")

with the demo-like config and loss landscapes the report tests share (demo_config, landscape, CLEAR), and a results
tree to bundle (make_tree, make_bundle).
"""

import json
import math
from pathlib import Path

from merit_repro import bundle
from merit_repro.plan import grid, tuning
from merit_repro.plan.cell import CellConfig
from merit_repro.report import tables
from merit_repro.report.artifacts import make, write_index
from merit_repro.report.second_look import first_look
from merit_repro.train.runfiles import MAL_COLUMNS, METRICS_COLUMNS

PAPER_NUMBERS = Path(__file__).resolve().parents[1] / "workflow" / "resources" / "paper_numbers.csv"
INITIAL_LOSS = 5.5
EVAL_EVERY = 4


def steps_for(batch):
    return max(8, 1024 // int(batch))


def default_curve(final, steps):
    """Validation loss falling from the untrained model's to final, fast then slow."""
    return lambda step: INITIAL_LOSS + (final - INITIAL_LOSS) * math.sqrt(step / steps)


def schedule(config, group, lr, seed):
    """The warmup and probe steps a trainer records of a cell, from its config."""
    cfg = CellConfig.from_dict(grid.cell_config(config, group.model, group.tokens, group.optimizer, group.batch, lr,
                                                seed))
    return {"warmup_rule": cfg.warmup_rule, "warmup_steps": cfg.lr_warmup_steps, "probe_steps": cfg.probe_steps()}


def write_run(run_dir, final, steps, curve=None, peak_mal=1.0, n_layers=2, *, recorded):
    run_dir.mkdir(parents=True, exist_ok=True)
    curve = curve or (default_curve(final, steps) if final is not None else (lambda step: INITIAL_LOSS))
    lines = [",".join(METRICS_COLUMNS)]
    mal_lines = [",".join(MAL_COLUMNS)]
    for step in range(0, steps + 1, EVAL_EVERY):
        lines.append(f"{step},{step * 1000},1e-3,{curve(step)},{curve(step)},1.0,1000,,")
        for layer in range(1, n_layers + 1):
            mal_lines.append(f"{step},{layer},1,{peak_mal * (0.1 + 0.9 * step / steps) * layer / n_layers},1.0,1.0")
    (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
    (run_dir / "mal.csv").write_text("\n".join(mal_lines) + "\n")
    status = "ok" if final is not None else "diverged"
    (run_dir / "summary.json").write_text(json.dumps({
        "status": status, "final_val_loss": final, "best_val_loss": final, "steps": steps, "planned_steps": steps,
        "tokens_per_s": 1000.0, "train_seconds": 1.0, "loss_spikes": 0, "eval_interval": EVAL_EVERY, **recorded}))
    (run_dir / "eval.json").write_text(json.dumps({"val_loss": final}))


def build(tmp_path, config, loss, curve=None, peak_mal=None):
    """Tune every group of the config on the landscape and write results/tables/{runs,cells,best_lr}.csv.

    loss(group, lr, seed) -> final val loss (None: diverged); curve(group, lr, seed, final, steps) -> a function
    of the step, or None for the default; peak_mal(group, lr, seed) -> the run's peak MAL."""
    results = tmp_path / "results"
    config = {**config, "results": str(results)}
    decisions = []
    for group in grid.all_groups(config).values():
        spec = grid.tuning_spec(config, group)

        def train(cells, group=group):
            out = {}
            for lr, seed in cells:
                final = loss(group, lr, seed)
                steps = steps_for(group.batch)
                shape = curve(group, lr, seed, final, steps) if curve else None
                write_run(Path(grid.Cell(group.model, group.tokens, group.optimizer, group.batch, lr, seed).path(results)),
                          final, steps, shape, peak_mal(group, lr, seed) if peak_mal else 1.0,
                          recorded=schedule(config, group, lr, seed))
                out[(lr, seed)] = final
            return out

        decisions.append(tuning.annotate(spec, tuning.tune(spec, train)))
        Path(group.path(results)).mkdir(parents=True, exist_ok=True)   # as the workflow's final.json
        tuning.write_json(Path(group.path(results)) / "final.json", decisions[-1])
    return write_tables(results, config, decisions)


def look_twice(results, config, loss, peak_mal=None):
    """After build, with config's second_look_seeds: the first look as the workflow's checkpoint takes it, the
    seeds it asks for trained on the same landscape, and the tables of every seed -> (first look's record, the
    groups' decisions with the second look's cells, the table paths)."""
    results = Path(results)
    config = {**config, "results": str(results)}
    finals = [json.loads((Path(g.path(results)) / "final.json").read_text()) for g in grid.all_groups(config).values()]
    record = first_look(config, finals, str(results), PAPER_NUMBERS, config.get("report", {}).get("mal_threshold", 100))
    groups = {(g.model, g.optimizer, g.batch): g for g in grid.all_groups(config).values()}
    decisions = [tuning.with_second_look(d, record) for d in finals]
    for d in decisions:
        g = groups[(d["group"]["model"], d["group"]["optimizer"], d["group"]["batch"])]
        for c in d["cells"]:
            if c["seed_origin"] == tuning.SECOND_LOOK:
                write_run(Path(grid.Cell(g.model, g.tokens, g.optimizer, g.batch, c["lr"], c["seed"]).path(results)),
                          loss(g, c["lr"], c["seed"]), steps_for(g.batch),
                          peak_mal=peak_mal(g, c["lr"], c["seed"]) if peak_mal else 1.0,
                          recorded=schedule(config, g, c["lr"], c["seed"]))
    return record, decisions, write_tables(results, config, decisions)


def write_tables(results, config, decisions):
    """results/tables/{runs,cells,best_lr}.csv of the decisions, as the collect and select steps write them."""
    runs, cells = tables.runs_table(decisions, str(results), config.get("report", {}).get("mal_threshold", 100))
    best = tables.best_lr_table(decisions, runs)
    paths = {name: results / "tables" / f"{name}.csv" for name in ("runs", "cells", "best_lr")}
    paths["runs"].parent.mkdir(parents=True, exist_ok=True)
    for name, frame in (("runs", runs), ("cells", cells), ("best_lr", best)):
        frame.to_csv(paths[name], index=False)
    return paths


def make_artifact(paths, config, artifact, experiment, figures=None):
    figures = Path(figures or paths["runs"].parents[2] / "paper_figures")
    return make(artifact, experiment, config, paths["runs"], paths["cells"], paths["best_lr"], PAPER_NUMBERS,
                figures / artifact / experiment)


def make_report(paths, config, figures):
    """Every artifact of every experiment and the index, as the workflow's report rules do."""
    verdicts = [make_artifact(paths, config, artifact, name, figures)
                for name, exp in config["experiments"].items() for artifact in exp.get("artifacts", [])]
    write_index([Path(figures) / v["artifact"] / f"{v['experiment']}.json" for v in verdicts],
                Path(figures) / "README.md", config)
    return verdicts


# ---------------------------------------------------------------- a loss landscape and the demo's groups


DATA = {"d": {"dataset": "shakespeare", "tokenizer": "bytes"}}


GRID = {"adamw": [1.0e-3, 2.0e-3, 4.0e-3], "lamb": [4.0e-3, 8.0e-3, 1.6e-2], "merit": [4.0e-3, 8.0e-3, 1.6e-2]}


BEST_LR = {"adamw": 2e-3, "lamb": 8e-3, "merit": 8e-3, "maxlamb": 8e-3, "merit_noclip": 8e-3}


def demo_config(**experiments):
    return {"data": DATA, "models": {"S": {"model": "demo-tiny", "data": "d", "paper_model": "gpt2-small"},
                                     "S-qk": {"model": "demo-tiny", "qk_norm": True, "data": "d",
                                              "paper_model": "gpt2-small"}},
            "seeds": [0], "claim_seeds": [1, 2, 3], "tuning": {"max_extensions": 1},
            "report": {"dpi": 30, "alpha": 0.05, "tolerance": 0.005, "target_tolerance": 0.05},
            "experiments": experiments or {"sweep": sweep()}}


def sweep(**changes):
    return {"models": ["S"], "tokens": 65536, "optimizers": ["adamw", "lamb", "merit"], "batch_sizes": [8, 64],
            "lr_grid": GRID, "paper": {"batch_sizes": {8: 128, 64: 1024}},
            "artifacts": ["val_loss_vs_batch", "steps_to_target", "lr_sensitivity", "mal_tables"], **changes}


# Each optimizer's own part of the seed noise (claim seeds 1, 2, 3; it sums to zero over them): runs at one seed
# share most of their noise, as the trainer's do, but not all, so per-seed differences have a spread to test.
WOBBLE = {"merit": (0, 0, 0), "adamw": (0, 1, -1), "lamb": (1, -1, 0), "maxlamb": (-1, 0, 1), "merit_noclip": (1, 0, -1)}


# Another model is another initialisation: its own part too, so per-seed contrasts across models have a spread.
MODEL_WOBBLE = {"S-qk": (1, -1, 0)}


def landscape(base, noise=0.002, best_lr=None, diverged=()):
    """loss = base[optimizer][batch] (or base[(model, optimizer)][batch]) + a bowl in log LR around the
    optimizer's best LR + seed noise: claim seeds 1, 2, 3 have mean base + noise and sd about noise."""
    best_lr = {**BEST_LR, **(best_lr or {})}

    def loss(group, lr, seed):
        if group.optimizer in diverged or (group.optimizer, lr, seed) in diverged:
            return None
        bowl = 0.05 * math.log(float(lr) / best_lr[group.optimizer]) ** 2
        level = base.get((group.model, group.optimizer)) or base[group.optimizer]
        own = 0.25 * noise * (WOBBLE.get(group.optimizer, (0, -1, 1))[(seed - 1 + int(group.batch)) % 3]
                              + MODEL_WOBBLE.get(group.model, (0, 0, 0))[(seed - 1) % 3])
        return level[group.batch] + bowl + noise * (seed - 1) + own
    return loss


CLEAR = {"adamw": {8: 2.60, 64: 3.30}, "lamb": {8: 2.62, 64: 3.20}, "merit": {8: 2.61, 64: 3.00}}


# ---------------------------------------------------------------- a results tree to bundle


BUNDLE_CONFIG = {"results": "results", "experiments": {"e": {"lr_grid": {"adamw": [1e-3, 2e-3]}}},
                 "report": {"alpha": 0.05}}


BUNDLE_GROUP = {"experiment": "e", "model": "T", "tokens": "4096", "optimizer": "adamw", "batch": 8}


SUMMARY = {"status": "ok", "config": {"model": "demo-tiny", "optimizer": "adamw", "batch_size": 8, "tokens": 4096,
                                      "seed": 0},
           "model_config": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "vocab_size": 256},
           "final_val_loss": 2.5, "best_val_loss": 2.5, "steps": 8, "planned_steps": 8, "tokens_per_s": 1000.0,
           "train_seconds": 1.0}


RUN_FILES = {"summary.json": json.dumps(SUMMARY), "eval.json": '{"val_loss": 2.5}',
             "metrics.csv": "step,tokens,lr,train_loss,val_loss\n0,0,0.001,,5.5\n8,4096,0.001,2.6,2.5\n",
             "mal.csv": "step,layer,head,mal\n8,1,1,0.5\n", "diagnostics.csv": "step,param,clip_fraction\n",
             "train.log": "done\n"}


def make_tree(root):
    """A results tree as the workflow leaves it: one tuned group of two cells, its tables and corpus."""
    results = root / "results"
    cells = [{"lr": "1e-3", "seed": 0, "lr_origin": "configured", "seed_origin": "grid"},
             {"lr": "2e-3", "seed": 0, "lr_origin": "configured", "seed_origin": "grid"}]
    group_dir = results / "tuning/e/T/adamw/bs8"
    group_dir.mkdir(parents=True)
    table = [{"lr": c["lr"], "selection_loss": 2.5, "diverged_seeds": [], "disqualified": False} for c in cells]
    decision = {"group": BUNDLE_GROUP, "cells": cells, "done": True, "best_lr": "1e-3", "at_edge": True,
                "status": "ok", "extensions": [], "table": table}
    (group_dir / "round0.json").write_text(json.dumps(decision))
    (group_dir / "final.json").write_text(json.dumps(decision))
    for c in cells:
        run = results.parent / grid.Cell("T", "4096", "adamw", 8, c["lr"], c["seed"]).path(results.name)
        run.mkdir(parents=True)
        for name, text in RUN_FILES.items():
            (run / name).write_text(text)
        (run / "ckpt.pt").write_bytes(b"weights never go in")
    (results / "data/d").mkdir(parents=True)
    (results / "data/d/meta.json").write_text(json.dumps({"request": {"dataset": "x"}, "splits": {}}))
    (results / "tables").mkdir()
    (results / "tables/runs.csv").write_text("model,lr\nT,1e-3\n")
    return results, {str(group_dir / "final.json"): decision}


def make_bundle(tmp_path, name="b.tar.gz", config=BUNDLE_CONFIG):
    results, decisions = make_tree(tmp_path / name.split(".")[0])
    out = tmp_path / name
    manifest = bundle.create(out, results, decisions, [results / "data/d"], config, "abc123", None)
    return out, manifest
