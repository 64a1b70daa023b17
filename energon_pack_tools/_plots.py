# SPDX-License-Identifier: Apache-2.0
"""The pictures behind ``energon-pack analyze --plot``, one PNG: document lengths (log bins, the
pack size marked), simulated fill against buffer size (stock and carry-over, the recommended
buffer marked), and the first packs the loader emitted. Needs matplotlib.

Below :data:`MIN_PLOT_DOCUMENTS` documents there is no picture to draw (a candidate buffer of
32 holds them all: the fill curve is one or two points, the histogram a few bars):
:func:`plot_analysis` raises :class:`TooFewDocuments` and ``analyze`` says so on its ``plot``
line instead of writing a degenerate PNG.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from energon_pack.algorithms import CarryOver
from energon_pack_tools._analysis_result import AnalysisResult, median_length
from energon_pack_tools._replay import BUFFER_CANDIDATES, recommend_buffer_size

__all__ = ["MIN_PLOT_DOCUMENTS", "TooFewDocuments", "buffer_fill_curves", "plot_analysis"]

#: Fewest documents :func:`plot_analysis` draws: two candidate buffers' worth (below it buffer
#: 32 holds every document, so the fill curve is one or two points; the histogram a few bars).
MIN_PLOT_DOCUMENTS = 2 * BUFFER_CANDIDATES[0]


class TooFewDocuments(ValueError):
    """The dataset has fewer than :data:`MIN_PLOT_DOCUMENTS` documents: no plot."""


_STOCK, _CARRY, _PACK = "#4c72b0", "#dd8452", "#c44e52"


def buffer_fill_curves(
    result: AnalysisResult, candidates: tuple[int, ...] = BUFFER_CANDIDATES
) -> dict[str, dict[int, float]]:
    """Simulated fill per buffer size, ``{"stock": {16: 0.885, ...}, "carry-over": {...}}``.

    Same lengths, pack size, algorithm and over-long policy as ``result``; a curve stops at the
    first buffer that holds every document (larger ones pack the same).
    """
    curves = {}
    for name, carry in (("stock", None), ("carry-over", CarryOver())):
        _, sweep = recommend_buffer_size(
            result.lengths,
            result.pack_size,
            target_fill=2.0,  # unreachable: sweep every candidate
            candidates=candidates,
            algorithm=result.algorithm,
            overlong=result.overlong,
            carry_over=carry,
        )
        curves[name] = sweep
    return curves


def _tokens_label(value: float, _: Any = None) -> str:
    """Axis label: ``_tokens_label(4096) == "4096"``, ``_tokens_label(20000) == "20k"``."""
    if value >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def _length_histogram(ax: Any, result: AnalysisResult) -> None:
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    lengths = np.asarray(result.lengths)
    low, high = max(1, int(lengths.min())), max(2, int(lengths.max()))
    bins = np.logspace(math.log10(low), math.log10(high * 1.01), 40)
    ax.hist(lengths, bins=bins, color=_STOCK)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens_label))
    ax.axvline(result.pack_size, color=_PACK, linestyle="--", linewidth=2)
    over = lengths > result.pack_size
    share = lengths[over].sum() / lengths.sum() if lengths.sum() else 0.0
    ax.text(
        result.pack_size,
        0.97,
        f" pack size {result.pack_size}\n {int(over.sum())} longer ({share:.1%} of tokens)",
        color=_PACK,
        transform=ax.get_xaxis_transform(),
        va="top",
        fontsize=9,
    )
    # the longest document is one count among thousands: point at it
    ax.plot([high], [0], marker="^", markersize=9, color=_PACK, clip_on=False, zorder=5)
    # on a white box: the label often lies over the tallest bars
    ax.annotate(f"longest {_tokens_label(high)}", (high, 0), textcoords="offset points",
                xytext=(0, 10), ha="right", fontsize=8, color=_PACK, zorder=6,
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85})  # fmt: skip
    ax.set_xlabel("document length (tokens, log scale)")
    ax.set_ylabel("documents")
    median = median_length(result.lengths)  # the report's figure: the same function
    ax.set_title(f"(a) {len(lengths):,} documents: median {median}, max {high:,} tokens")


def _fill_against_buffer(ax: Any, result: AnalysisResult) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter

    curves = buffer_fill_curves(result)
    for (name, sweep), color in zip(curves.items(), (_STOCK, _CARRY)):
        ax.plot(list(sweep), [100 * f for f in sweep.values()], "o-", color=color, label=name)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted({b for s in curves.values() for b in s})))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Target and your buffer are legend entries: labels on the plot hid behind the legend or
    # sat on the curves. A target capped at the bound says so (no buffer does better).
    target = result.target_fill
    capped = result.bound_fill < 1 and abs(target - result.bound_fill) < 1e-9
    ax.axhline(100 * target, color="grey", linestyle=":", linewidth=1,
               label=f"target = bound {target:.1%} (no buffer does better)" if capped
               else f"target {target:.0%}")  # fmt: skip
    ax.axvline(result.buffer_size, color="black", linestyle=":", linewidth=1,
               label=f"your buffer {result.buffer_size}")  # fmt: skip
    best = result.recommended_buffer_size
    curve = curves["carry-over" if result.carry_over else "stock"]
    title = f"(b) fill against buffer size, pack {result.pack_size}"
    if best is not None and best in curve:
        y = 100 * curve[best]
        ax.plot([best], [y], marker="*", markersize=16, color=_PACK, zorder=5, linestyle="none",
                label=f"recommended {best} ({y:.1f}%)")  # fmt: skip
    else:
        title += f"\nno candidate buffer reaches {target:.1%}"
    ax.set_xlabel("packing_buffer_size (samples per worker, log scale)")
    ax.set_ylabel("simulated fill (%)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)


def _first_packs(ax: Any, result: AnalysisResult) -> None:
    import matplotlib

    colors = matplotlib.colormaps["tab20"].colors
    palette = colors[::2] + colors[1::2]  # ten strong hues, then their light versions
    packs = result.first_packs
    for row, docs in enumerate(packs):
        start = 0
        for i, n in enumerate(docs):
            ax.barh(row, n, left=start, color=palette[(row * 3 + i) % len(palette)],
                    edgecolor="white", linewidth=0.8)  # fmt: skip
            start += n
        if start < result.pack_size:
            ax.barh(row, result.pack_size - start, left=start, color="#eeeeee",
                    hatch="///", edgecolor="#bbbbbb", linewidth=0)  # fmt: skip
        ax.text(result.pack_size * 1.005, row, f"{start / result.pack_size:.0%}, {len(docs)}",
                va="center", fontsize=7)  # fmt: skip
    ax.set_yticks(range(len(packs)), [str(i + 1) for i in range(len(packs))], fontsize=7)
    ax.set_ylim(len(packs) - 0.5, -0.5)
    ax.set_xlim(0, result.pack_size * 1.08)
    ax.set_xlabel("token position in the pack (grey hatched: padding; right: fill, documents)")
    ax.set_ylabel("pack")
    ax.set_title(
        f"(c) the first {len(packs)} of {result.packs:,} packs: one colour per document, "
        f"fill {result.fill:.2%} overall"
    )


def plot_analysis(result: AnalysisResult, path: Path | str) -> Path:
    """Write the three pictures of the module docstring to one PNG at ``path``; return it.

    Raises:
        TooFewDocuments: fewer than :data:`MIN_PLOT_DOCUMENTS` documents (nothing written).
        ImportError: matplotlib is not installed (the message says ``pip install matplotlib``).
    """
    if len(result.lengths) < MIN_PLOT_DOCUMENTS:
        raise TooFewDocuments(
            f"{len(result.lengths)} documents are too few to plot (it needs at least "
            f"{MIN_PLOT_DOCUMENTS}: a buffer of {BUFFER_CANDIDATES[1]} holds them all, so the "
            "fill curve would be one or two points); the report has every figure"
        )
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install matplotlib") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 10), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1.3))
    _length_histogram(fig.add_subplot(grid[0, 0]), result)
    _fill_against_buffer(fig.add_subplot(grid[0, 1]), result)
    _first_packs(fig.add_subplot(grid[1, :]), result)
    fig.suptitle(
        f"{result.dataset}: pack {result.pack_size}, buffer {result.buffer_size}, "
        f"{result.algorithm}, overlong={result.overlong}, "
        f"carry-over {'on' if result.carry_over else 'off'}"
    )
    path = Path(path)
    try:
        fig.savefig(path, dpi=90)
    finally:
        plt.close(fig)
    return path
