"""A run's max attention logit (MAL) in phases, from the rows of its mal.csv (step, layer, head, mal).

The MAL at a probe is the largest logit over heads (of a layer) or over layers and heads (of the run). A run is
summarised by its peak over every probe, its largest MAL over the first quarter of its token budget and its mean
MAL over the last quarter, per layer and for the run; and by how many layers peak above each of MAL_LEVELS, a
ladder fixed before any run rather than one level chosen from the outcome. A probe after step s of a run of
`steps` planned steps has seen s / steps of its tokens (every step takes the same tokens).
"""

import numpy as np
import pandas as pd

MAL_LEVELS = (10, 30, 100, 300)   # half-decades: a demo model's MALs reach tens, GPT-2's hundreds
FIRST_QUARTER_END, LAST_QUARTER_START = 0.25, 0.75   # shares of the token budget


def spikes_kept(mal):
    """mal.csv with each non-finite logit as +inf: the largest spike of all, never dropped from a peak."""
    return mal.assign(mal=mal["mal"].where(~mal["mal"].isna() & ~np.isneginf(mal["mal"]), np.inf))


def mal_by_layer(mal):
    """Per layer: the max over heads and steps of the MAL (mal: DataFrame of mal.csv)."""
    return mal.groupby("layer")["mal"].max()


def by_probe(mal):
    """The MAL at each probe of each layer (max over heads): one row per step, one column per layer."""
    return spikes_kept(mal).groupby(["step", "layer"])["mal"].max().unstack("layer")


def phases(mal_by_step, steps):
    """Per column of mal_by_step (MAL series indexed by step): peak, max over the first quarter of the tokens,
    mean over the last quarter (NaN where no probe falls in it, as in a run that diverged early)."""
    share = mal_by_step.index.to_numpy() / steps
    return pd.DataFrame({"peak": mal_by_step.max(),
                         "first_quarter_max": mal_by_step.loc[share <= FIRST_QUARTER_END].max(),
                         "last_quarter_mean": mal_by_step.loc[share >= LAST_QUARTER_START].mean()})


def layers_over(peaks, levels=MAL_LEVELS):
    """{n_layers_peak_mal_over_<level>: how many layers' peak MAL exceeds it}, for each level."""
    return {f"n_layers_peak_mal_over_{level:g}": int((peaks > level).sum()) for level in levels}


def mal_phases(mal, steps):
    """(per layer, per run) summaries of a run's mal.csv rows (at least one), steps: its planned steps.
    Per layer: a DataFrame indexed by layer with the columns of phases(). Per run: peak_mal with the layer and
    step it came at (the first such row), n_layers, mal_first_quarter_max, mal_last_quarter_mean and the layer
    counts of layers_over()."""
    layers = by_probe(mal)
    per_layer = phases(layers, steps)
    run = phases(layers.max(axis=1).to_frame("run"), steps).loc["run"]
    values = spikes_kept(mal)
    peak = values.loc[values["mal"].idxmax()]
    summary = dict(peak_mal=float(peak["mal"]), peak_mal_layer=int(peak["layer"]), peak_mal_step=int(peak["step"]),
                   n_layers=int(mal["layer"].max()), mal_first_quarter_max=float(run["first_quarter_max"]),
                   mal_last_quarter_mean=float(run["last_quarter_mean"]))
    return per_layer, {**summary, **layers_over(per_layer["peak"])}
