"""Train one cell: write its config beside the run and launch python -m merit_repro.train (merit_repro.launch)."""
import sys

from merit_repro.launch import launch_cell

sys.exit(launch_cell(snakemake.params.cell, snakemake.params.out_dir, gpus=snakemake.params.gpus,
                     threads=snakemake.threads, log_path=snakemake.log[0]))
