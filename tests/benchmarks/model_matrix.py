# SPDX-License-Identifier: Apache-2.0
"""Print (or write) the model-family matrix of packing exactness.

Run: ``python tests/benchmarks/model_matrix.py [--write] [NAME ...]`` (NAME: only the families
whose name contains it, and the others of their model classes; with ``--write`` their rows and
their classes' registry entries are replaced, the rest kept). Every family of
``tests/attention/model_families.py`` x every implementation: ``check_model`` with the registry
off, then packed vs alone where it accepts (see that module). Prints each cell with its
differences and the seconds it took; ``--write`` also regenerates
``energon_pack/attention/verified.json`` (the registry of exact cells) and the table in
``docs/howto/kernels.md``, which ``test_model_families.py`` checks against the matrix.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "attention"))

from model_families import (  # noqa: E402
    FAMILIES,
    IMPLEMENTATIONS,
    Cell,
    markdown_table,
    registry,
    run_cell,
)

from energon_pack.attention import _verdicts, _verify  # noqa: E402

REGISTRY = ROOT / "energon_pack" / "attention" / "verified.json"
DOC = ROOT / "docs" / "howto" / "kernels.md"
BEGIN, END = "<!-- matrix:begin -->\n", "<!-- matrix:end -->\n"


def replace_table(text: str, table: str) -> str:
    """``text`` with the part between the matrix markers replaced by ``table``."""
    head, rest = text.split(BEGIN)
    return head + BEGIN + table + END + rest.split(END)[1]


def main() -> None:
    warnings.filterwarnings("ignore")
    _verify._verified = lambda: {}  # noqa: SLF001 - the matrix proves, it does not look up
    cells, counts = {}, {}
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    named = {f.model_class for f in FAMILIES if any(n in f.name for n in names)}
    for family in FAMILIES:
        if names and family.model_class not in named:
            continue
        for impl in IMPLEMENTATIONS:
            start = time.perf_counter()
            try:
                cell = cells[family.name, impl] = run_cell(family, impl)
            except Exception as err:  # noqa: BLE001 - a crash is a cell outcome here
                cell = cells[family.name, impl] = Cell("crashes", repr(err)[:200])
            counts[impl, cell.outcome] = counts.get((impl, cell.outcome), 0) + 1
            took = time.perf_counter() - start
            print(f"{family.name:32s} {impl:18s} {cell.outcome:8s} {took:5.2f}s {cell.detail}")
    for impl in IMPLEMENTATIONS:
        print(impl, {o: n for (i, o), n in sorted(counts.items()) if i == impl})
    if "--write" in sys.argv:
        entries = registry(cells)
        if names:  # the named classes' entries and rows anew, the others as written
            saved = json.loads(REGISTRY.read_text())
            if saved["made_with"] != _verdicts.installed():
                raise SystemExit("verified.json was made on other versions: run all families")
            kept = {c: v for c, v in saved["cells"].items() if c not in named}
            entries = dict(sorted({**kept, **entries}.items()))
        table = {"made_with": _verdicts.installed(), "cells": entries}
        REGISTRY.write_text(json.dumps(table, indent=1) + "\n")
        rows = None if not names else table_rows(DOC.read_text())
        DOC.write_text(replace_table(DOC.read_text(), markdown_table(cells, rows)))


def table_rows(text: str) -> dict[str, str]:
    """The rows of the table in ``text`` by family name."""
    table = text.split(BEGIN)[1].split(END)[0]
    return {line.split(" | ")[0][2:]: line for line in table.splitlines()[2:]}


if __name__ == "__main__":
    main()
