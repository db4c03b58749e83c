# Tokenized corpora: results/data/{dataset}/{train,val}.bin + meta.json (python -m merit_repro.data).


rule prepare_data:
    output:
        meta=f"{RESULTS}/data/{{dataset}}/meta.json",
    params:
        python=PYTHON,
        spec=lambda wc: config["data"][wc.dataset],
        out=lambda wc: f"{RESULTS}/data/{wc.dataset}",
        extra=lambda wc: " ".join(
            f"--{key.replace('_', '-')} {value}"
            for key, value in config["data"][wc.dataset].items()
            if key in ("max_train_tokens", "val_fraction", "seed", "tokenizer_file") and value is not None
        ),
    conda:
        ENV
    log:
        f"{RESULTS}/logs/data/{{dataset}}.log",
    threads: 4
    resources:
        mem_mb=lambda wc, attempt: 8000 * attempt,
        runtime=lambda wc, attempt: 240 * attempt,
    shell:
        "{params.python} -m merit_repro.data prepare --dataset {params.spec[dataset]} --tokenizer {params.spec[tokenizer]} "
        "--out {params.out} --num-proc {threads} {params.extra} > {log} 2>&1"
