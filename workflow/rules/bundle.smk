# Results bundles (merit_repro.bundle): `snakemake bundle` packs what the report reads; with `--config bundle=PATH`
# the report is rebuilt from one, its files unpacked where training and tuning would have put them.


localrules:
    bundle,


rule bundle:
    input:
        tables=[paths.table(RESULTS, name) for name in paths.TABLE_FILES],
        decisions=tuned_groups(),
        data=used_corpora(),
        zeroshot=zeroshot_outputs(),
    output:
        paths.bundle(RESULTS, BUNDLE_NAME),
    log:
        paths.log(RESULTS, "bundle", BUNDLE_NAME),
    conda:
        ENV
    params:
        results=lambda wc, input: str(paths.results_of_table(input.tables[0])),
        config=as_text(config),
        lock=str(Path(workflow.basedir) / "requirements-lock.txt"),
    script:
        "../scripts/make_bundle.py"


if BUNDLE:

    localrules:
        unpack_bundle,
        audit_bundle,

    # The report must follow from the bundle's runs: the rebuilt tables are compared with the bundle's own before
    # any artifact is made from them, and a difference stops the rebuild naming its rows.
    rule audit_bundle:
        input:
            tables=[paths.table(RESULTS, name) for name in paths.TABLE_FILES],
        output:
            f"{RESULTS}/{bundle.ORIGIN}/audit.txt",
        log:
            paths.log(RESULTS, "bundle", "audit"),
        conda:
            ENV
        resources:
            python=PYTHON,
        params:
            results=lambda wc, input: str(paths.results_of_table(input.tables[0])),
        shell:
            "{resources.python:q} -m merit_repro.bundle audit --results {params.results:q} > {output:q} "
            "2> {log:q} || (cat {log:q} >&2; exit 1)"

    if SECOND_LOOK:

        localrules:
            audit_first_look,

        # A rebuilt report keeps the first look's verdicts: they must be the ones the bundle's runs give.
        rule audit_first_look:
            input:
                decisions=final_decisions(),
                looked=tuned_groups(),
                first_look=paths.second_look(RESULTS),
                paper=PAPER_NUMBERS,
            output:
                f"{RESULTS}/{bundle.ORIGIN}/first_look_audit.txt",
            log:
                paths.log(RESULTS, "bundle", "audit_first_look"),
            conda:
                ENV
            params:
                results=RESULTS,
                mal_threshold=config["report"]["mal_threshold"],
            script:
                "../scripts/audit_first_look.py"

    rule unpack_bundle:
        input:
            BUNDLE,
        output:
            decisions=tuned_groups(),
            data=used_corpora(),
            zeroshot=zeroshot_outputs(),
            first_look=[paths.second_look(RESULTS)] if SECOND_LOOK else [],
            finals=final_decisions() if SECOND_LOOK else [],
        log:
            paths.log(RESULTS, "bundle", "unpack"),
        conda:
            ENV
        resources:
            python=PYTHON,
        params:
            results=lambda wc, output: str(paths.results_of_corpus(output.data[0])),
        shell:
            "{resources.python:q} -m merit_repro.bundle unpack {input:q} --into {params.results:q} > {log:q} 2>&1"
