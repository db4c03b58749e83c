# MERIT reproduction: every validation-loss table and MAL plot of the paper, from one command.
#   snakemake --cores 2                                  # demo scale (config/config.yaml), CPU
#   snakemake --cores all --configfile config/paper.yaml # the paper's grid, on GPUs
#   snakemake --cores 1 bundle                           # results/bundle/<config>.tar.gz: what the report reads
#   snakemake --cores 1 --config bundle=PATH             # the report rebuilt from a bundle, nothing trained
# Stages: workflow/rules/{common,data,train,zeroshot,report,bundle}.smk; training is `python -m merit_repro.train`.

from snakemake.utils import min_version

min_version("9.0")


# The demo config is the default; a --configfile replaces it instead of being merged into it.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# common.smk checks the config files as data, then validates the config against
# workflow/schemas/config.schema.yaml and checks every cell, before any job.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


if not BUNDLE:  # from a bundle (--config bundle=PATH), its runs stand in for data, training and tuning

    include: "workflow/rules/data.smk"
    include: "workflow/rules/train.smk"
    include: "workflow/rules/zeroshot.smk"


include: "workflow/rules/report.smk"
include: "workflow/rules/bundle.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
