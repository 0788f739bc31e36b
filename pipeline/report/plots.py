"""The report's figures as PNG bytes (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import io

import numpy as np


TOTALS = ("train_s", "epoch_s")      # wall totals in the trainer's record, not phases


def _epoch_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")


def _figure(width: float = 7.0, height: float = 3.6, ncols: int = 1):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    return plt, fig, axes[0]


def _png(plt, fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def degree_plot(hists: dict[str, np.ndarray]) -> bytes:
    """Log-log in-degree distribution per edge type (nodes per power-of-two degree bin,
    plotted at the bin's lower degree; degree-0 nodes are left out of a log axis)."""
    plt, fig, (ax,) = _figure()
    for name, hist in hists.items():
        bins = np.flatnonzero(hist[1:]) + 1
        # a label starting with "_" (our homogeneous "_N:_E:_N") is hidden by matplotlib
        ax.loglog(2.0 ** (bins - 1), hist[bins], marker="o", label=f"edges {name}")
    ax.set_xlabel("in-degree (bin lower bound, powers of two)")
    ax.set_ylabel("nodes")
    ax.set_title("In-degree distribution per edge type")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return _png(plt, fig)


def part_bars(panels: dict[str, dict[str, list[int]]]) -> bytes:
    """Per-part bars, one panel per quantity (``{title: {series: [P values]}}``; series are
    stacked), with the mean as a dashed line and max/mean in the title."""
    plt, fig, axes = _figure(width=3.3 * len(panels), height=3.3, ncols=len(panels))
    for ax, (title, series) in zip(axes, panels.items()):
        parts = np.arange(len(next(iter(series.values()))))
        bottom = np.zeros(len(parts))
        for name, values in series.items():
            ax.bar(parts, values, bottom=bottom, label=name if len(series) > 1 else None)
            bottom += np.asarray(values, dtype=float)
        mean = bottom.mean() if len(bottom) else 0.0
        ax.axhline(mean, color="black", linestyle="--", linewidth=1)
        ratio = f"max/mean {bottom.max() / mean:.3f}" if mean else "empty"
        ax.set_title(f"{title}\n{ratio}", fontsize="medium")
        ax.set_xlabel("part")
        ax.set_xticks(parts)
        if len(series) > 1:
            ax.legend(fontsize="x-small")
    return _png(plt, fig)


def cut_heatmap(cut: np.ndarray) -> bytes:
    """Edges from part q (row) into part p (column); the diagonal is each part's own edges,
    the rest the cut."""
    plt, fig, (ax,) = _figure(width=4.6, height=4.0)
    shown = np.where(np.eye(len(cut), dtype=bool), np.nan, cut.astype(float))
    # from 0, so that equal cuts (two parts) do not get a colour scale of their own noise
    image = ax.imshow(shown, cmap="viridis", vmin=0)
    fig.colorbar(image, ax=ax, label="cut edges (diagonal, uncoloured: a part's own)")
    for q in range(len(cut)):
        for p in range(len(cut)):
            if len(cut) <= 16:
                ax.text(p, q, f"{cut[q, p]:,}", ha="center", va="center", fontsize="x-small",
                        color="white" if q != p else "black")
    ax.set_xticks(range(len(cut)))
    ax.set_yticks(range(len(cut)))
    ax.set_xlabel("destination part")
    ax.set_ylabel("source part")
    ax.set_title(f"Edge cut {int(cut.sum() - np.trace(cut)):,} of {int(cut.sum()):,}")
    return _png(plt, fig)


def curves(epochs: list[dict], names: list[str], title: str) -> bytes:
    """One line per metric name over epochs (records without the metric are skipped)."""
    plt, fig, (ax,) = _figure()
    for name in names:
        points = [(r["epoch"], r[name]) for r in epochs
                  if isinstance(r.get(name), (int, float)) and r[name] == r[name]]
        if points:
            ax.plot(*zip(*points), marker="o", label=name)
    _epoch_axis(ax)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _png(plt, fig)


def time_bars(epochs: list[dict]) -> bytes:
    """Per epoch, the trainer's per-rank time per phase (mean over ranks), stacked."""
    plt, fig, (ax,) = _figure(width=8.4)
    phases = [k for k in dict.fromkeys(k for r in epochs for k in (r.get("time_per_rank_s") or {}))
              if k not in TOTALS]
    x = [r["epoch"] for r in epochs]
    bottom = np.zeros(len(x))
    for phase in phases:
        values = np.array([(r.get("time_per_rank_s") or {}).get(phase, 0.0) for r in epochs])
        ax.bar(x, values, bottom=bottom, label=phase)
        bottom += values
    _epoch_axis(ax)
    ax.set_ylabel("seconds per rank (mean over ranks)")
    ax.set_title("Time per rank by phase (background phases overlap)")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))  # off the bars
    return _png(plt, fig)


def rank_bars(epochs: list[dict]) -> bytes:
    """Per rank, the trainer's time per phase summed over all epochs, stacked, with each
    rank's summed epoch time as a marker: a straggler shows here where the mean hides it."""
    plt, fig, (ax,) = _figure(width=8.4)
    by_phase = {}
    for record in epochs:
        for phase, values in (record.get("time_by_rank_s") or {}).items():
            by_phase[phase] = by_phase.get(phase, 0.0) + np.asarray(values, dtype=float)
    totals = by_phase.pop("epoch_s", None)
    by_phase.pop("train_s", None)
    ranks = np.arange(len(next(iter(by_phase.values()))))
    bottom = np.zeros(len(ranks))
    for phase, values in by_phase.items():
        ax.bar(ranks, values, bottom=bottom, label=phase)
        bottom += values
    if totals is not None:
        ax.plot(ranks, totals, "k_", markersize=24, markeredgewidth=2, label="epoch wall time")
    ax.set_xticks(ranks)
    ax.set_xlabel("rank")
    ax.set_ylabel(f"seconds over {len(epochs)} epochs")
    ax.set_title("Time by rank and phase, all epochs (background phases overlap)")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))  # off the bars
    return _png(plt, fig)
