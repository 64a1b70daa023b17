# SPDX-License-Identifier: Apache-2.0
"""The deterministic figures of README.md and docs/ are what their commands print today
(``tests/doc_figures.py`` regenerates them; timings are not checked, they stay on the benchmark
pages with their command and machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_figures  # noqa: E402


def test_readme_counts_the_rows_of_the_family_matrix() -> None:
    assert doc_figures.matrix_rows() > 40  # the table was found and read
    assert doc_figures.readme_mismatches() == []


def test_a_changed_matrix_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = doc_figures.KERNELS.read_text()
    row = next(x for x in text.splitlines() if x.startswith("| llama |"))
    grown = text.replace(row, f"{row}\n{row.replace('llama', 'llama again')}")
    (tmp_path / "kernels.md").write_text(grown)
    monkeypatch.setattr(doc_figures, "KERNELS", tmp_path / "kernels.md")
    (problem,) = doc_figures.readme_mismatches()
    assert f"kernels.md has {doc_figures.matrix_rows()} rows" in problem


@pytest.mark.slow  # the demo's corpus (2,000 documents, a BPE tokenizer) and two analyze runs
def test_buffer_size_page_reports_are_what_analyze_prints(tmp_path: Path) -> None:
    plain, carried, sweep = doc_figures.buffer_size_reports(tmp_path)
    assert any(x.startswith("fill") for x in plain) and sweep  # something was regenerated
    assert doc_figures.buffer_size_mismatches(plain, carried, sweep) == []
    changed = [x.replace("715", "716") for x in plain]
    assert doc_figures.buffer_size_mismatches(changed, carried, sweep) != []
