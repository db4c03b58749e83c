"""Synthetic results for report tests: run directories as the trainer writes them, tuned by the real
merit_repro.plan.tuning rounds, collected by the real table code, from a loss landscape given in the test.

    paths = build(tmp_path, config, loss)            # loss(group, lr, seed) -> final val loss, None: diverged
    verdict = make_artifact(paths, config, "val_loss_vs_batch", "sweep")
"""

import json
import math
from pathlib import Path

from merit_repro.plan import grid, tuning
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


def write_run(run_dir, final, steps, curve=None, peak_mal=1.0, n_layers=2):
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
        "tokens_per_s": 1000.0, "train_seconds": 1.0, "loss_spikes": 0, "eval_interval": EVAL_EVERY}))
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
                          final, steps, shape, peak_mal(group, lr, seed) if peak_mal else 1.0)
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
                          peak_mal=peak_mal(g, c["lr"], c["seed"]) if peak_mal else 1.0)
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
