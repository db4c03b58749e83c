"""Pure figure functions: lines in, matplotlib figure out, saved as PNG and PDF."""

from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# One colour per optimizer, the same in every figure.
COLORS = {"adamw": "tab:blue", "lamb": "tab:orange", "merit": "tab:green", "maxlamb": "tab:purple",
          "merit_noclip": "tab:olive", "merit_nofloor": "tab:cyan", "merit_noelementwise": "tab:pink",
          "adamw+qknorm": "tab:red", "merit+qknorm": "tab:brown"}


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
    twin: bool = False           # on a right-hand axis (the paper's values when our model is a stand-in)


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    lines: list = field(default_factory=list)
    logx: bool = False
    logy: bool = False
    xticks: list | None = None


def _plot(ax, line):
    color = COLORS.get(line.color_key or line.label)
    style = dict(label=line.label, color=color, linestyle=line.linestyle, marker=line.marker)
    if line.hollow:
        style.update(markerfacecolor="none", markersize=8, alpha=0.8)
    if line.err and any(line.err):
        ax.errorbar(line.x, line.y, yerr=line.err, capsize=3, **style)
    else:
        ax.plot(line.x, line.y, **style)


def draw(panels, width=6.4, height=4.0, suptitle=None):
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        lines = [line for line in panel.lines if line.x]
        twin_lines = [line for line in lines if line.twin]
        twin = ax.twinx() if twin_lines else None
        for line in lines:
            _plot(twin if line.twin else ax, line)
        for a in [ax] + ([twin] if twin else []):
            if panel.logx:
                a.set_xscale("log", base=2)
            if panel.logy:
                a.set_yscale("log")
        if twin:
            twin.set_ylabel(f"{panel.ylabel}, the paper's (hollow)")
        if panel.xticks:
            ax.set_xticks(panel.xticks, [str(t) for t in panel.xticks])
            ax.minorticks_off() if not panel.logy else None
        ax.set_title(panel.title)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        if lines:
            handles, labels = ax.get_legend_handles_labels()
            if twin:
                more = twin.get_legend_handles_labels()
                handles, labels = handles + more[0], labels + more[1]
            ax.legend(handles, labels, fontsize="small")
        else:
            ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def save(fig, prefix, dpi=150):
    """prefix.png and prefix.pdf."""
    prefix = Path(prefix)
    fig.savefig(prefix.with_suffix(".png"), dpi=dpi)
    fig.savefig(prefix.with_suffix(".pdf"))
    plt.close(fig)
