"""The figure functions: seed bands, the threshold line and log axes whose labels never crowd."""

import matplotlib.collections
import matplotlib.ticker

from merit_repro.report.figures import Line, Panel, draw


def panel_axes(panel):
    fig = draw([panel])
    return fig, fig.axes[0]


def test_a_band_is_shaded_and_the_threshold_drawn_and_named():
    band = ([1.0, 2.0, 3.0], [3.0, 6.0, 9.0])
    panel = Panel("MAL", "step", "MAL", [Line("AdamW", [0, 1, 2], [2.0, 4.0, 6.0], "adamw", band=band)], logy=True,
                  hline=(50.0, "MAL 50 (report.mal_threshold)"))
    _, ax = panel_axes(panel)
    shaded = [c for c in ax.collections if isinstance(c, matplotlib.collections.PolyCollection)]
    assert len(shaded) == 1
    assert any(list(line.get_ydata()) == [50.0, 50.0] for line in ax.get_lines())
    assert "MAL 50 (report.mal_threshold)" in [t.get_text() for t in ax.get_legend().get_texts()]


def labels(ax):
    ax.figure.canvas.draw()
    return [t.get_text() for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]


def test_a_long_log_axis_labels_its_decades_only():
    _, ax = panel_axes(Panel("MAL", "step", "MAL", [Line("AdamW", [0, 1], [0.5, 800.0], "adamw")], logy=True))
    assert isinstance(ax.yaxis.get_minor_formatter(), matplotlib.ticker.NullFormatter)
    assert set(labels(ax)) <= {"0.01", "0.1", "1", "10", "100", "1000", "10000"}


def test_a_short_log_axis_labels_2_and_5_in_plain_numbers():
    _, ax = panel_axes(Panel("MAL", "step", "MAL", [Line("AdamW", [0, 1], [1.5, 9.0], "adamw")], logy=True))
    found = labels(ax)
    assert {"2", "5"} <= set(found) and not any("e" in t or "times" in t for t in found)
    assert not {"3", "4", "6", "7", "8", "9"} & set(found)
