# One job per cell: python -m merit_repro.launch (torchrun when the model asks for several GPUs, one per node
# under srun when it asks for more than a node has). The shell `exec`s it, so the launcher itself gets the
# scheduler's signals and the trainer checkpoints on them (its `error:` line is the log's last).
# ckpt.pt lives beside the outputs but is not declared, so a failed or preempted job resumes from it.
# Cores, memory and nodes scale with the cell's GPUs (merit_repro.plan.resources).
# Then, per group of cells (experiment, model, optimizer, batch), the LR tuning rounds (merit_repro.plan.tuning).


# What every training job asks for besides its GPUs and nodes (`use rule ... with:` replaces a rule's resources whole).
# Snakemake tracks a rule's params and retrains on a change to them: the cell's identity is the train rule's one
# param, and what does not change a result (the whole cell, the interpreter, the GPUs, tracking) goes as resources.
TRAIN_RESOURCES = dict(
    python=EXEC_PYTHON,
    cell_gpus=train_gpus,
    mem_mb=train_mem_mb,
    runtime=train_runtime,
    time_budget_s=time_budget_seconds,
    slurm_extra=train_slurm_extra,
    signal_lead_s=train_signal_lead,
    cell=train_cell,
    tracking=as_text(config["tracking"]),
)


rule train:
    input:
        cell_data,
    output:
        **paths.run_outputs(RUN_DIR),
    log:
        paths.log(RESULTS, "train", CELL_PATH),
    benchmark:
        paths.benchmark(RESULTS, "train", CELL_PATH)
    wildcard_constraints:
        model=_alternatives(ONE_NODE_MODELS) or "(?!)",  # (?!) matches nothing
    conda:
        ENV
    threads: train_threads
    resources:
        **TRAIN_RESOURCES,
        gpu=train_gpus,
        nodes=1,
    params:
        identity=train_identity,
        out_dir=run_folder,
    shell:
        "{resources.python} -m merit_repro.launch --cell {resources.cell:q} --tracking {resources.tracking:q} "
        "--out {params.out_dir:q} --gpus {resources.cell_gpus} --nodes {resources.nodes} --threads {threads} "
        "--time-budget-seconds {resources.time_budget_s} --signal-lead-seconds {resources.signal_lead_s} > {log:q} 2>&1"


if MULTI_NODE_MODELS:

    # A cell over several nodes: the job's own shell runs the launcher (SLURM executor plugin: `mpi`, so that no
    # one-task step holds the first node), which starts one torchrun a node with srun; the GPUs are asked for
    # per node (slurm_extra), not as `gpu`, which sbatch could spread over any nodes.
    use rule train as train_nodes with:
        wildcard_constraints:
            model=_alternatives(MULTI_NODE_MODELS),
        resources:
            **TRAIN_RESOURCES,
            gpu=0,
            nodes=train_nodes,
            tasks=train_nodes,
            mpi="srun",


# Round k of a group: its cells so far -> the next cells (grid extension, claim seeds) or done; a round that
# fails writes its `error:` line to the console too (EXEC_PYTHON). (Not `run:` blocks: Snakemake runs those in a Snakemake
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
    resources:
        python=EXEC_PYTHON,
    params:
        spec=tune_spec,
    shell:
        "{resources.python} -m merit_repro.plan.tuning --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


# The group's final decision, once its last round (or that of the group whose rounds it shares) says done
# and every cell it kept has finished.
rule tuned_group:
    input:
        decision=final_decision,
        runs=final_runs,
    output:
        paths.tuning_final(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}"),
    log:
        paths.log(RESULTS, "tuning", f"{GROUP_PATH}/final"),
    conda:
        ENV
    resources:
        python=EXEC_PYTHON,
    params:
        group=group_json,
    shell:
        "{resources.python} -m merit_repro.plan.tuning --adopt {input.decision:q} --group {params.group:q} "
        "--out {output:q} > {log:q} 2>&1"
