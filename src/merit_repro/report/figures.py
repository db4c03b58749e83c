"""Pure figure functions: lines in, matplotlib figure out, saved as PNG and PDF."""

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from merit_repro.config.registry import FIGURE_LINE_COLORS, OPTIMIZERS  # noqa: E402

# One colour per optimizer (the registry's), the same in every figure, and for the lines that are not one.
COLORS = {**{name: spec.color for name, spec in OPTIMIZERS.items()}, **FIGURE_LINE_COLORS}


@dataclass
class Line:
    label: str
    x: list
    y: list
    color_key: str | None = None
    linestyle: str = "-"
    marker: str | None = None
    err: list | None = None      # error bars (seed std)
    hollow: bool = False         # the paper's values: hollow markers
    band: tuple | None = None    # (lower, upper) at each x: the seeds' spread, shaded


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    lines: list = field(default_factory=list)
    logx: bool = False
    logy: bool = False
    xticks: list | None = None   # ticks at these values, labelled as plain numbers (batch sizes, LRs)
    empty_text: str = "no finished runs"
    hline: tuple | None = None   # (y, label): a level drawn across the panel (the MAL threshold)


def _plot(ax, line, colors):
    color = colors.get(line.color_key or line.label)
    style = dict(label=line.label, color=color, linestyle=line.linestyle, marker=line.marker)
    if line.hollow:
        style.update(markerfacecolor="none", markersize=8, alpha=0.8)
    if line.err and any(line.err):
        ax.errorbar(line.x, line.y, yerr=line.err, capsize=3, **style)
    else:
        ax.plot(line.x, line.y, **style)
    if line.band:
        ax.fill_between(line.x, *line.band, color=color, alpha=0.2, linewidth=0)


def _log_labels(axis, lo, hi):
    """Plain numbers at the decades; at 2 and 5 times them only where the axis spans under two decades, so
    the labels never crowd (matplotlib would label every minor tick of a short log axis in 1e+00 form)."""
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_formatter(plain)
    if lo > 0 and hi / lo < 100:
        axis.set_minor_locator(matplotlib.ticker.LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(plain)
    else:
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _wrap(text, width_in):
    return "\n".join(textwrap.wrap(text, max(20, int(width_in * 11))))


def draw(panels, width=6.4, height=4.0, suptitle=None, colors=None):
    """One row of panels; each legend sits below its panel, off the data; titles wrap to the figure. colors:
    {colour key: colour} beside COLORS (an experiment's optimizers from outside)."""
    colors = {**COLORS, **(colors or {})}
    legend_rows = max([math.ceil((sum(bool(line.x) for line in p.lines) + bool(p.hline)) / 2) for p in panels] or [0])
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height + 0.22 * legend_rows),
                             squeeze=False, layout="constrained")
    for ax, panel in zip(axes[0], panels):
        lines = [line for line in panel.lines if line.x]
        for line in lines:
            _plot(ax, line, colors)
        if panel.logx:
            ax.set_xscale("log", base=2)
        if panel.hline:
            ax.axhline(panel.hline[0], color="black", linestyle="--", linewidth=0.8, label=panel.hline[1])
        if panel.logy:
            ax.set_yscale("log")
            _log_labels(ax.yaxis, *ax.get_ylim())
        if panel.xticks:
            ax.set_xticks(panel.xticks, [f"{t:g}" for t in panel.xticks])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(_wrap(panel.title, width), fontsize="medium")
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        if lines or panel.hline:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize="small", frameon=False)
        if not lines:
            ax.text(0.5, 0.5, panel.empty_text, ha="center", va="center", transform=ax.transAxes)
    if suptitle:
        fig.suptitle(_wrap(suptitle, width * len(panels)))
    return fig


def save(fig, prefix, dpi=150):
    """prefix.png and prefix.pdf."""
    prefix = Path(prefix)
    fig.savefig(prefix.with_suffix(".png"), dpi=dpi)
    fig.savefig(prefix.with_suffix(".pdf"))
    plt.close(fig)
