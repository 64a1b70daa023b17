# SPDX-License-Identifier: Apache-2.0
"""Regenerate ``manpages-sample.lengths.txt`` from the full manpages lengths.

    python tests/benchmarks/data/make_sample.py [--full PATH]   # writes the sample beside it

4,000 of the 22,135 lengths of ``shared/data/manpages.lengths.txt`` (real documents: the roff
sources of a Debian machine's man pages, BERT WordPiece tokens), drawn without replacement with
``numpy.random.default_rng(0)`` and kept in the full file's order. Deterministic: the same full
file gives the same sample byte for byte (a test checks this where the full file exists).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "manpages-sample.lengths.txt"
SIZE = 4000
SEED = 0


def sample_of(full: np.ndarray, size: int = SIZE, seed: int = SEED) -> np.ndarray:
    """``size`` of ``full``'s lengths, drawn without replacement, in ``full``'s order."""
    picked = np.random.default_rng(seed).choice(full.size, size=size, replace=False)
    return full[np.sort(picked)]


def sample_text(full_path: Path) -> str:
    """The sample file's text: one length per line."""
    full = np.loadtxt(full_path, dtype=np.int64)
    return "".join(f"{n}\n" for n in sample_of(full).tolist())


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    from _lengths import FULL_LENGTHS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", type=Path, default=FULL_LENGTHS)
    args = parser.parse_args()
    if not args.full.exists():
        print(f"{args.full} not found: pass --full PATH to the 22,135 manpages lengths")
        return 1
    SAMPLE.write_text(sample_text(args.full))
    print(f"wrote {SAMPLE} ({SIZE} lengths of {args.full})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
