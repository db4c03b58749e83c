"""Table 1's route: our lm-eval model against a direct computation and the exported HF model, the local next-line
task, offline task errors, and which cells keep their weights."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import yaml
from helpers import cell_file, run_cli
from synthetic import GRID, demo_config, landscape

lm_eval = pytest.importorskip("lm_eval")


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("zeroshot")
    config = cell_file(tmp, data_dir, tokens=8 * 32 * 10)
    r = run_cli(config, tmp / "run", "--set", "save_model=true")
    assert r.returncode == 0, r.stderr
    return tmp / "run"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, data_dir):
    from merit_repro.evals.tasks import write_next_line_task

    out = tmp_path_factory.mktemp("tasks")
    write_next_line_task(data_dir, out, "next_line", examples=40, max_chars=24)
    return out


def direct_loglikelihood(loaded, context, continuation):
    """log P(continuation | context) with one unbatched forward pass: lm-eval's split (a context's trailing spaces
    go to the continuation), the window cut on the left to the trained context."""
    stripped = context.rstrip()
    continuation, context = context[len(stripped):] + continuation, stripped
    ctx, cont = loaded.tokenizer.encode_ordinary(context), loaded.tokenizer.encode_ordinary(continuation)
    whole = (ctx + cont)[-(loaded.block_size + 1):]
    n = min(len(cont), len(whole) - 1)
    with torch.no_grad():
        logits = loaded.model(torch.tensor(whole[:-1])[None])[0][0, :, :loaded.vocab_size]
    logprobs = F.log_softmax(logits.double(), -1)[-n:]
    return logprobs.gather(-1, torch.tensor(whole[-n:])[:, None]).sum().item()


def test_loglikelihoods_equal_a_direct_computation(run):
    from merit_repro.evals.harness import RunLM
    from merit_repro.evals.runmodel import load_run

    loaded = load_run(run)
    loaded.vocab_size = 200   # as if the model's rows beyond 200 were padding: they must not enter the softmax
    lm = RunLM(loaded, device="cpu", batch_size=3)
    pairs = [("To be, or not", " to be"), ("A", "B"), ("long " * 40, "context cut on the left"),
             ("Enter KING.\n", "Exit."), ("x", "y" * 31)]
    got = lm.loglikelihood([SimpleNamespace(args=p) for p in pairs], disable_tqdm=True)
    for (context, continuation), (value, _) in zip(pairs, got):
        assert value == pytest.approx(direct_loglikelihood(loaded, context, continuation), abs=1e-4)
    loaded.vocab_size = 256
    full = RunLM(loaded, device="cpu").loglikelihood([SimpleNamespace(args=pairs[0])], disable_tqdm=True)[0][0]
    assert full != pytest.approx(got[0][0], abs=1e-4)   # the cut changes the numbers: the test can fail
    with pytest.raises(ValueError, match="longer than the 32 tokens"):
        lm.loglikelihood([SimpleNamespace(args=("x", "y" * 33))], disable_tqdm=True)


def test_the_next_line_task_is_a_fair_multiple_choice(data_dir, task_dir):
    rows = [json.loads(line) for line in (task_dir / "next_line.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and {len(r["choices"]) for r in rows} == {4}
    assert len({r["label"] for r in rows}) > 1   # the answer is not always first
    from merit_repro.evals.tasks import validation_documents

    docs = [[line.rstrip() for line in doc.splitlines() if line.strip()] for doc in validation_documents(data_dir)]
    for r in rows:
        answer = r["choices"][r["label"]]
        assert docs[r["document"]][r["line"]] == answer   # the line that follows the context
        assert r["context"] == "\n".join(docs[r["document"]][r["line"] - 2:r["line"]]) + "\n"
        for i, option in enumerate(r["choices"]):
            assert abs(len(option) - len(answer)) <= max(1, len(answer) // 10)
            if i != r["label"]:
                assert option not in docs[r["document"]]   # from other plays


def test_lm_eval_gives_the_same_accuracy_with_our_model_and_the_exported_hf_model(run, task_dir, tmp_path):
    pytest.importorskip("transformers")
    from lm_eval.models.huggingface import HFLM

    from merit_repro.evals.export import main as export
    from merit_repro.evals.harness import RunLM
    from merit_repro.evals.tasks import load_tasks

    assert export(["--run", str(run), "--out", str(tmp_path / "hf")]) == 0
    scores = []
    for model in (RunLM(str(run), device="cpu"), HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=8)):
        tasks, manager = load_tasks(["next_line"], [task_dir])
        results = lm_eval.simple_evaluate(model=model, tasks=list(tasks.values()), num_fewshot=0, log_samples=False,
                                          task_manager=manager)
        scores.append({k: v for k, v in results["results"]["next_line"].items() if k.startswith("acc")})
    assert scores[0] == scores[1] and 0 <= scores[0]["acc,none"] <= 1


def zeroshot_cli(*args):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "merit_repro.evals.zeroshot", *args], capture_output=True, text=True,
                          env=env)


def test_the_cli_writes_lm_evals_results_beside_the_run(run, task_dir):
    r = zeroshot_cli("eval", "--run", str(run), "--tasks", "next_line", "--include", str(task_dir), "--limit", "10")
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads((run / "zeroshot.json").read_text())
    ours = result["merit_repro"]
    assert ours["n"] == {"next_line": 10} and ours["metric"] == "acc" and ours["lm_eval"] == lm_eval.__version__
    assert ours["accuracy"]["next_line"] == result["results"]["next_line"]["acc,none"] == ours["mean"]
    items = ours["items"]["next_line"]   # each item's correctness, for item-paired comparisons; no per-sample logs
    assert len(items["correct"]) == 10 and items["correct"].count("1") / 10 == ours["mean"] and len(items["docs"]) == 16
    assert "samples" not in result


@pytest.mark.slow
def test_a_task_that_is_not_available_offline_fails_before_the_model_loads(tmp_path, run):
    no_weights = tmp_path / "run"
    no_weights.mkdir()
    (no_weights / "summary.json").write_text((run / "summary.json").read_text())   # no model.pt
    r = zeroshot_cli("eval", "--run", str(no_weights), "--tasks", "arc_easy")
    assert r.returncode == 2
    assert "'arc_easy'" in r.stderr and "merit_repro.evals.zeroshot export --tasks arc_easy" in r.stderr
    assert "model.pt" not in r.stderr and "Traceback" not in r.stderr
    r = zeroshot_cli("eval", "--run", str(no_weights), "--tasks", "next_line", "--include", str(tmp_path / "none"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_a_run_without_weights_says_how_to_get_them(tmp_path, run, task_dir):
    no_weights = tmp_path / "run"
    no_weights.mkdir()
    (no_weights / "summary.json").write_text((run / "summary.json").read_text())
    r = zeroshot_cli("eval", "--run", str(no_weights), "--tasks", "next_line", "--include", str(task_dir))
    assert r.returncode == 2 and "model.pt not found" in r.stderr and "save_model" in r.stderr


def test_only_claim_seed_cells_of_zeroshot_groups_keep_their_weights():
    from merit_repro.plan import grid

    config = yaml.safe_load(open("config/config.yaml"))
    assert grid.cell_config(config, "S", "262144", "merit", 64, "4e-2", 1)["save_model"] is True   # table1's
    assert not grid.cell_config(config, "S", "262144", "merit", 64, "4e-2", 0).get("save_model")   # a grid seed
    assert not grid.cell_config(config, "S", "262144", "merit", 16, "4e-2", 1).get("save_model")   # not Table 1's
    assert not grid.cell_config(config, "M", "262144", "merit", 64, "4e-2", 1).get("save_model")
    paper = yaml.safe_load(open("config/paper.yaml"))
    kept = {(g.model, g.optimizer, g.batch) for g in grid.zeroshot_groups(paper)}
    assert kept == {("small", "adamw", 480), ("small", "lamb", 4096), ("small", "merit", 4096),
                    ("medium", "adamw", 480), ("medium", "lamb", 6144), ("medium", "merit", 6144)}
    assert grid.cell_config(paper, "medium", "48000000000", "merit", 6144, "6e-3", 1)["save_model"] == "bf16"
    assert not grid.cell_config(paper, "medium", "8000000000", "merit", 4096, "6e-3", 1).get("save_model")


def test_an_exported_paper_task_loads_offline_from_a_copied_folder(tmp_path, run):
    """The layout `zeroshot export` writes (placeholders for lm-eval's task files and the folder), copied to
    another place: COPA through lm-eval's own task YAML and its !function helpers, over local JSONL."""
    from merit_repro.evals.tasks import task_yaml
    from merit_repro.evals.zeroshot import evaluate

    folder = tmp_path / "copied"
    (folder / "copa").mkdir(parents=True)
    rows = [{"premise": "The man turned on the faucet.", "choice1": "The toilet filled with water.",
             "choice2": "Water flowed from the spout.", "question": "effect", "label": 1, "idx": i} for i in range(6)]
    for split in ("train", "validation"):   # every split the task names, as the export writes them
        (folder / "copa" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = 'include: "{LM_EVAL_TASKS}/super_glue/copa/default.yaml"\n'
    text += task_yaml("copa", {s: f"{{TASK_DIR}}/copa/{s}.jsonl" for s in ("train", "validation")}).replace(
        "dataset_kwargs:", "dataset_name: null\ndataset_kwargs:", 1)
    (folder / "copa.yaml").write_text(text)
    results = evaluate([str(run)], ["copa"], [folder], device="cpu")[str(run)]
    assert results["merit_repro"]["n"] == {"copa": 6} and results["merit_repro"]["tasks"] == ["copa"]


def test_a_planted_task_file_is_refused_before_it_runs_or_a_model_loads(tmp_path, run, task_dir):
    """A second YAML with the same task name (lm-eval would keep one by file order, logging it) is an error before
    any model loads, and its `!function` code never runs."""
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "ran"
    (planted / "pwn.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef process_docs(d):\n    return d\n")
    (planted / "0_next_line.yaml").write_text("task: next_line\nprocess_docs: !function pwn.process_docs\n")
    no_weights = tmp_path / "run"
    no_weights.mkdir()
    (no_weights / "summary.json").write_text((run / "summary.json").read_text())   # no model.pt: none may load
    r = zeroshot_cli("eval", "--run", str(no_weights), "--tasks", "next_line", "--include", str(task_dir),
                     "--include", str(planted))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "zero-shot task 'next_line' is defined by 2 task files" in r.stderr and "0_next_line.yaml" in r.stderr
    assert not marker.exists() and "model.pt" not in r.stderr


# ---------------------------------------------------------------- item-paired comparisons (the report's side)


def test_item_variance_weighs_each_task_by_its_own_item_count():
    """Two tasks, two seeds: var_i(seed-averaged contrast) / n_items per task, the tasks averaged (1 / n_tasks²)."""
    from merit_repro.report.artifacts.zeroshot import correctness, item_noise, item_variance

    subject = {1: {"a": [1, 1, 0, 0], "b": [0, 1]}, 2: {"a": [1, 0, 0, 0], "b": [0, 1]}}
    reference = {1: {"a": [1, 1, 1, 0], "b": [1, 1]}, 2: {"a": [1, 1, 1, 0], "b": [1, 1]}}
    # error contrasts in points, seed-averaged: a [0, 50, 100, 0] (mean 37.5, squares 6875), b [100, 0] (squares 5000)
    by_hand = (6875 / 3 / 4 + 5000 / 1 / 2) / 2 ** 2
    assert item_variance(subject, reference) == pytest.approx(by_hand)
    one_task = item_variance({s: {"ab": r["a"] + r["b"]} for s, r in subject.items()},
                             {s: {"ab": r["a"] + r["b"]} for s, r in reference.items()})
    assert one_task != pytest.approx(by_hand)   # pooling the items into one task weighs them otherwise

    assert list(map(str, correctness({"correct": "1-0"}))) == ["1.0", "nan", "0.0"]

    def records(side, gap):   # task b with an item neither side scored between its two
        return {s: {"a": {"correct": "".join(map(str, r["a"])), "docs": "A"},
                    "b": {"correct": gap.join(map(str, r["b"])), "docs": "B"}} for s, r in side.items()}
    variance, note = item_noise(records(subject, "-"), records(reference, "-"))
    assert variance == pytest.approx(by_hand) and "item-paired over the 6 items of 2 task(s)" in note


def test_item_noise_is_left_out_where_seeds_or_items_do_not_pair():
    from merit_repro.report.artifacts.zeroshot import item_noise

    def runs(seeds, correct="10", docs="A"):
        return {s: {"t": {"correct": correct, "docs": docs}} for s in seeds}
    assert item_noise(runs([1, 2]), runs([1, 2], "01"))[0] > 0
    for reference, why in ((runs([1, 3], "01"), "the claim seeds differ, 1 2 vs 1 3"),
                           ({1: None, 2: runs([2])[2]}, "without per-item scores"),
                           (runs([1, 2], "01", docs="B"), "different items of t"),
                           (runs([1, 2], "0-"), "different items of t"),
                           (runs([1, 2], "011"), "different items of t"),
                           ({s: {"u": r["t"]} for s, r in runs([1, 2]).items()}, "different tasks")):
        variance, note = item_noise(runs([1, 2]), reference)
        assert variance == 0 and note.startswith("seed-only test") and why in note, note
    assert item_noise({}, runs([1, 2])) == (0.0, "")   # a missing side: the comparison itself says so


TABLE1 = {"models": ["S"], "tokens": 65536, "optimizers": ["adamw", "lamb", "merit"],
          "batch_sizes": {"adamw": [8], "lamb": [64], "merit": [64]}, "lr_grid": GRID, "artifacts": ["zeroshot"],
          "paper": {"batch_sizes": {8: 480, 64: 4096}}}
ITEMS = 2000
# Per claim seed (1, 2, 3), items right of 2000: MERIT 5 points ahead of LAMB at every seed, within half a point.
RIGHT = {"merit": (800, 820, 810), "lamb": (700, 710, 720), "adamw": (700, 710, 720)}


@pytest.fixture(scope="module")
def table1(tmp_path_factory):
    """Tuned synthetic groups of a Table 1 experiment (merit_repro's report on results whose answer is known)."""
    from synthetic import PAPER_NUMBERS, build

    from merit_repro.report.artifacts import load_context

    config = {**demo_config(table1=TABLE1), "zeroshot": {"tasks": ["next_line"], "metric": "acc"}}
    paths = build(tmp_path_factory.mktemp("table1"), config, landscape({o: {8: 2.6, 64: 3.0} for o in RIGHT}))
    ctx = load_context("table1", config, paths["runs"], paths["cells"], paths["best_lr"], PAPER_NUMBERS)
    return config, paths, ctx


def write_scores(ctx, layout, items=True):
    """Each group's zero-shot file as `zeroshot eval --out` writes it: at seed s, the optimizer is right on
    RIGHT[optimizer][s - 1] items, the first ones (layout "nested": every optimizer right on the same easy items) or
    MERIT on the first and the others on the last (layout "apart": they get different items right)."""
    from merit_repro.plan.paths import zeroshot_file

    for optimizer, batch in (("adamw", 8), ("lamb", 64), ("merit", 64)):
        out, runs = {}, ctx.seed_runs("S", optimizer, batch)
        for run, seed in zip(runs.run_dir, runs.seed):
            k = RIGHT[optimizer][int(seed) - 1]
            right = "1" * k + "0" * (ITEMS - k)
            correct = right if layout == "nested" or optimizer == "merit" else right[::-1]
            ours = {"metric": "acc", "accuracy": {"next_line": k / ITEMS}, "mean": k / ITEMS,
                    **({"items": {"next_line": {"correct": correct, "docs": "0123456789abcdef"}}} if items else {})}
            out[run] = {"results": {"next_line": {"acc,none": k / ITEMS}}, "merit_repro": ours}
        path = Path(zeroshot_file(ctx.results, "table1", "S", optimizer, batch))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"tasks": ["next_line"], "metric": "acc", "runs": out}))


def merit_vs_lamb(config, paths):
    from synthetic import make_artifact

    v = make_artifact(paths, config, "zeroshot", "table1")
    rows = [r for r in v["rows"] if r["claim"].startswith("MERIT beats LAMB")]
    assert len(rows) == 1 and len(v["rows"]) == 2, v["rows"]
    return rows[0], v


def test_items_that_disagree_widen_the_comparison_the_seeds_alone_would_decide(table1):
    config, paths, ctx = table1
    write_scores(ctx, "nested", items=False)   # a result file from before items were kept: the seed-only test
    seeds_only, v = merit_vs_lamb(config, paths)
    assert seeds_only["verdict"] == "held" and seeds_only["difference"] == pytest.approx(-5.0)
    assert seeds_only["test"] == "paired t" and "item" not in seeds_only["basis"]
    assert "seed-only test (no item noise in the se): results without per-item scores" in seeds_only["reason"]
    assert any("pairs items" in n for n in v["notes"])

    write_scores(ctx, "nested")   # the same items right, bar MERIT's extra ones: little item noise
    nested, _ = merit_vs_lamb(config, paths)
    write_scores(ctx, "apart")   # the same accuracies on different items
    apart, _ = merit_vs_lamb(config, paths)
    for row in (nested, apart):
        assert row["difference"] == pytest.approx(-5.0) and row["test"] == "paired t"
        assert "item sampling adds sd" in row["basis"] and f"item-paired over the {ITEMS} items" in row["reason"]
    assert seeds_only["se"] < nested["se"] < apart["se"]
    assert nested["verdict"] == "held" and apart["verdict"] == "inconclusive", apart["reason"]
