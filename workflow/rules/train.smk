# One job per cell: python -m merit_repro.train (torchrun when the model asks for several GPUs).
# ckpt.pt lives beside the outputs but is not declared, so a failed or preempted job resumes from it.


rule train:
    input:
        cell_data,
    output:
        summary=f"{RESULTS}/runs/{CELL}/summary.json",
        eval=f"{RESULTS}/runs/{CELL}/eval.json",
        metrics=f"{RESULTS}/runs/{CELL}/metrics.csv",
        mal=f"{RESULTS}/runs/{CELL}/mal.csv",
        diagnostics=f"{RESULTS}/runs/{CELL}/diagnostics.csv",
    params:
        cell=cell_settings,
        gpus=lambda wc: grid.model_gpus(config, wc.model),
        out_dir=lambda wc: f"{RESULTS}/runs/{CELL}".format(**wc),
    conda:
        ENV
    log:
        f"{RESULTS}/logs/train/{CELL}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{CELL}.tsv"
    threads: 1
    resources:
        gpu=lambda wc: grid.model_gpus(config, wc.model),
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: cell_runtime_minutes(wc) * attempt,
    script:
        "../scripts/train_cell.py"
