# SPDX-License-Identifier: Apache-2.0
"""``analyze --plot``: the fill-against-buffer curves are the simulator's figures, the first
packs are the loader's, and one PNG holds the three pictures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from energon_pack_tools import analyze_dataset, make_text_dataset, plot_analysis, synthetic_texts
from energon_pack_tools._plots import MIN_PLOT_DOCUMENTS, TooFewDocuments, buffer_fill_curves


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> object:
    texts = synthetic_texts(120, seed=5, min_words=1, max_words=40)
    data = make_text_dataset(tmp_path_factory.mktemp("plots") / "data", texts)
    return analyze_dataset(data, str(tokenizer_dir), pack_size=32, buffer_size=4)


def test_first_packs_are_the_loaders_packs(result) -> None:
    assert 0 < len(result.first_packs) <= 24
    # each row's documents sum to that pack's real tokens
    sums = [sum(docs) / result.pack_size for docs in result.first_packs]
    assert sums == pytest.approx(result.pack_fills[: len(sums)])
    assert all(0 < n <= result.pack_size for docs in result.first_packs for n in docs)


def test_buffer_fill_curves_hand_worked(result) -> None:
    # [300, 300, 200, 200] at 512: buffer 1 puts each alone (4 packs, 1000 / 2048); buffer 4
    # pairs 300 + 200 twice (2 packs, 1000 / 1024). The stock curve stops at buffer 4, which
    # holds every length.
    worked = dataclasses.replace(
        result, lengths=[300, 300, 200, 200], pack_size=512, overlong="split"
    )
    curves = buffer_fill_curves(worked, candidates=(1, 4, 8))
    assert curves["stock"] == {1: 1000 / 2048, 4: 1000 / 1024}
    assert list(curves["carry-over"]) == [1, 4]
    assert curves["carry-over"][4] == 1000 / 1024


def test_plot_writes_one_png_with_three_pictures(result, tmp_path: Path) -> None:
    import matplotlib.image

    png = plot_analysis(result, tmp_path / "analysis.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = matplotlib.image.imread(png).shape[:2]
    assert (width, height) == (13 * 90, 10 * 90)  # figsize (13, 10) at dpi 90


def _fill_panel(result: object) -> tuple[list[str], str]:
    """The legend labels and title of panel (b) drawn for ``result``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from energon_pack_tools._plots import _fill_against_buffer

    fig, ax = plt.subplots()
    try:
        _fill_against_buffer(ax, result)
        return ax.get_legend_handles_labels()[1], ax.get_title()
    finally:
        plt.close(fig)


def test_fill_panel_names_target_buffer_and_recommendation_in_its_legend(result) -> None:
    """Nothing drawn as loose text the legend or the curves could hide; a target capped at the
    bound, and a target no candidate reaches, are said on the plot."""
    # [16, 16, 16] at 32: 2 packs at best, bound 48 / 64 = 75%; buffer 16 reaches it.
    capped = dataclasses.replace(
        result, lengths=[16, 16, 16], pack_size=32, buffer_size=16, carry_over=None,
        bound_fill=0.75, target_fill=0.75, recommended_buffer_size=16,
    )  # fmt: skip
    labels, title = _fill_panel(capped)
    assert labels == [
        "stock", "carry-over", "target = bound 75.0% (no buffer does better)",
        "your buffer 16", "recommended 16 (75.0%)",
    ]  # fmt: skip
    # [20, 20, 20] at 32: no two share a pack, 62.5% < the bound 93.75%: no recommendation.
    unreachable = dataclasses.replace(
        capped, lengths=[20, 20, 20], bound_fill=0.9375, target_fill=0.9375,
        recommended_buffer_size=None,
    )  # fmt: skip
    labels, title = _fill_panel(unreachable)
    assert "your buffer 16" in labels and not any(x.startswith("recommended") for x in labels)
    assert title.endswith("\nno candidate buffer reaches 93.8%")
    labels, _ = _fill_panel(dataclasses.replace(capped, bound_fill=1.0, target_fill=0.99))
    assert "target 99%" in labels


def test_the_report_and_the_plot_print_the_same_median(result) -> None:
    # An even count whose two middle lengths differ: the report used the upper one (279 on
    # the dataset) and the plot the truncated mean (267).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from energon_pack_tools._plots import _length_histogram

    worked = dataclasses.replace(result, lengths=[5, 255, 279, 300, 8, 3])
    line = next(x for x in worked.lines() if x.startswith("lengths"))
    fig, ax = plt.subplots()
    try:
        _length_histogram(ax, worked)
        title = ax.get_title()
    finally:
        plt.close(fig)
    assert "median 131.5," in line  # [3, 5, 8, 255, 279, 300]: (8 + 255) / 2
    assert "median 131.5," in title


def test_too_few_documents_are_not_plotted(result, tmp_path: Path) -> None:
    # 31 documents: buffers 16 and 32 (holding all) would be the whole curve; 32 are drawn.
    assert MIN_PLOT_DOCUMENTS == 32
    few = dataclasses.replace(result, lengths=result.lengths[:31])
    with pytest.raises(TooFewDocuments, match="31 documents are too few to plot"):
        plot_analysis(few, tmp_path / "few.png")
    assert not (tmp_path / "few.png").exists()
    enough = dataclasses.replace(result, lengths=result.lengths[:32])
    assert plot_analysis(enough, tmp_path / "enough.png").read_bytes()[:4] == b"\x89PNG"
