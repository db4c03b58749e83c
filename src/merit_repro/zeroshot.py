"""Zero-shot accuracy of a finished run through lm-evaluation-harness (Table 1), offline.

    python -m merit_repro.zeroshot eval --run results/runs/<cell> [--run ...] --tasks arc_easy,copa,hellaswag,race,wic \
        [--include DIR ...] [--limit N] [--batch-size 32] [--out FILE]
    python -m merit_repro.zeroshot next-line --data results/data/shakespeare-bytes --out DIR
    python -m merit_repro.zeroshot export --tasks arc_easy,copa,hellaswag,race,wic --out DIR   # with internet

``eval`` scores each run's own model (merit_repro.harness.RunLM) at ``num_fewshot`` 0 and writes lm-eval's results
JSON (without per-sample logs) with a ``merit_repro`` entry: the accuracy per task and their mean; one run to
RUN/zeroshot.json, several (the workflow: a tuned group's claim seeds) to --out, keyed by run directory. Tasks are looked
up first in the ``--include`` folders of task YAMLs (local JSONL exports: lm-eval's own task, ``include``d, with
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
import random
import sys
from pathlib import Path

from .utils import UserError, atomic_write_json, cli

FIX = ("on a machine with internet run `python -m merit_repro.zeroshot export --tasks {task} --out DIR`, copy DIR "
       "here and add it to zeroshot.task_dirs in the config (--include DIR); or copy a HuggingFace cache that holds "
       "the task's dataset (~/.cache/huggingface, or $HF_HOME)")


# ---------------------------------------------------------------- finding the tasks, before any model


LM_EVAL_TASKS, TASK_DIR = "{LM_EVAL_TASKS}", "{TASK_DIR}"   # placeholders in exported task YAMLs


def resolved_task_dirs(include):
    """The task folders with exported YAMLs made valid here: {LM_EVAL_TASKS} (lm-eval's own task files, which
    they include) and {TASK_DIR} (their JSONL files) replaced by this machine's paths, in a temporary copy."""
    import tempfile

    import lm_eval.tasks

    tasks_root = str(Path(lm_eval.tasks.__file__).parent)
    out = []
    for folder in map(Path, include):
        if not folder.is_dir():
            raise UserError(f"zero-shot task folder {folder} does not exist; fix zeroshot.task_dirs (--include)")
        copy = Path(tempfile.mkdtemp(prefix="merit-tasks-"))
        for yaml_file in folder.glob("*.yaml"):
            text = yaml_file.read_text().replace(LM_EVAL_TASKS, tasks_root).replace(TASK_DIR, str(folder.resolve()))
            (copy / yaml_file.name).write_text(text)
        out.append(str(copy))
    return out


def task_manager(names, include=()):
    """lm-eval's TaskManager over the local task folders, with lm-eval's own tasks only when a name is not
    among the local ones (indexing those takes about 15 s)."""
    from lm_eval.tasks import TaskManager

    include = resolved_task_dirs(include)
    if include:
        local = TaskManager(include_path=include, include_defaults=False)
        if all(n in local.all_tasks for n in names):
            return local
    return TaskManager(include_path=include or None)


def load_tasks(names, include=()):
    """({name: lm-eval Task} with its dataset loaded, their TaskManager), or a UserError naming the first task
    that cannot be loaded."""
    manager = task_manager(names, include)
    unknown = [n for n in names if n not in manager.all_tasks]
    if unknown:
        raise UserError(f"zero-shot task {unknown[0]!r} is neither an lm-eval task nor in a task folder "
                        f"({', '.join(map(str, include)) or 'none given'}); fix zeroshot.tasks or add its YAML")
    tasks = {}
    for name in names:
        try:
            tasks.update(manager.load([name])["tasks"])
        except Exception as err:   # datasets' offline and missing-file errors have no common base class
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise UserError(f"zero-shot task {name!r}: its dataset cannot be loaded ({type(err).__name__}: {first}). "
                            f"Fix: {FIX.format(task=name)}") from None
    return tasks, manager


# ---------------------------------------------------------------- eval


def accuracy(results, names, metric):
    """{task: metric} from lm-eval's results (its keys are "<metric>,<filter>")."""
    out = {}
    for name in names:
        values = {k.split(",")[0]: v for k, v in results["results"][name].items()}
        if metric not in values:
            raise UserError(f"task {name!r} reports no {metric!r} (it reports {', '.join(sorted(values))}); "
                            "set zeroshot.metric to one of them")
        out[name] = float(values[metric])
    return out


def evaluate(runs, names, include=(), metric="acc", limit=None, batch_size=32, device=None):
    """{run: lm-eval's results on the named tasks at zero shots, with our summary under "merit_repro"}."""
    import lm_eval

    from .harness import RunLM
    from .utils import library_versions

    tasks, manager = load_tasks(names, include)          # fails before any model is loaded
    out = {}
    for run in runs:
        results = lm_eval.simple_evaluate(model=RunLM(run, device=device, batch_size=batch_size),
                                          tasks=list(tasks.values()), num_fewshot=0, limit=limit, log_samples=False,
                                          random_seed=0, numpy_random_seed=0, torch_random_seed=0,
                                          fewshot_random_seed=0, task_manager=manager)
        results.pop("samples", None)
        scores = accuracy(results, names, metric)
        results["merit_repro"] = {"metric": metric, "accuracy": scores, "mean": sum(scores.values()) / len(scores),
                                  "n": {n: int(results["n-samples"][n]["effective"]) for n in names},
                                  "tasks": list(names), "limit": limit, "num_fewshot": 0, "run": str(run),
                                  "lm_eval": getattr(lm_eval, "__version__", None), "versions": library_versions()}
        out[str(run)] = json.loads(json.dumps(results, default=str))
        print(f"{run}: {json.dumps(scores)}", flush=True)
    return out


# ---------------------------------------------------------------- the demo's stand-in task


def validation_documents(data_dir):
    """The corpus's validation documents as text (its val.bin decoded with its own tokenizer)."""
    from .data import open_tokens, verify
    from .tokenizers import get_tokenizer

    meta = verify(data_dir)
    tokens = open_tokens(data_dir, "val", meta)
    tokenizer = get_tokenizer(meta["tokenizer"]["name"], meta["tokenizer"].get("source"))
    docs, start = [], 0
    ends = [i for i, t in enumerate(tokens.tolist()) if t == meta["eot"]] + [len(tokens)]
    for end in ends:
        if end > start:
            docs.append(tokenizer.decode(tokens[start:end]))
        start = end + 1
    return docs


def next_line_examples(docs, examples, context_lines=2, min_chars=16, max_chars=40, choices=4, seed=0):
    """Multiple-choice examples: context_lines lines of a document, its true next line, and choices - 1 lines of
    nearly the same length (within 10%) from the other documents, so length alone does not tell them apart."""
    if len(docs) < 2:
        raise UserError("the next-line task needs at least two validation documents (distractors come from the "
                        "others); give the corpus a larger val_fraction")
    lines = [[line.rstrip() for line in doc.splitlines() if line.strip()] for doc in docs]
    rng = random.Random(seed)
    spots = [(d, i) for d, doc in enumerate(lines) for i in range(context_lines, len(doc))
             if min_chars <= len(doc[i]) <= max_chars]
    rng.shuffle(spots)
    out = []
    for d, i in spots:
        answer = lines[d][i]
        others = [line for e, doc in enumerate(lines) if e != d for line in doc
                  if abs(len(line) - len(answer)) <= max(1, len(answer) // 10) and line != answer]
        if len(set(others)) < choices - 1:
            continue
        options = rng.sample(sorted(set(others)), choices - 1)
        label = rng.randrange(choices)
        options.insert(label, answer)
        out.append({"context": "\n".join(lines[d][i - context_lines:i]) + "\n", "choices": options, "label": label,
                    "document": d, "line": i})
        if len(out) == examples:
            return out
    raise UserError(f"the validation split gives only {len(out)} next-line examples of {min_chars}-{max_chars} "
                    f"characters, fewer than the {examples} asked for; lower zeroshot.local_tasks examples")


def task_yaml(name, data_files, **fields):
    lines = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:"]
    lines += [f"    {split}: {json.dumps(str(path))}" for split, path in data_files.items()]
    lines += [f"{k}: {json.dumps(v) if isinstance(v, str) else v}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def write_next_line_task(data_dir, out_dir, name="next_line", examples=200, seed=0, **options):
    """out_dir/{name}.jsonl and out_dir/{name}.yaml: an lm-eval multiple-choice task over local JSONL."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = next_line_examples(validation_documents(data_dir), examples, seed=seed, **options)
    data = out_dir / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    yaml_text = task_yaml(name, {"test": data.resolve()}, output_type="multiple_choice", test_split="test",
                          doc_to_text="{{context}}", doc_to_choice="{{choices}}", doc_to_target="{{label}}",
                          target_delimiter="")
    yaml_text += ("metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
                  "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\nmetadata:\n  version: 1.0\n"
                  f"  source: {json.dumps(str(Path(data_dir).resolve()))}\n")
    (out_dir / f"{name}.yaml").write_text(yaml_text)
    return out_dir / f"{name}.yaml"


# ---------------------------------------------------------------- export (on a machine with internet)


def export_task(name, out_dir, manager):
    """Every split lm-eval's task reads, as JSONL, and a YAML that includes lm-eval's own task over them."""
    import datasets

    import lm_eval.tasks

    entry = manager.task_index[name]
    cfg = entry.cfg
    if cfg.get("custom_dataset") or not cfg.get("dataset_path"):
        raise UserError(f"task {name!r} does not read a HuggingFace dataset; copy its own files instead")
    folder = Path(out_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    splits = {cfg[k] for k in ("training_split", "validation_split", "test_split", "fewshot_split") if cfg.get(k)}
    files = {}
    for split in sorted(splits):
        ds = datasets.load_dataset(cfg["dataset_path"], cfg.get("dataset_name"), split=split,
                                   **(cfg.get("dataset_kwargs") or {}))
        ds.to_json(str(folder / f"{split}.jsonl"), lines=True, force_ascii=False)
        files[split] = f"{TASK_DIR}/{name}/{split}.jsonl"   # wherever the folder is copied to
    own = Path(entry.yaml_path).relative_to(Path(lm_eval.tasks.__file__).parent)   # the lm-eval of the machine it runs on
    text = f"include: {json.dumps(f'{LM_EVAL_TASKS}/{own}')}\n" + task_yaml(name, files)
    (Path(out_dir) / f"{name}.yaml").write_text(text.replace("dataset_kwargs:", "dataset_name: null\ndataset_kwargs:", 1))
    return Path(out_dir) / f"{name}.yaml"


# ---------------------------------------------------------------- CLI


@contextlib.contextmanager
def gpu_slot(device):
    """The device to evaluate on: a GPU taken from the workflow's slots (merit_repro.gpu_slots, as a training cell
    takes its own) unless a scheduler assigned it or a device is given; the CPU without a GPU."""
    import torch

    from .gpu_slots import gpu_slots

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
    parser = argparse.ArgumentParser(prog="python -m merit_repro.zeroshot", description=__doc__,
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
