# Helpers: config checks, wildcard constraints, the grid of cells, tuning rounds, input functions, final targets.
import functools
import json
import math
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)  # run from a checkout without installing ...
# ... and every job imports this workflow's own merit_repro (also in a --sdm conda environment, and in
# SLURM jobs, which inherit the environment), not another installed copy.
os.environ.update(PYTHONPATH=os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])]))

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from merit_repro.config import configfiles, optimizer_sources
from merit_repro.config.registry import ARTIFACTS
from merit_repro.plan import folders as output_folders
from merit_repro.plan import grid, paths, runtime, tuning
from merit_repro.plan import resources as job_resources
from merit_repro.plan.cell import identity_text
from merit_repro.plan.validate import corpus_problems, optimizer_settings, source_problems, validate as check_config
from merit_repro import bundle
from merit_repro.train import tracking
from merit_repro.utils import UserError, failure_line

SCHEMA = str(Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")
try:  # duplicate keys, aliases, templates: before anything reads the values; then the schema, in short lines
    configfiles.check(workflow.configfiles)
    configfiles.check_schema(config, SCHEMA)
except UserError as err:
    raise WorkflowError(str(err)) from None
validate(config, SCHEMA)  # fills in the schema's defaults
BUNDLE = config.get("bundle")  # rebuild the report from a results bundle: no data, training or tuning job
try:  # refused before any job unless it verifies and was made with this config; its runs get their own folder
    if BUNDLE:
        bundle.check_for_rebuild(BUNDLE, config)
        config["results"] = bundle.rebuild_folder(BUNDLE, config["results"])
except UserError as err:
    raise WorkflowError(str(err)) from None
# Jobs run the interpreter running Snakemake, so that they see the same packages; with --sdm conda, the one of
# the job's environment (workflow/envs/merit.yaml), which Snakemake puts first on the job's PATH.
CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
try:
    if not BUNDLE:  # an optimizer from outside: its installed version, written in; a bundle's config has it already
        optimizer_sources.pin(config, installed_here=not CONDA)
    check_config(config)
except ValueError as err:  # the key path and the fix, without a traceback
    raise WorkflowError(str(err)) from None
try:  # a tracking backend that is not installed fails here, naming its package, not in every training job
    if not BUNDLE:  # a rebuild from a bundle trains nothing
        tracking.check_available(config["tracking"]["backend"])
except UserError as err:
    raise WorkflowError(str(err)) from None
# ---- output folders (merit_repro.plan.folders): results and figures must be the workflow's own; one holding files it
# did not write is refused here, before any job. A new or empty one is claimed (its record written) when a run starts,
# in onstart, never in a dry run; jobs that parse the workflow again (cluster, subprocess) leave it to the main one.
try:
    FOLDER_CLAIMS = {}
    if workflow.is_main_process:
        FOLDER_CLAIMS = output_folders.plan_claims(
            {"results": config["results"], "figures": config["figures"]}, ARTIFACTS, config["adopt_folders"]
        )
except UserError as err:
    raise WorkflowError(str(err)) from None
# ---- end of output folders

PYTHON = "python" if CONDA else sys.executable
# A job's shell `exec`s its command, so that the command, not a shell, gets the scheduler's signals (SIGTERM
# before a time limit or a preemption) and can checkpoint; its `error:` line still reaches the console through
# descriptor 3 (merit_repro.utils.take_console). Rules run `{resources.python} -m ...` with this, unquoted: a resource,
# not a param, since Snakemake reruns a job whose params changed, and a moved environment changes no result.
EXEC_PYTHON = f"exec 3>&2; MERIT_ERROR_FD=3 exec {shlex.quote(PYTHON)}"


def preflight(log):
    """When a run starts (not while the workflow is parsed, and not in a dry run): corpora prepared with other
    options than the config's, runs of an optimizer from outside trained with another version of its package, and
    every optimizer setting built once (merit_repro.optim.check, which needs torch). Any problem stops the run
    before its first job, one `error:` line each."""
    if BUNDLE:  # a rebuild from a bundle trains nothing and reads no corpus
        return
    # with --sdm conda an optimizer from outside is in the jobs' environment, not this one: each job builds it first
    settings = [s for s in optimizer_settings(config) if not (CONDA and s["source"])]
    settings = json.dumps(settings, sort_keys=True)
    command = [sys.executable, "-m", "merit_repro.optim.check", "--settings", settings]
    built = subprocess.run(command, capture_output=True, text=True)
    problems = (
        corpus_problems(config)
        + source_problems(config)
        + [line.removeprefix("error: ") for line in built.stderr.splitlines() if line.startswith("error: ")]
    )
    if built.returncode and not problems and CONDA and "No module named 'torch'" in built.stderr:
        print(
            "note: no torch beside Snakemake (--sdm conda): each training job builds its optimizer first",
            file=sys.stderr,
        )
    elif built.returncode and not problems:
        claim_folders()  # the crash's log goes into results: the workflow's folder from now on
        check_log = paths.log(config["results"], "preflight", "optimizer_check")
        problems = [failure_line("the optimizer check", command, built.stderr, check_log)]
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)


def cancel_reselection_timers():
    """Snakemake's scheduler selects jobs again one `max-jobs-per-timespan` timespan after each selection (5 s in
    the profiles) on a threading.Timer, and Python waits for every pending one before it exits: each run ended up to a
    timespan after its last job. No job is left to select once the run has ended."""
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()


def claim_folders():
    """The output folders' records, before anything writes there: a folder another run claimed for the other role
    since the plan stops this one, in one line."""
    try:
        output_folders.claim(FOLDER_CLAIMS)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


onstart:
    preflight(log)  # a refused config writes nothing, a crashed check only its log (after the claim)
    claim_folders()


onsuccess:
    cancel_reselection_timers()


onerror:
    cancel_reselection_timers()


ENV = "../envs/merit.yaml"  # with --sdm conda, for all rules alike (why one: that file's header)
PAPER_NUMBERS = str(Path(workflow.basedir) / "workflow" / "resources" / "paper_numbers.csv")
RESULTS = config["results"]
FIGURES = config["figures"]
# Wildcard patterns of a cell and of a tuned group (merit_repro.plan.paths lays the results folder out)
CELL_PATH = paths.cell_path("{model}", "{tokens}", "{optimizer}", "{batch}", "{lr}", "{seed}")
GROUP_PATH = paths.group_path("{experiment}", "{model}", "{optimizer}", "{batch}")
RUN_DIR = paths.run_dir(RESULTS, "{model}", "{tokens}", "{optimizer}", "{batch}", "{lr}", "{seed}")
GROUPS = grid.all_groups(config)
TUNING_OWNERS = grid.tuning_owners(config)
BUNDLE_NAME = config.get("bundle_name") or bundle.default_name(
    workflow.configfiles[-1] if workflow.configfiles else None
)
ZEROSHOT = grid.zeroshot_settings(config)
ZEROSHOT_TASKS = paths.zeroshot_tasks(RESULTS)
ZEROSHOT_OFFLINE = "HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 " if ZEROSHOT["offline"] else ""
MULTI_NODE_MODELS = [m for m in config["models"] if job_resources.multi_node(config, m)]
ONE_NODE_MODELS = [m for m in config["models"] if m not in MULTI_NODE_MODELS]
SECOND_LOOK = grid.second_look_seeds(config)  # a second look at the claim seeds (merit_repro.report.second_look)
MAX_TUNING_ROUNDS = 1000  # far above what any grid needs: each round adds at least one new cell


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    model=_alternatives(config["models"]),
    tokens=r"[0-9][0-9.e]*",
    optimizer=_alternatives(optimizer_sources.optimizer_names(config)),
    batch=r"[0-9]+",
    lr=r"[0-9][0-9.e-]*",
    seed=r"[0-9]+",
    dataset=_alternatives(config["data"]),
    experiment=_alternatives(config["experiments"]),
    artifact=_alternatives(ARTIFACTS),
    round=r"[0-9]+",


def run_dir(cell):
    return cell.path(RESULTS)


def cell_of(wildcards):
    """A cell's settings; asked for by its inputs, params and resources, so built once per cell."""
    return _cell_settings(
        wildcards.model, wildcards.tokens, wildcards.optimizer, wildcards.batch, wildcards.lr, wildcards.seed
    )


@functools.lru_cache(maxsize=None)
def _cell_settings(*coordinates):
    return grid.cell_config(config, *coordinates)


def prepare_args(dataset, out, threads):
    """The data CLI's arguments for one corpus, as a list: each is quoted for the shell, none is run by it."""
    spec = config["data"][dataset]
    args = ["--dataset", spec["dataset"], "--tokenizer", spec["tokenizer"], "--out", out, "--num-proc", str(threads)]
    for key in ("max_train_tokens", "max_val_tokens", "val_fraction", "seed", "tokenizer_file", "revision", "hf_path"):
        if spec.get(key) is not None:
            args += [f"--{key.replace('_', '-')}", str(spec[key])]
    return args


def cell_data(wildcards):
    """The prepared corpora a cell reads (and LAMBADA when configured for its tokenizer)."""
    settings = cell_of(wildcards)
    inputs = [f"{settings['data_dir']}/meta.json"]
    if settings["lambada_dir"]:
        inputs.append(f"{settings['lambada_dir']}/meta.json")
    return inputs


def job_minutes(wildcards, attempt):
    """Wall time of one training job: the cell's FLOPs at a conservative rate (more at each retry), never
    more than max_job_minutes, the partition's limit; a longer cell runs as a chain of jobs."""
    minutes = runtime.runtime_minutes(config, wildcards.model, wildcards.tokens) * attempt
    limit = config.get("max_job_minutes")
    return min(minutes, limit) if limit else minutes


def time_budget_seconds(wildcards, attempt):
    """The trainer's budget (0: none): with max_job_minutes, it checkpoints and exits before its job ends."""
    return round(60 * job_minutes(wildcards, attempt), 1) if config.get("max_job_minutes") else 0


# ---------------------------------------------------------------- LR tuning (merit_repro.plan.tuning)
# Each group (experiment, model, optimizer, batch) is tuned in rounds: round k's checkpoint job reads the
# results of the cells trained so far and decides the next cells (a grid extension, claim seeds) or that
# the group is done. Groups are tuned in parallel; groups of several experiments that train the same cells
# share the rounds of the first of them (grid.tuning_owners), and each writes its own final.json from them.


def group_of(wildcards):
    return GROUPS[(wildcards.experiment, wildcards.model, wildcards.optimizer, int(wildcards.batch))]


def rounds_group(wildcards):
    """The group whose rounds tune this one (itself, or the same cells' group of another experiment)."""
    return TUNING_OWNERS[(wildcards.experiment, wildcards.model, wildcards.optimizer, int(wildcards.batch))]


def cell_dir(group, lr, seed):
    return grid.Cell(group.model, group.tokens, group.optimizer, group.batch, lr, int(seed)).path(RESULTS)


def previous_decision(wildcards, round_):
    """What round round_ - 1 of the group decided (None before round 0)."""
    if round_ == 0:
        return None
    path = checkpoints.tune_lr.get(**group_of(wildcards).wildcards(), round=round_ - 1).output[0]
    return decision_at(path)


def decision_at(path):
    """A tuning round's decision; a damaged file stops the workflow naming it (not a traceback in the DAG)."""
    try:
        return tuning.read_decision(path)
    except UserError as err:
        raise WorkflowError(str(err)) from None


def cells_before(group, decision):
    """(lr, seed) of every cell a group has trained when a round decides: the configured grid before the
    first round, else what the previous round asked for."""
    if decision is None:
        return [(lr, seed) for lr in group.lrs for seed in grid.grid_seeds(config, group.experiment)]
    return [(c["lr"], c["seed"]) for c in decision["cells"]]


def tune_inputs(wildcards):
    group = group_of(wildcards)
    decision = previous_decision(wildcards, int(wildcards.round))
    return [f"{cell_dir(group, lr, seed)}/summary.json" for lr, seed in cells_before(group, decision)]


def tune_spec(wildcards):
    group = group_of(wildcards)
    decision = previous_decision(wildcards, int(wildcards.round))
    runs = [[lr, seed, cell_dir(group, lr, seed)] for lr, seed in cells_before(group, decision)]
    extensions = (decision or {}).get("extensions", [])
    return json.dumps({**grid.tuning_spec(config, group), "extensions": extensions, "runs": runs}, sort_keys=True)


def final_round(wildcards):
    """The last round (the one that says done) of the rounds that tune the group, and its decision."""
    group = rounds_group(wildcards)
    for round_ in range(MAX_TUNING_ROUNDS):
        path = checkpoints.tune_lr.get(**group.wildcards(), round=round_).output[0]
        decision = decision_at(path)
        if decision["done"]:
            return path, decision
    raise WorkflowError(f"tuning of {group} did not end within {MAX_TUNING_ROUNDS} rounds")


def final_runs(wildcards):
    """Every run file of the cells a tuned group kept."""
    group, (_, decision) = group_of(wildcards), final_round(wildcards)
    return [f"{cell_dir(group, c['lr'], c['seed'])}/{name}" for c in decision["cells"] for name in paths.RUN_FILES]


def zeroshot_runs(wildcards):
    """summary.json of a tuned group's claim-seed cells at its best LR (none when every LR diverged)."""
    group, (_, decision) = group_of(wildcards), final_round(wildcards)
    return [
        f"{cell_dir(group, c['lr'], c['seed'])}/summary.json"
        for c in decision["cells"]
        if c["seed_origin"] == tuning.CLAIM and c["lr"] == decision["best_lr"]
    ]


def run_flags(summaries):
    """--run DIR per summary.json; none in a dry run before tuning, where Snakemake puts the checkpoint's file
    (one string) in place of the inputs that its outcome decides."""
    if isinstance(summaries, str):
        return ""
    return " ".join(f"--run {shlex.quote(str(Path(s).parent))}" for s in summaries)


def zeroshot_args(wildcards):
    folders = ([ZEROSHOT_TASKS] if ZEROSHOT["local_tasks"] else []) + list(ZEROSHOT["task_dirs"])
    args = ["--tasks", ",".join(ZEROSHOT["tasks"]), "--metric", ZEROSHOT["metric"]]
    args += ["--batch-size", str(ZEROSHOT["batch_size"])] + [a for d in folders for a in ("--include", d)]
    args += ["--limit", str(ZEROSHOT["limit"])] if ZEROSHOT["limit"] else []
    return " ".join(shlex.quote(a) for a in args)


def zeroshot_outputs(experiment=None):
    """The zeroshot files of every group (of one experiment) that a zeroshot artifact reads."""
    return [
        paths.zeroshot_file(RESULTS, g.experiment, g.model, g.optimizer, g.batch)
        for g in grid.zeroshot_groups(config)
        if experiment in (None, g.experiment)
    ]


def artifact_extra(wildcards):
    """Besides the tables: the zero-shot scores an artifact reads, and in a rebuild from a bundle its audit (the
    rebuilt tables, and its first look at the claim seeds, equal the bundle's own)."""
    scores = zeroshot_outputs(wildcards.experiment) if ARTIFACTS[wildcards.artifact].needs_zeroshot else []
    if not BUNDLE:
        return scores
    audits = ["audit.txt", "first_look_audit.txt"] if SECOND_LOOK else ["audit.txt"]
    return scores + [f"{RESULTS}/{bundle.ORIGIN}/{name}" for name in audits]


def final_decisions():
    return [paths.tuning_final(RESULTS, *g.wildcards().values()) for g in GROUPS.values()]


def tuned_groups():
    """Each group's decision the report reads: its final one, with the second look's cells when there is one."""
    if not SECOND_LOOK:
        return final_decisions()
    return [paths.tuning_looked(RESULTS, *g.wildcards().values()) for g in GROUPS.values()]


def configured_groups(decisions):
    """Per tuned group (by the path of its decision), what the config asks of it: its tuning spec and its cells'
    settings (lr and seed aside). The collect step checks every run against it; a change reruns that check."""
    return as_text({path: grid.group_expectation(config, g) for path, g in zip(decisions, GROUPS.values())})


def first_look():
    """The first look's record (the second_look checkpoint's output): asked for once it is written."""
    return checkpoints.second_look.get().output[0]


def second_look_runs(wildcards):
    """Every run file of the cells the second look adds to a group (none when it sends the group none)."""
    look = first_look()  # before the final decision: it is there once the first look is
    final = decision_at(paths.tuning_final(RESULTS, **group_of(wildcards).wildcards()))
    try:
        added = tuning.with_second_look(final, json.loads(Path(look).read_text()))
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise WorkflowError(
            f"{look} cannot be read as the first look ({err}); delete it and run the workflow again"
        ) from None
    group = group_of(wildcards)
    return [
        f"{cell_dir(group, c['lr'], c['seed'])}/{name}"
        for c in added["cells"]
        if c["seed_origin"] == tuning.SECOND_LOOK
        for name in paths.RUN_FILES
    ]


def used_corpora():
    """meta.json of every corpus a configured cell reads: a corpus prepared again reruns the collect step."""
    return sorted({f"{d}/meta.json" for g in GROUPS.values() for d in grid.group_corpora(config, g)})


def experiment_artifacts(name):
    return [f"{FIGURES}/{a}/{name}" for a in grid.experiment_artifacts(config, name)]


def final_outputs():
    outputs = [paths.table(RESULTS, "best_lr.csv"), f"{FIGURES}/README.md", f"{FIGURES}/claims.csv"]
    for name in config["experiments"]:
        outputs += [f"{prefix}{ext}" for prefix in experiment_artifacts(name) for ext in (".png", ".md")]
    return outputs


# ---------------------------------------------------------------- train.smk's input functions


# What a training job asks for and runs with, from its wildcards (and the attempt: a retried job asks for more).
def train_mem_mb(wildcards, attempt):
    return job_resources.mem_mb(config, wildcards.model, attempt)


def train_runtime(wildcards, attempt):
    return math.ceil(job_minutes(wildcards, attempt))


def train_slurm_extra(wildcards, attempt):
    return job_resources.slurm_extra(config, wildcards.model, job_minutes(wildcards, attempt))


def train_signal_lead(wildcards, attempt):
    return job_resources.signal_lead(config, job_minutes(wildcards, attempt))


def as_text(obj):
    """A param of dicts, as sorted JSON text: Snakemake tracks a rule's params by their repr, in which a dict keeps
    the order of its keys, so the order of keys in a config file would rerun the rule."""
    return json.dumps(obj, sort_keys=True)


def train_cell(wildcards):
    """The whole cell, as the launcher takes it: a resource, which Snakemake does not track, so that how a cell
    runs (save_model, compile, where its corpus lies) retrains nothing."""
    return as_text(cell_of(wildcards))


def train_identity(wildcards):
    """The cell's identity (merit_repro.plan.cell.identity): the rule's one tracked param, compared as text."""
    return identity_text(cell_of(wildcards))


def train_threads(wildcards):
    return job_resources.threads(config, wildcards.model)


def train_gpus(wildcards):
    return grid.model_gpus(config, wildcards.model)


def train_nodes(wildcards):
    return job_resources.nodes(config, wildcards.model)


def run_folder(wildcards, output):
    return folder_of(output.summary)


def group_json(wildcards):
    return json.dumps(grid.tuning_spec(config, group_of(wildcards))["group"], sort_keys=True)


def final_decision(wildcards):
    return final_round(wildcards)[0]


# ---------------------------------------------------------------- zeroshot.smk's input functions


def task_spec(wildcards):
    return ZEROSHOT["local_tasks"][wildcards.task]


def task_corpus(wildcards):
    """The prepared corpus a local task is built from (its meta.json)."""
    return f"{grid.data_dir(config, task_spec(wildcards)['data'])}/meta.json"


def folder_of(path):
    return str(Path(path).parent)


def scoring_gpus(wildcards):
    """One GPU for scoring where the model trains on GPUs (lm-eval's hf model runs on one), else none."""
    return min(1, grid.model_gpus(config, wildcards.model))


def scoring_device(wildcards):
    return "" if grid.model_gpus(config, wildcards.model) else "--device cpu"


# ---------------------------------------------------------------- report.smk's input functions


def experiment_spec(wildcards):
    return as_text(config["experiments"][wildcards.experiment])
