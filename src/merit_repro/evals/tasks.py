"""lm-eval tasks without the internet: task folders over local JSONL, lm-eval's own tasks from the HuggingFace
cache, the export that makes such folders, and the demo's next-line stand-in.

An exported folder (``python -m merit_repro.evals.zeroshot export``) holds, per task, one JSONL per split it reads and a
YAML that ``include``s lm-eval's own task with ``dataset_path: json`` (lm-eval's "Using Local Datasets"). Its paths
are written as ``{LM_EVAL_TASKS}`` and ``{TASK_DIR}`` and resolved where it is used, so the folder can be copied to
a machine without internet. Every task is loaded before any model, and one that is not there fails at once,
naming it and how to provide it.
"""

import atexit
import json
import random
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

from merit_repro.data.tokenizers import get_tokenizer
from merit_repro.data.tokens import open_tokens, verify
from merit_repro.utils import UserError, parse_data

FIX = ("on a machine with internet run `python -m merit_repro.evals.zeroshot export --tasks {task} --out DIR`, copy DIR "
       "here and add it to zeroshot.task_dirs in the config (--include DIR); or copy a HuggingFace cache that holds "
       "the task's dataset (~/.cache/huggingface, or $HF_HOME)")


# ---------------------------------------------------------------- finding the tasks, before any model


LM_EVAL_TASKS, TASK_DIR = "{LM_EVAL_TASKS}", "{TASK_DIR}"   # placeholders in exported task YAMLs


def resolved_task_dirs(include):
    """The task folders with exported YAMLs made valid here: {LM_EVAL_TASKS} (lm-eval's own task files, which
    they include) and {TASK_DIR} (their JSONL files) replaced by this machine's paths, in a temporary copy that
    is removed when the process exits."""

    import lm_eval.tasks

    tasks_root = str(Path(lm_eval.tasks.__file__).parent)
    out = []
    for folder in map(Path, include):
        if not folder.is_dir():
            raise UserError(f"zero-shot task folder {folder} does not exist; fix zeroshot.task_dirs (--include)")
        copy = Path(tempfile.mkdtemp(prefix="merit-tasks-"))
        atexit.register(shutil.rmtree, copy, ignore_errors=True)
        for yaml_file in folder.glob("*.yaml"):
            text = yaml_file.read_text().replace(LM_EVAL_TASKS, tasks_root).replace(TASK_DIR, str(folder.resolve()))
            (copy / yaml_file.name).write_text(text)
        out.append(str(copy))
    refuse_duplicate_names(include)
    return out


class _TagsAsNone(yaml.SafeLoader):
    """Reads a task YAML for its names only: lm-eval's tags (`!function ...`) are read as nothing, never run."""


_TagsAsNone.add_multi_constructor("!", lambda loader, suffix, node: None)


def task_names(yaml_file):
    """The task names a task YAML defines (its `task:`, a name or a list of names)."""
    try:
        spec = parse_data(Path(yaml_file).read_text(encoding="utf-8"), f"zero-shot task file {yaml_file}",
                          lambda text: yaml.load(text, Loader=_TagsAsNone))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UserError(f"zero-shot task file {yaml_file} is not YAML ({err}); fix or remove it") from None
    names = spec.get("task") if isinstance(spec, dict) else None
    return [n for n in (names if isinstance(names, list) else [names]) if isinstance(n, str)]


def refuse_duplicate_names(folders):
    """A task name defined by two YAMLs (in one folder or across them) is an error before any model loads:
    lm-eval keeps one by the order it reads them and only logs it, so a planted file could replace a task."""
    files = defaultdict(list)
    for folder in map(Path, folders):
        for yaml_file in sorted(folder.glob("*.yaml")):
            for name in task_names(yaml_file):
                files[name].append(str(yaml_file))
    twice = {name: found for name, found in files.items() if len(found) > 1}
    if twice:
        name, found = sorted(twice.items())[0]
        raise UserError(f"zero-shot task {name!r} is defined by {len(found)} task files ({', '.join(found)}); lm-eval "
                        "would use one of them silently: remove the others")


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


# ---------------------------------------------------------------- the demo's stand-in task


def validation_documents(data_dir):
    """The corpus's validation documents as text (its val.bin decoded with its own tokenizer)."""
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
    by_length = {}   # length -> (document, line): the distractor candidates of an answer are a few lengths' lists
    for e, doc in enumerate(lines):
        for line in doc:
            by_length.setdefault(len(line), []).append((e, line))
    out = []
    for d, i in spots:
        answer = lines[d][i]
        tolerance = max(1, len(answer) // 10)
        others = sorted({line for n in range(len(answer) - tolerance, len(answer) + tolerance + 1)
                         for e, line in by_length.get(n, ()) if e != d and line != answer})
        if len(others) < choices - 1:
            continue
        options = rng.sample(others, choices - 1)
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
    # Fields named, not Jinja templates: lm-eval compiles a template again for every document
    yaml_text = task_yaml(name, {"test": data.resolve()}, output_type="multiple_choice", test_split="test",
                          doc_to_text="context", doc_to_choice="choices", doc_to_target="label", target_delimiter="")
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
