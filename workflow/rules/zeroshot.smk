# Table 1: zero-shot accuracy through lm-evaluation-harness (merit_repro.evals.zeroshot). One job per tuned group of an
# experiment with the zeroshot artifact scores its best-LR claim-seed cells, whose final weights the trainer kept
# (grid.keeps_weights); local stand-in tasks are built from a corpus's validation split first.


rule zeroshot_task:
    input:
        task_corpus,
    output:
        yaml=f"{ZEROSHOT_TASKS}/{{task}}.yaml",
        jsonl=f"{ZEROSHOT_TASKS}/{{task}}.jsonl",
    log:
        paths.log(RESULTS, "zeroshot", "task_{task}"),
    conda:
        ENV
    resources:
        python=EXEC_PYTHON,
    params:
        data=lambda wc, input: folder_of(input[0]),
        spec=task_spec,
        out=lambda wc, output: folder_of(output.yaml),
    shell:
        "{resources.python} -m merit_repro.evals.zeroshot next-line --data {params.data:q} --out {params.out:q} "
        "--name {wildcards.task} --examples {params.spec[examples]} --max-chars {params.spec[max_chars]} "
        "--seed {params.spec[seed]} > {log:q} 2>&1"


rule zeroshot:
    input:
        decision=paths.tuning_final(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}"),
        runs=zeroshot_runs,
        tasks=[f"{ZEROSHOT_TASKS}/{task}.yaml" for task in ZEROSHOT["local_tasks"]],
    output:
        paths.zeroshot_file(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}"),
    log:
        paths.log(RESULTS, "zeroshot", GROUP_PATH),
    benchmark:
        paths.benchmark(RESULTS, "zeroshot", GROUP_PATH)
    conda:
        ENV
    threads: 1
    resources:
        gpu=scoring_gpus,
        mem_mb=8000,
        python=EXEC_PYTHON,
    params:
        offline=ZEROSHOT_OFFLINE,
        args=zeroshot_args,
        runs=lambda wc, input: run_flags(input.runs),
        device=scoring_device,
    shell:
        "export {params.offline}OMP_NUM_THREADS={threads}; {resources.python} -m merit_repro.evals.zeroshot eval "
        "{params.runs} {params.args} {params.device} --out {output:q} > {log:q} 2>&1"
