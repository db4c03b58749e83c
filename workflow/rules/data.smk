# Tokenized corpora: results/data/{dataset}/{train,val}.bin + meta.json (python -m merit_repro.data).


rule prepare_data:
    output:
        meta=f"{paths.data_dir(RESULTS, '{dataset}')}/meta.json",
    log:
        paths.log(RESULTS, "data", "{dataset}"),
    conda:
        ENV
    threads: 4
    resources:
        mem_mb=lambda wc, attempt: 8000 * attempt,
        runtime=lambda wc, attempt: 240 * attempt,
        python=EXEC_PYTHON,
    params:
        args=lambda wc, output, threads: prepare_args(wc.dataset, str(Path(output.meta).parent), threads),
    shell:
        "{resources.python} -m merit_repro.data prepare {params.args:q} > {log:q} 2>&1"
