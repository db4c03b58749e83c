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


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    lines: list = field(default_factory=list)
    logx: bool = False
    logy: bool = False
    xticks: list | None = None


def draw(panels, width=6.4, height=4.0, suptitle=None):
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for line in panel.lines:
            ax.plot(line.x, line.y, label=line.label, color=COLORS.get(line.color_key or line.label),
                    linestyle=line.linestyle, marker=line.marker)
        if panel.logx:
            ax.set_xscale("log", base=2)
        if panel.logy:
            ax.set_yscale("log")
        if panel.xticks:
            ax.set_xticks(panel.xticks, [str(t) for t in panel.xticks])
            ax.minorticks_off() if not panel.logy else None
        ax.set_title(panel.title)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        if panel.lines:
            ax.legend(fontsize="small")
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
