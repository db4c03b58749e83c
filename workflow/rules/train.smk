# One job per cell: python -m merit_repro.train (torchrun when the model asks for several GPUs). Its shell is one
# command, so the trainer itself gets the scheduler's signals (its `error:` line is the log's last).
# ckpt.pt lives beside the outputs but is not declared, so a failed or preempted job resumes from it.
# Then, per group of cells (experiment, model, optimizer, batch), the LR tuning rounds (merit_repro.plan.tuning).


rule train:
    input:
        cell_data,
    output:
        **paths.run_outputs(RUN_DIR),
    log:
        paths.log(RESULTS, "train", CELL_PATH),
    benchmark:
        paths.benchmark(RESULTS, "train", CELL_PATH)
    conda:
        ENV
    threads: 1
    resources:
        gpu=lambda wc: grid.model_gpus(config, wc.model),
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: math.ceil(job_minutes(wc, attempt)),
        time_budget_s=lambda wc, attempt: time_budget_seconds(wc, attempt),
        # how the cell runs (save_model, compile, ...): a resource, so that changing it retrains nothing
        run_settings=lambda wc: json.dumps(split_settings(cell_of(wc))[1], sort_keys=True),
    params:
        python=PYTHON,
        cell=lambda wc: json.dumps(split_settings(cell_of(wc))[0], sort_keys=True),
        gpus=lambda wc: grid.model_gpus(config, wc.model),
        out_dir=lambda wc, output: str(Path(output.summary).parent),
    shell:
        "{params.python:q} -m merit_repro.launch --cell {params.cell:q} --run-settings {resources.run_settings:q} "
        "--out {params.out_dir:q} "
        "--gpus {params.gpus} --threads {threads} --time-budget-seconds {resources.time_budget_s} > {log:q} 2>&1"


# Round k of a group: its cells so far -> the next cells (grid extension, claim seeds) or done; a round that
# fails echoes its log's `error:` line to the console. (Not `run:` blocks: Snakemake runs those in a Snakemake
# of their own, which parses the workflow again.)
checkpoint tune_lr:
    input:
        tune_inputs,
    output:
        paths.tuning_round(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}", "{round}"),
    log:
        paths.log(RESULTS, "tuning", f"{GROUP_PATH}/round{{round}}"),
    conda:
        ENV
    params:
        python=PYTHON,
        spec=tune_spec,
    shell:
        "{params.python:q} -m merit_repro.plan.tuning --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"
        " || {{ code=$?; grep '^error: ' {log:q} >&2 || true; exit $code; }}"


# The group's final decision, once its last round (or that of the group whose rounds it shares) says done
# and every cell it kept has finished.
rule tuned_group:
    input:
        decision=lambda wc: final_round(wc)[0],
        runs=final_runs,
    output:
        paths.tuning_final(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}"),
    log:
        paths.log(RESULTS, "tuning", f"{GROUP_PATH}/final"),
    conda:
        ENV
    params:
        python=PYTHON,
        group=lambda wc: json.dumps(grid.tuning_spec(config, group_of(wc))["group"], sort_keys=True),
    shell:
        "{params.python:q} -m merit_repro.plan.tuning --adopt {input.decision:q} --group {params.group:q} "
        "--out {output:q} > {log:q} 2>&1 || {{ code=$?; grep '^error: ' {log:q} >&2 || true; exit $code; }}"
