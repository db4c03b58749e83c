"""Helpers of the tests that check runs, config checks and error lines: a CLI's one `error:` line, private
copies of a finished run and of the demo corpus, the tiny workflow config."""

import json
import os
import shutil

import yaml
from test_train import TINY, cell_file, in_process_run, launch, run_cli, warm_dir  # noqa: F401 (a fixture)

from merit_repro.data import tokens
from merit_repro.train import loop

SCHEMA = os.path.join(os.path.dirname(__file__), "..", "workflow", "schemas", "config.schema.yaml")


def cli_error(main, argv, capsys):
    """The one `error:` line a CLI main prints for bad input (and its exit code 2)."""
    code = main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def private_copy(finished_run, tmp_path):
    run, corpus = finished_run
    shutil.copytree(corpus, tmp_path / "corpus")
    shutil.copytree(run, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    settings = {**summary["config"], "data_dir": str(tmp_path / "corpus")}
    return tmp_path / "run", tmp_path / "corpus", settings


def result_keys(settings):
    from merit_repro.plan.cell import result_settings

    return {k: v for k, v in result_settings(settings).items() if k != "data_dir"}


def prepare_again(corpus):
    tokens.prepare("shakespeare", "bytes", corpus, max_train_tokens=50_000, force=True)


def trained_on_a_copy(tmp_path, data_dir, capsys, **overrides):
    """A complete cell (trained in this process) on a private copy of the demo corpus: (config, run, corpus)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(data_dir, corpus)
    config, out = cell_file(tmp_path, corpus, tokens=8 * 32 * 10, **overrides), tmp_path / "run"
    assert loop.main(["--config", str(config), "--out", str(out)]) == 0
    capsys.readouterr()
    return config, out, corpus


def tiny_config():
    from test_workflow import TINY as TINY_WORKFLOW

    return yaml.safe_load(TINY_WORKFLOW.read_text())
