"""Zero-shot accuracy of a finished run through lm-evaluation-harness (Table 1), offline.

    python -m merit_repro.evals.zeroshot eval --run results/runs/<cell> [--run ...] --tasks arc_easy,copa,hellaswag,race,wic \
        [--include DIR ...] [--limit N] [--batch-size 32] [--out FILE]
    python -m merit_repro.evals.zeroshot next-line --data results/data/shakespeare-bytes --out DIR
    python -m merit_repro.evals.zeroshot export --tasks arc_easy,copa,hellaswag,race,wic --out DIR   # with internet

``eval`` scores each run's own model (merit_repro.evals.harness.RunLM) at ``num_fewshot`` 0 and writes lm-eval's results
JSON (without per-sample logs) with a ``merit_repro`` entry: the accuracy per task, their mean and each item's
correctness (``items``, for item-paired comparisons); one run to RUN/zeroshot.json, several (the workflow: a tuned
group's claim seeds) to --out, keyed by run directory. Tasks are looked up first in the ``--include`` folders of task
YAMLs (local JSONL exports: lm-eval's own task, ``include``d, with
``dataset_path: json``, as in lm-eval's "Using Local Datasets"), then among lm-eval's tasks, whose datasets come
from the HuggingFace cache (``HF_DATASETS_OFFLINE=1``: nothing is downloaded). A task that is not there fails
before the model is loaded, naming it and how to provide it.

``export`` writes such local copies of lm-eval tasks (one JSONL per split and a task YAML) on a machine with
internet, to copy to one without. ``next-line`` builds the demo's stand-in task from a corpus's validation split:
a passage's true next line against lines of the same length drawn from other plays.
"""

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from merit_repro.launch.gpu_slots import gpu_slots
from merit_repro.utils import UserError, atomic_write_json, cli, library_versions, sha256_bytes

from .tasks import export_task, load_tasks, write_next_line_task

# ---------------------------------------------------------------- eval


def metric_key(results, name, metric):
    """lm-eval's key of a task's metric in its results ("<metric>,<filter>")."""
    keys = {k.split(",")[0]: k for k in results["results"][name]}
    if metric not in keys:
        raise UserError(f"task {name!r} reports no {metric!r} (it reports {', '.join(sorted(keys))}); "
                        "set zeroshot.metric to one of them")
    return keys[metric]


def accuracy(results, names, metric):
    """{task: metric} from lm-eval's results."""
    return {name: float(results["results"][name][metric_key(results, name, metric)]) for name in names}


def item_scores(results, names, metric):
    """{task: {"correct": one character per doc_id, "1" right, "0" wrong, "-" not scored, "docs": a digest of the
    scored documents in doc_id order}} from lm-eval's logged samples: what lets two runs' errors be paired item by item
    (merit_repro.report.artifacts.zeroshot), a byte an item. A task whose metric is not 0 or 1 per item is left out."""
    out = {}
    for name in names:
        kept = metric_key(results, name, metric).partition(",")[2]
        samples = sorted((s for s in results["samples"][name] if s.get("filter", kept) == kept),
                         key=lambda s: s["doc_id"])
        if not samples or any(s[metric] not in (0, 1) for s in samples):
            continue
        correct = ["-"] * (samples[-1]["doc_id"] + 1)
        for s in samples:
            correct[s["doc_id"]] = str(int(s[metric]))
        docs = json.dumps([s["doc"] for s in samples], sort_keys=True, default=str)
        out[name] = {"correct": "".join(correct), "docs": sha256_bytes(docs.encode())[:16]}
    return out


def evaluate(runs, names, include=(), metric="acc", limit=None, batch_size=32, device=None):
    """{run: lm-eval's results on the named tasks at zero shots, with our summary under "merit_repro"}."""
    tasks, manager = load_tasks(names, include)          # fails before any model is loaded
    with environment_described_once():
        return {str(run): evaluate_one(run, tasks, manager, names, metric, limit, batch_size, device) for run in runs}


def evaluate_one(run, tasks, manager, names, metric, limit, batch_size, device):
    import lm_eval

    from .harness import RunLM

    results = lm_eval.simple_evaluate(model=RunLM(run, device=device, batch_size=batch_size),
                                      tasks=list(tasks.values()), num_fewshot=0, limit=limit, log_samples=True,
                                      random_seed=0, numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0,
                                      task_manager=manager)
    scores, items = accuracy(results, names, metric), item_scores(results, names, metric)
    del results["samples"]   # the documents and responses: megabytes; the items keep what a comparison needs
    results["merit_repro"] = {"metric": metric, "accuracy": scores, "mean": sum(scores.values()) / len(scores),
                              "items": items,
                              "n": {n: int(results["n-samples"][n]["effective"]) for n in names},
                              "tasks": list(names), "limit": limit, "num_fewshot": 0, "run": str(run),
                              "lm_eval": getattr(lm_eval, "__version__", None), "versions": library_versions()}
    print(f"{run}: {json.dumps(scores)}", flush=True)
    return json.loads(json.dumps(results, default=str))


@contextlib.contextmanager
def environment_described_once():
    """lm-eval describes the machine in every result (torch's collect_env, about 0.8 s a call): once per job."""
    import lm_eval.evaluator

    real, cache = lm_eval.evaluator.add_env_info, {}

    def once(storage):
        if not cache:
            real(cache)
        storage.update(cache)

    lm_eval.evaluator.add_env_info = once
    try:
        yield
    finally:
        lm_eval.evaluator.add_env_info = real


# ---------------------------------------------------------------- CLI


@contextlib.contextmanager
def gpu_slot(device):
    """The device to evaluate on: a GPU taken from the workflow's slots (merit_repro.launch.gpu_slots, as a training cell
    takes its own) unless a scheduler assigned it or a device is given; the CPU without a GPU."""
    import torch


    if device or not torch.cuda.is_available():
        yield device or "cpu"
    elif "SLURM_JOB_ID" in os.environ:
        yield "cuda"
    else:   # CUDA is initialised by now: the slot's id is named by its index among the devices this process sees
        visible = ([s.strip() for s in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if s.strip()]
                   or [str(i) for i in range(torch.cuda.device_count())])
        with gpu_slots(1) as devices:
            yield f"cuda:{visible.index(devices[0])}"


def _names(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError("--tasks is empty: give comma-separated lm-eval task names")
    return names


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.evals.zeroshot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="a run's zero-shot accuracy")
    ev.add_argument("--run", action="append", default=[], type=Path, help="a finished run directory (repeatable)")
    ev.add_argument("--tasks", required=True)
    ev.add_argument("--include", action="append", default=[], help="a folder of task YAMLs (repeatable)")
    ev.add_argument("--metric", default="acc")
    ev.add_argument("--limit", type=int, default=None, help="examples per task (default: all)")
    ev.add_argument("--batch-size", type=int, default=32)
    ev.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ev.add_argument("--out", type=Path, default=None, help="default: RUN/zeroshot.json")
    nl = sub.add_parser("next-line", help="the demo's stand-in task from a corpus's validation split")
    nl.add_argument("--data", required=True, type=Path, help="a prepared corpus (results/data/<name>)")
    nl.add_argument("--out", required=True, type=Path)
    nl.add_argument("--name", default="next_line")
    nl.add_argument("--examples", type=int, default=200)
    nl.add_argument("--max-chars", type=int, default=40, help="longest answer line (fit the context)")
    nl.add_argument("--seed", type=int, default=0)
    ex = sub.add_parser("export", help="local copies of lm-eval tasks, made with internet")
    ex.add_argument("--tasks", required=True)
    ex.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == "eval":
        if len(args.run) != 1 and not args.out:
            raise UserError("give --out FILE for other than one --run (one run writes RUN/zeroshot.json)")
        for run in args.run:
            if not (run / "summary.json").is_file():
                raise UserError(f"{run} is not a finished run (no summary.json)")
        names = _names(args.tasks)
        with gpu_slot(args.device) as device:
            results = evaluate(args.run, names, args.include, args.metric, args.limit, args.batch_size, device)
        if args.out:   # a tuned group's claim seeds: one file, by run directory
            atomic_write_json(args.out, {"tasks": names, "metric": args.metric, "runs": results})
        else:
            atomic_write_json(args.run[0] / "zeroshot.json", results[str(args.run[0])])
    elif args.command == "next-line":
        path = write_next_line_task(args.data, args.out, args.name, args.examples, args.seed, max_chars=args.max_chars)
        print(f"task {args.name}: {args.examples} examples -> {path}")
    else:
        from lm_eval.tasks import TaskManager

        manager = TaskManager()
        for name in _names(args.tasks):
            if name not in manager.task_index:
                raise UserError(f"{name!r} is not an lm-eval task")
            print(f"{name} -> {export_task(name, args.out, manager)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
