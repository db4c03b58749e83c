"""Config files are data, and every bad key, shape and number is named by its key path before any job (the
schema, the grid, the cell, the cost tool)."""

import os
import time
from pathlib import Path

import pytest
import yaml
from helpers import CELL, SCHEMA, cell_file, cli_error, tiny_config

from merit_repro.config import configfiles
from merit_repro.plan.cell import CellConfig
from merit_repro.plan.validate import validate
from merit_repro.train import loop, memory

REPO = Path(__file__).resolve().parents[1]


def test_config_files_with_duplicates_aliases_tags_or_templates_are_refused(tmp_path, monkeypatch):
    cases = {"dup": "a: 1\nb: {c: 2, c: 3}\n",
             "alias": "a: &x [1, 2]\nb: *x\n",
             "bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
                 f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)),
             "tag": "a: !!python/object/apply:os.system [echo PWNED]\n",
             "yte": "__use_yte__: true\na: ?1 + 1\n"}
    paths = {}
    for name, text in cases.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    start = time.perf_counter()
    found = {name: configfiles.problems(path) for name, path in paths.items()}
    assert time.perf_counter() - start < 5   # the alias bomb is refused before anything expands it
    assert found["dup"] == [f"{paths['dup']}, line 2: duplicate key b.c (first at line 2); YAML would silently keep "
                            "only one: keep one"]
    assert "line 1: YAML anchors and aliases are refused" in found["alias"][0]
    assert "line 1: YAML anchors and aliases are refused" in found["bomb"][0]
    assert "asks for a Python object" in found["tag"][0]
    assert "__use_yte__ makes Snakemake run the file" in found["yte"][0]
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert configfiles.problems(latin1) == [f"{latin1}: not UTF-8 text (invalid continuation byte at byte 9); save it "
                                            "as UTF-8"]
    monkeypatch.setenv(configfiles.ALLOW_TEMPLATES, "1")
    assert configfiles.problems(paths["yte"]) == []


@pytest.mark.parametrize("text, yte_runs_it", [
    ("<<: {__use_yte__: true}\nresults: ?'elsewhere'\n", True),   # a merge key lifts it to the top
    ('__use_yte__: "false"\nresults: ?1 + 1\n', True),           # a string, and a true one
    ("__use_yte__: !!str off\nresults: ?1 + 1\n", True),
    ("__use_yte__: [1]\nresults: ?1 + 1\n", True),               # used to crash the check
    ("models:\n  T: {__use_yte__: true}\n", False),              # refused at any level
])
def test_every_template_switch_is_refused_whatever_its_value(tmp_path, monkeypatch, text, yte_runs_it):
    """Snakemake evaluates a config as a template when YTE's loader (PyYAML's FullLoader, merge keys resolved) gives
    a true top-level __use_yte__; the check reads the file the same way and refuses the key anywhere."""
    monkeypatch.delenv(configfiles.ALLOW_TEMPLATES, raising=False)
    assert bool(yaml.load(text, Loader=yaml.FullLoader).get("__use_yte__")) == yte_runs_it
    path = tmp_path / "config.yaml"
    path.write_text(text)
    found = configfiles.problems(path)
    assert len(found) == 1 and "__use_yte__ makes Snakemake run the file as a YTE template" in found[0], found
    assert found[0].startswith(f"{path}, line {1 + text.startswith('models')}: the key "
                               f"{'models.T.' if not yte_runs_it else ''}__use_yte__ is refused"), found


def test_a_merge_key_does_not_hide_a_duplicate(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("results: mine\n<<: {results: theirs}\n")
    assert configfiles.problems(path) == [f"{path}, line 1: duplicate key results (first at line 2); YAML would "
                                          "silently keep only one: keep one"]


@pytest.mark.parametrize("name, text", [("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n"),
                                        ("deep.json", '{"a": ' + "[" * 5000 + "]" * 5000 + "}"),
                                        ("a-little-deep.yaml", "a: " + "[" * 40 + "]" * 40 + "\n")])
def test_a_deeply_nested_config_is_one_error_line(tmp_path, capsys, name, text):
    path = tmp_path / name
    path.write_text(text)
    line = cli_error(configfiles.main, [str(path)], capsys)
    assert line == f"error: config file refused: {path}, line 1: nested more than 32 levels deep; a workflow config " \
                   "needs 6 at most"


def test_a_json_config_is_read_as_snakemake_reads_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"results": "out", "max_job_minutes": 1e5}')   # YAML 1.1 would read 1e5 as text
    assert configfiles.read(path) == ({"results": "out", "max_job_minutes": 100000.0}, [])


def test_the_project_configs_are_plain_data():
    root = os.path.join(os.path.dirname(__file__), "..")
    for path in ["config/config.yaml", "config/paper.yaml", "tests/workflow_config.yaml", SCHEMA,
                 "profiles/default/config.yaml", "profiles/slurm/config.yaml"]:
        assert configfiles.problems(os.path.join(root, path)) == [], path


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["models"].update({"L" * 300: c["models"]["T"]}), "models: 'LLLL"),
    (lambda c: c["data"].update({"sh{x}": c["data"]["shakespeare-bytes"]}), "data: 'sh{x}' does not match"),
    (lambda c: c["data"].update({False: c["data"]["shakespeare-bytes"]}), "data: False is not of type 'string'"),
    (lambda c: c.update(results="res{model}"), "results: 'res{model}' does not match"),
    (lambda c: c["experiments"]["sweep"]["paper"].update(batch_sizes={8: "lots"}),
     "experiments.sweep.paper.batch_sizes.8: 'lots' is not of type 'integer'"),
    (lambda c: c["experiments"]["sweep"]["paper"].update(tokens="lots"),
     "experiments.sweep.paper.tokens: 'lots' is not of type 'number', 'null'"),
    (lambda c: c["experiments"]["sweep"].update(tokens=float("inf")), "experiments.sweep.tokens: inf is greater than"),
    (lambda c: c["experiments"]["sweep"].update(seeds=[2**63]), "experiments.sweep.seeds.0: 9223372036854775808 is greater"),
    (lambda c: c["experiments"]["sweep"].update(batch_sizes=[10**12]), "experiments.sweep.batch_sizes.0: 1000000000000 is greater"),
    # a name with a trailing line break used to pass ($ matches before it) and make paths with line breaks
    (lambda c: c["models"].update({"T\n": c["models"]["T"]}), "models: 'T\\n' does not match"),
    (lambda c: c["experiments"].update({"sweep\n": c["experiments"]["sweep"]}),
     "experiments: 'sweep\\n' does not match"),
    (lambda c: c["data"]["shakespeare-bytes"].update(dataset="shakespeare\n"),
     "data.shakespeare-bytes.dataset: 'shakespeare\\n' does not match"),
    (lambda c: c.update(bundle_name="b\n"), "bundle_name: 'b\\n' does not match"),
])
def test_the_schema_names_each_bad_key_in_one_line(edit, message):
    config = tiny_config()
    edit(config)
    found = configfiles.schema_problems(config, SCHEMA)
    assert len(found) == 1 and found[0].startswith(message) and "\n" not in found[0], found


@pytest.mark.parametrize("overrides, message", [
    ({"n_layer": 0}, "n_layer=0 must be >= 1"), ({"n_head": 0}, "n_head=0 must be >= 1"),
    ({"n_layer": -2}, "n_layer=-2 must be >= 1"), ({"n_embd": 65}, "n_embd=65 is not divisible by n_head=2"),
    ({"tokens": float("nan")}, "tokens=nan must be a finite number"),
    ({"tokens": float("inf")}, "tokens=inf must be a finite number"),
    ({"seed": -1}, "seed=-1 must be in [0, 2**63)"), ({"seed": 10**23}, "seed=100000000000000000000000 must be in"),
    ({"batch_size": 10**12}, "batch_size=1000000000000 is more sequences"),
    ({"model": "demo-llama", "n_embd": 66, "n_head": 2},
     "n_embd=66 gives heads of 33 dimensions with n_head=2; rotary"),
])
def test_a_cell_names_each_bad_shape_and_number(overrides, message):
    problems = CellConfig.from_dict({**CELL, **overrides}).problems()
    assert [m for _, m in problems] == [message] or any(m.startswith(message) for _, m in problems), problems


def test_the_workflow_preflight_covers_the_grid_numbers():
    config = tiny_config()
    config["experiments"]["sweep"]["tokens"] = float("nan")
    with pytest.raises(ValueError, match=r"experiments.sweep.tokens=nan must be a finite number"):
        validate(config)
    config = tiny_config()
    config["models"]["T"]["n_layer"] = 0
    with pytest.raises(ValueError, match=r"models.T.n_layer: n_layer=0 must be >= 1"):
        validate(config)
    config = tiny_config()
    config["models"]["T"]["n_layers"] = 4   # a typo of n_layer used to be a TypeError while Snakemake parsed
    with pytest.raises(ValueError, match=r"models.T.n_layers is not a cell setting; known settings: batch_size"):
        validate(config)


def test_a_huge_batch_is_split_into_micro_batches_at_once():
    start = time.perf_counter()
    assert memory.divisors_of(2 * 3**20)[:2] == [2 * 3**20, 3**20] and memory.divisors_of(1) == [1]
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize("setting, message", [
    ("n_layer=-2", "n_layer=-2 must be >= 1"), ("seed=-1", "seed=-1 must be in"), ("tokens=.nan", "tokens=nan must"),
    ("tokens=1e400", "tokens=inf must be a finite number"), ("seed=1e23", "seed='1e23' must be int"),
    ("batch_size=1000000000000", "batch_size=1000000000000 is more sequences"),
])
def test_the_trainer_refuses_bad_numbers_in_one_line(tmp_path, data_dir, capsys, setting, message):
    line = cli_error(loop.main, ["--config", str(cell_file(tmp_path, data_dir)), "--out", str(tmp_path / "run"),
                                  "--set", setting], capsys)
    assert message in line and not (tmp_path / "run").exists()


def test_steps_to_target_without_merit_is_made(tmp_path):
    from synthetic import build, make_artifact

    config = tiny_config()
    config["experiments"] = {"sweep": {**config["experiments"]["sweep"], "optimizers": ["adamw"],
                                       "lr_grid": {"adamw": [3e-3]}, "artifacts": ["steps_to_target"]}}
    paths = build(tmp_path, config, lambda group, lr, seed: 3.0 + 0.01 * seed)
    verdict = make_artifact(paths, config, "steps_to_target", "sweep")
    assert verdict["artifact"] == "steps_to_target" and (tmp_path / "paper_figures" / "steps_to_target").is_dir()


def test_a_cell_file_with_a_duplicate_key_is_refused(tmp_path, capsys):
    cell = tmp_path / "cell.yaml"
    cell.write_text("model: demo-tiny\nlr: 1.0e-3\nlr: 2.0e-3\n")
    line = cli_error(loop.main, ["--config", str(cell), "--out", str(tmp_path / "run")], capsys)
    assert f"{cell}, line 3: duplicate key lr (first at line 2)" in line and not (tmp_path / "run").exists()


def test_the_cost_tool_reads_a_config_as_the_workflow_does(tmp_path, capsys):
    from helpers import WORKFLOW

    from merit_repro.plan import cost

    bad = tmp_path / "bad.yaml"
    bad.write_text(WORKFLOW.read_text().replace("results: results", "results: res{model}"))
    line = cli_error(cost.main, ["--configfile", str(bad)], capsys)
    assert "results: 'res{model}' does not match" in line


def test_a_number_yaml_reads_as_text_gets_the_fix():
    config = tiny_config()
    config["experiments"]["sweep"]["batch_sizes"] = [4, "1e12"]
    found = configfiles.schema_problems(config, SCHEMA)
    assert found == ["experiments.sweep.batch_sizes.1: '1e12' is not of type 'integer' (YAML reads 1e12 as text: "
                     "write it with a dot and a signed exponent, e.g. 1.0e+12)"], found


def test_task_folders_from_elsewhere_need_the_opt_in(monkeypatch):
    """A task YAML can import Python (`!function`): zeroshot.task_dirs is used only with MERIT_ALLOW_TASK_DIRS=1."""
    config = tiny_config()
    config["zeroshot"] = {**config.get("zeroshot", {}), "task_dirs": ["tasks/"]}
    configfiles.check_schema(config, SCHEMA)
    monkeypatch.delenv(configfiles.ALLOW_TASK_DIRS, raising=False)
    with pytest.raises(ValueError, match=r"zeroshot.task_dirs=\['tasks/'\]: task YAMLs can run Python .* only with "
                                         r"MERIT_ALLOW_TASK_DIRS=1"):
        validate(config)
    validate({**config, "bundle": "b.tar.gz"})   # a rebuild from a bundle scores nothing: no opt-in needed
    monkeypatch.setenv(configfiles.ALLOW_TASK_DIRS, "1")
    validate(config)


@pytest.mark.parametrize("edit, message", [
    # used to pass every check and the dry run, then fail 9 artifact jobs after every cell trained
    (lambda c: c.update(optimizers={"adamw": {"color": "not-a-colour"}}),
     "optimizers.adamw.color='not-a-colour' is not a matplotlib colour; use a name"),
    # used to enter the cells' identity while the schedule set every step's LR
    (lambda c: c.update(optimizers={"adamw": {"lr": 1.0e-2}}),
     "optimizers.adamw.lr does nothing: every cell's lr comes from experiments.<name>.lr_grid"),
    (lambda c: c["models"]["T"].update(batch_size=4), "models.T.batch_size does nothing: every cell's batch_size"),
    (lambda c: c["cell_defaults"].update(optimizer_hparams={"lr": 1.0e-2}),
     "cell_defaults.optimizer_hparams.lr does nothing: every cell's lr comes from"),
    # used to make every job one step long
    (lambda c: c.update(max_job_minutes=0.01), "max_job_minutes=0.01 is shorter than a training job needs"),
    (lambda c: c.update(results="res\n"), "results='res\\n' holds a line break or control character"),
])
def test_settings_that_do_nothing_or_cannot_work_are_refused_before_any_job(edit, message):
    config = tiny_config()
    edit(config)
    with pytest.raises(ValueError) as err:
        validate(config)
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 1 and lines[0].strip().startswith(message), lines


def test_the_shortest_job_limit_a_chain_of_jobs_uses_passes():
    config = tiny_config()
    config.update(max_job_minutes=0.3, optimizers={"adamw": {"color": "C3"}})   # tests/test_cluster.py's limit
    validate(config)   # raises ValueError, naming max_job_minutes, where a limit is too short
    config.update(max_job_minutes=0.01)
    with pytest.raises(ValueError, match="max_job_minutes=0.01 is shorter than a training job needs"):
        validate(config)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in [*REPO.glob("config/*.yaml"),
                                                                         *REPO.glob("examples/*.yaml")])
                         + ["tests/workflow_config.yaml"])
def test_every_shipped_config_passes_the_checks(path):
    config = configfiles.load(REPO / path)
    assert validate(config) is config and config["experiments"]   # a problem raises ValueError, naming it


@pytest.mark.parametrize("setting", ["mal_probes", "warmup_frac"])
def test_a_probe_count_or_warmup_share_that_the_steps_cannot_hold_is_refused_before_any_job(setting):
    """mal_probes: 1000000000 used to pass and keep the trainer building probe steps for minutes; warmup_frac: 0.99
    warmed up over every step of a 16-step cell (the LR never decayed) while warmup_steps: 16 was refused."""
    config = tiny_config()
    config["cell_defaults"][setting] = {"mal_probes": 10**9, "warmup_frac": 0.99}[setting]
    start = time.perf_counter()
    with pytest.raises(ValueError) as err:
        validate(config)
    assert time.perf_counter() - start < 5
    lines = [line.strip() for line in str(err.value).splitlines()[1:]]
    expected = {"mal_probes": "cell_defaults.mal_probes: mal_probes=1000000000 is more probes than the cell's 16 steps "
                              "(batch 8, 4096 tokens): set mal_probes to at most 16, or to null to probe every "
                              "mal_every steps (in experiments.sweep, cell results/runs/",
                "warmup_frac": "cell_defaults.warmup_frac: warmup_frac=0.99 warms up over 16 steps, not fewer than the "
                               "cell's 16 (batch 8): its LR would never decay; lower warmup_frac (in "
                               "experiments.sweep, cell results/runs/"}[setting]
    assert any(line.startswith(expected) for line in lines), lines
    config["cell_defaults"][setting] = {"mal_probes": 16, "warmup_frac": 0.9}[setting]   # within every cell's steps
    validate(config)


MIXED, TYPO = {"T": {"adamw": [4]}, "merit": [8]}, {"T": [4], "T-typo": [8]}
UNREAD, NESTED_TYPO = {"adamw": {"T": [4]}, "merit": [8]}, {"T": {"adamw": [4], "merti": [8]}}


@pytest.mark.parametrize("batch_sizes, message", [
    # MERIT trained nothing: T's entry hides the optimizer's key
    (MIXED, "experiments.sweep.batch_sizes.merit: an optimizer's key beside models' keys (T), whose entries hide it "
            "(merit would train nothing there): key batch_sizes by model or by optimizer, not both; per model and "
            "optimizer, write {T: {merit: [...]}}"),
    # an unknown key was ignored
    (TYPO, "experiments.sweep.batch_sizes.T-typo: 'T-typo' is neither a model (T) nor an optimizer (adamw, merit) of "
           "the experiment, so its batch sizes would train nothing: rename it to one of them or remove it"),
    ({"adamw": [4], "merit": [8], "merti": [16]}, "experiments.sweep.batch_sizes.merti: 'merti' is neither a model"),
    # a mapping under an optimizer was never read
    (UNREAD, "experiments.sweep.batch_sizes.adamw: a mapping under an optimizer's key is never read (adamw would train "
             "nothing): give adamw a list of batch sizes, or key batch_sizes by model, {T: {adamw: [...]}}"),
    (NESTED_TYPO, "experiments.sweep.batch_sizes.T.merti: 'merti' is not one of the experiment's optimizers (adamw, "
                  "merit): rename it to one of them or remove it"),
])
def test_batch_sizes_that_would_drop_cells_are_refused_one_line_each(batch_sizes, message):
    config = tiny_config()
    config["experiments"]["sweep"]["batch_sizes"] = batch_sizes
    assert configfiles.schema_problems(config, SCHEMA) == []
    with pytest.raises(ValueError) as err:
        validate(config)
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 1 and lines[0].strip().startswith(message), lines


@pytest.mark.parametrize("given, message", [
    ("adopt_folders=true", "adopt_folders: 'true' is text, not a boolean: write --config adopt_folders=True "
                           "(Snakemake's --config reads only True and False as booleans)"),
    ("adopt_folders=NO", "adopt_folders: 'NO' is text, not a boolean: write --config adopt_folders=False"),
    ("second_look_seeds=[3]", "second_look_seeds: ['3'] holds text, not numbers: Snakemake's --config reads a list's "
                              "items as text, so set it in your config file instead: second_look_seeds: [3]"),
    ("second_look_seeds=3", "second_look_seeds: 3 is not a list, and second_look_seeds takes a list: Snakemake's "
                            "--config reads a list's items as text, so set it in your config file instead: "
                            "second_look_seeds: [3]"),
    ("max_job_minutes=[30]", "max_job_minutes: ['30'] is a list, and max_job_minutes takes one number: write "
                             "--config max_job_minutes=30"),
    ("second_look_seeds=[1e3]", "second_look_seeds: ['1e3'] holds text, not numbers: Snakemake's --config reads a "
                                "list's items as text, so set it in your config file instead: second_look_seeds: "
                                "[1000]"),
    ("claim_seeds=null", "claim_seeds: 'null' is text, not null: write claim_seeds: null in your config file"),
])
def test_a_value_of_the_wrong_kind_from_the_command_line_gets_advice_that_works(given, message):
    """Values as Snakemake's --config reads them (True and False are its only booleans; a list's items are text). The
    advice used to be the schema's description, or for [3] to write 3 with a signed exponent."""
    from snakemake.cli import parse_config

    config = tiny_config()
    config.update(parse_config([given]))
    found = configfiles.schema_problems(config, SCHEMA)
    assert found == [message] or (len(found) == 1 and found[0].startswith(message)), found
    fixed = tiny_config()   # what the advice says to write passes
    if "write --config " in message:
        fixed.update(parse_config([message.split("write --config ")[1].split()[0]]))
    elif "in your config file" in message and "instead" not in message:
        fixed.update(yaml.safe_load(message.split("write ")[1].split(" in your config file")[0]))
    else:
        fixed.update(yaml.safe_load(message.split("instead: ")[1]))
    assert configfiles.schema_problems(fixed, SCHEMA) == []
