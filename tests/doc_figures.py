# SPDX-License-Identifier: Apache-2.0
"""Regenerate the deterministic figures of README.md and docs/ and compare them with the text.

Only figures a deterministic command produces (counts, fills, pack numbers, table rows), never
timings: those stay on the benchmark pages with their command and the machine's load.

* ``README.md``: "the family matrix CI runs (N model configurations x ...)": N is the number of
  rows of the matrix in ``docs/howto/kernels.md`` (written by ``model_matrix.py --write``).
* ``docs/howto/buffer-size.md``: the two ``energon-pack analyze`` reports on the demo's dataset
  (2,000 standard-library documents, the demo's BPE tokenizer) and the sweep in its prose.

    python tests/doc_figures.py            # print the regenerated figures, check the pages
    python tests/doc_figures.py --fast     # only what needs no dataset (the README count)

Exit status 1 when a page no longer says what its command prints (each mismatch is listed).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KERNELS = ROOT / "docs" / "howto" / "kernels.md"
BUFFER_SIZE = ROOT / "docs" / "howto" / "buffer-size.md"


def matrix_rows() -> int:
    """Rows (tiny model configurations) of the family matrix in kernels.md."""
    text = KERNELS.read_text(encoding="utf-8")
    table = text.split("<!-- matrix:begin -->")[1].split("<!-- matrix:end -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    return len(rows) - 1  # the header row


def readme_mismatches() -> list[str]:
    n = matrix_rows()
    said = re.findall(r"family matrix CI runs \((\d+) model configurations", README.read_text())
    if said != [str(n)]:
        return [f"README.md: family matrix count {said or 'missing'}, kernels.md has {n} rows"]
    return []


#: Report lines the check leaves out: the paths, and ``buffer costs`` (its times are the
#: machine's encode time; the memory beside them follows from the page's other figures).
_NOT_CHECKED = ("dataset", "plot", "buffer costs")


def buffer_size_reports(out: Path) -> tuple[list[str], list[str], dict[int, float]]:
    """The page's two analyze reports (without the path, plot and buffer-cost lines) and the
    stock sweep, on the demo's dataset built in ``out`` (the demo's corpus step, no training)."""
    from energon_pack.algorithms import CarryOver
    from energon_pack_tools._analysis import analyze_dataset
    from energon_pack_tools._demo import DemoConfig, _build_corpus

    corpus = _build_corpus(DemoConfig(), out, echo=lambda _: None)
    common = {"pack_size": 512, "buffer_size": 16, "overlong": "split"}
    tok = str(corpus.tokenizer_dir)
    plain = analyze_dataset(corpus.dataset, tok, **common)
    carried = analyze_dataset(corpus.dataset, tok, carry_over=CarryOver(), **common)
    keep = _NOT_CHECKED
    lines = [x for x in plain.lines() if not x.startswith(keep)]
    return lines, [x for x in carried.lines() if not x.startswith(keep)], plain.buffer_sweep


def _text_blocks(page: Path) -> list[list[str]]:
    blocks = re.findall(r"```text\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    return [b.splitlines() for b in blocks]


def buffer_size_mismatches(
    plain: list[str], carried: list[str], sweep: dict[int, float]
) -> list[str]:
    """What buffer-size.md says that :func:`buffer_size_reports` no longer prints."""
    blocks = _text_blocks(BUFFER_SIZE)
    problems = []
    first = [x for x in blocks[0] if not x.startswith(_NOT_CHECKED)]
    if first != plain:
        problems.append("buffer-size.md first report:\n  page: " + "\n  page: ".join(first))
        problems.append("  now:  " + "\n  now:  ".join(plain))
    for line in blocks[1]:  # the --carry-over block shows three of the report's lines
        if line not in carried:
            problems.append(f"buffer-size.md --carry-over report: {line!r} not in {carried}")
    figures = " / ".join(f"{100 * sweep[b]:.1f}%" for b in (16, 32, 64, 128, 256))
    prose = re.sub(r"\s+", " ", BUFFER_SIZE.read_text(encoding="utf-8"))
    if f"without carry-over {figures} at" not in prose:
        problems.append(
            f"buffer-size.md sweep: the page does not say 'without carry-over {figures}'"
        )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", action="store_true", help="only the README count")
    args = parser.parse_args()
    print(f"family matrix rows (kernels.md): {matrix_rows()}")
    problems = readme_mismatches()
    if not args.fast:
        with tempfile.TemporaryDirectory() as tmp:
            plain, carried, sweep = buffer_size_reports(Path(tmp))
            print("\n".join(["analyze (buffer-size.md):", *plain, "with --carry-over:", *carried]))
            print("sweep:", {b: f"{100 * f:.1f}%" for b, f in sweep.items()})
            problems += buffer_size_mismatches(plain, carried, sweep)
    for problem in problems:
        print("MISMATCH", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
