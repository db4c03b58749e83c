# Tuned groups -> tables/{runs,cells,best_lr}.csv -> the paper's artifacts in paper_figures/ (small files only).


# Seconds of work each: on a cluster they run where Snakemake runs instead of waiting in the queue.
localrules:
    tune_lr,
    tuned_group,
    collect_runs,
    select_best_lr,
    artifact,
    figures_readme,


rule collect_runs:
    input:
        decisions=tuned_groups(),
        data=used_corpora(),
    output:
        runs=paths.table(RESULTS, "runs.csv"),
        cells=paths.table(RESULTS, "cells.csv"),
    log:
        paths.log(RESULTS, "report", "collect_runs"),
    conda:
        ENV
    params:
        results=lambda wc, output: str(paths.results_of_table(output.runs)),
        mal_threshold=config["report"]["mal_threshold"],
        expected=configured_groups(tuned_groups()),
    script:
        "../scripts/collect_runs.py"


if SECOND_LOOK and not BUNDLE:  # a bundle brings both looks' decisions

    localrules:
        second_look,
        looked_group,

    # The first look at the claim seeds: every statement judged on them (at half of alpha); the groups behind those
    # left undecided for want of seeds train the second-look seeds at their chosen LR (merit_repro.report.second_look).
    checkpoint second_look:
        input:
            decisions=final_decisions(),
            data=used_corpora(),
            paper=PAPER_NUMBERS,
        output:
            paths.second_look(RESULTS),
        log:
            paths.log(RESULTS, "report", "second_look"),
        conda:
            ENV
        params:
            results=RESULTS,
            mal_threshold=config["report"]["mal_threshold"],
            expected=configured_groups(final_decisions()),
            # what the statements depend on besides the runs: a change looks again
            report=as_text(config["report"]),
            experiments=as_text(config["experiments"]),
            seeds=SECOND_LOOK,
        script:
            "../scripts/second_look.py"

    # A group's decision with the cells the second look added to it (none when it sent the group none).
    rule looked_group:
        input:
            final=paths.tuning_final(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}"),
            look=lambda wc: first_look(),
            runs=second_look_runs,
        output:
            paths.tuning_looked(RESULTS, "{experiment}", "{model}", "{optimizer}", "{batch}"),
        log:
            paths.log(RESULTS, "tuning", f"{GROUP_PATH}/looked"),
        conda:
            ENV
        resources:
            python=EXEC_PYTHON,
        shell:
            "{resources.python} -m merit_repro.plan.tuning --final {input.final:q} --second-look {input.look:q} "
            "--out {output:q} > {log:q} 2>&1"


rule select_best_lr:
    input:
        decisions=tuned_groups(),
        runs=paths.table(RESULTS, "runs.csv"),
    output:
        paths.table(RESULTS, "best_lr.csv"),
    log:
        paths.log(RESULTS, "report", "select_best_lr"),
    conda:
        ENV
    script:
        "../scripts/select_best_lr.py"


rule artifact:
    input:
        runs=paths.table(RESULTS, "runs.csv"),
        cells=paths.table(RESULTS, "cells.csv"),
        best=paths.table(RESULTS, "best_lr.csv"),
        paper=PAPER_NUMBERS,
        extra=artifact_extra,
        first_look=[paths.second_look(RESULTS)] if SECOND_LOOK else [],
    output:
        table=multiext(f"{FIGURES}/{{artifact}}/{{experiment}}", ".csv", ".md", ".tex", ".json"),
        png=report(
            f"{FIGURES}/{{artifact}}/{{experiment}}.png",
            caption="../report/artifact.rst",
            category="{artifact}",
            subcategory="{experiment}",
        ),
        pdf=f"{FIGURES}/{{artifact}}/{{experiment}}.pdf",
    log:
        paths.log(RESULTS, "report", "{artifact}/{experiment}"),
    conda:
        ENV
    params:
        report=as_text(config["report"]),
        experiment=experiment_spec,
    script:
        "../scripts/artifact.py"


rule figures_readme:
    input:
        [f"{prefix}.json" for name in config["experiments"] for prefix in experiment_artifacts(name)],
        [f"{prefix}.md" for name in config["experiments"] for prefix in experiment_artifacts(name)],
    output:
        readme=report(f"{FIGURES}/README.md", caption="../report/readme.rst", category="index"),
        claims=report(f"{FIGURES}/claims.csv", caption="../report/readme.rst", category="index"),
    log:
        paths.log(RESULTS, "report", "figures_readme"),
    conda:
        ENV
    script:
        "../scripts/figures_readme.py"
