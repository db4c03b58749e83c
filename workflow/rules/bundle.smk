# Results bundles (merit_repro.bundle): `snakemake bundle` packs what the report reads; with `--config bundle=PATH`
# the report is rebuilt from one, its files unpacked where training and tuning would have put them.


localrules:
    bundle,


rule bundle:
    input:
        tables=multiext(f"{RESULTS}/tables/", "runs.csv", "cells.csv", "best_lr.csv"),
        decisions=tuned_groups(),
        data=used_corpora(),
        zeroshot=zeroshot_outputs(),
    output:
        f"{RESULTS}/bundle/{BUNDLE_NAME}.tar.gz",
    log:
        f"{RESULTS}/logs/bundle/{BUNDLE_NAME}.log",
    conda:
        ENV
    params:
        results=lambda wc, input: str(Path(input.tables[0]).parents[1]),
        config=grid.sorted_dict(config),
        lock=str(Path(workflow.basedir) / "requirements-lock.txt"),
    script:
        "../scripts/make_bundle.py"


if BUNDLE:

    localrules:
        unpack_bundle,

    rule unpack_bundle:
        input:
            BUNDLE,
        output:
            decisions=tuned_groups(),
            data=used_corpora(),
            zeroshot=zeroshot_outputs(),
        log:
            f"{RESULTS}/logs/bundle/unpack.log",
        conda:
            ENV
        params:
            python=PYTHON,
            results=lambda wc, output: str(Path(output.data[0]).parents[2]),  # results/data/<corpus>/meta.json
        shell:
            "{params.python:q} -m merit_repro.bundle unpack {input:q} --into {params.results:q} > {log:q} 2>&1"
