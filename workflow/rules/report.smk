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
        expected=configured_groups(),
    script:
        "../scripts/collect_runs.py"


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
        report=grid.sorted_dict(config["report"]),
        experiment=lambda wc: grid.sorted_dict(config["experiments"][wc.experiment]),
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
