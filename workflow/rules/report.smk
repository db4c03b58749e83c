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
        runs=f"{RESULTS}/tables/runs.csv",
        cells=f"{RESULTS}/tables/cells.csv",
    log:
        f"{RESULTS}/logs/report/collect_runs.log",
    conda:
        ENV
    params:
        results=lambda wc, output: str(Path(output.runs).parents[1]),
        mal_threshold=config["report"].get("mal_threshold", 100),
        expected=configured_groups(),
    script:
        "../scripts/collect_runs.py"


rule select_best_lr:
    input:
        decisions=tuned_groups(),
        runs=f"{RESULTS}/tables/runs.csv",
    output:
        f"{RESULTS}/tables/best_lr.csv",
    log:
        f"{RESULTS}/logs/report/select_best_lr.log",
    conda:
        ENV
    script:
        "../scripts/select_best_lr.py"


rule artifact:
    input:
        runs=f"{RESULTS}/tables/runs.csv",
        cells=f"{RESULTS}/tables/cells.csv",
        best=f"{RESULTS}/tables/best_lr.csv",
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
        f"{RESULTS}/logs/report/{{artifact}}/{{experiment}}.log",
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
        f"{RESULTS}/logs/report/figures_readme.log",
    conda:
        ENV
    script:
        "../scripts/figures_readme.py"
