"""runs.csv -> results/tables/best_lr.csv: the best LR per (experiment, model, optimizer, batch) and the grid."""
import sys

sys.stderr = sys.stdout = open(snakemake.log[0], "w")

import pandas as pd  # noqa: E402

from merit_repro.tables import select_best_lr  # noqa: E402

runs = pd.read_csv(snakemake.input[0], dtype={"lr": str, "tokens": str})
best = select_best_lr(runs, pd.DataFrame(snakemake.params.cells))
best.to_csv(snakemake.output[0], index=False)
print(best.to_string())
