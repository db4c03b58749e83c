"""Table 1's route: our lm-eval model against a direct computation and the exported HF model, the local next-line
task, offline task errors, and which cells keep their weights."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import yaml
from test_train import cell_file, run_cli

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
    assert not grid.cell_config(config, "L", "262144", "merit", 64, "4e-2", 1).get("save_model")
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
