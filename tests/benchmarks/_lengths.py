"""Where the benchmarks find the manpages lengths (``--lengths PATH`` overrides it).

The full file (22,135 real lengths) is looked up in ``shared/data/`` inside the clone, then
beside it (``../shared/data/``). On a fresh clone, where neither exists, the default is the
4,000-length sample shipped in ``tests/benchmarks/data/`` (drawn from the full file with a fixed
seed: ``data/make_sample.py``, ``data/README.md``), so every benchmark runs; its figures differ
from the benchmark pages, which name the full file, and the scripts say which file they read.
"""

import sys
from pathlib import Path

_NAME = "manpages.lengths.txt"
_REPO = Path(__file__).resolve().parents[2]
_CANDIDATES = (_REPO / "shared" / "data" / _NAME, _REPO.parent / "shared" / "data" / _NAME)

#: The full lengths where found (else where the benchmarks looked last).
FULL_LENGTHS = next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[-1])
#: The sample shipped with the repository (4,000 lengths of the full file).
SAMPLE_LENGTHS = Path(__file__).resolve().parent / "data" / "manpages-sample.lengths.txt"
#: What a benchmark reads without ``--lengths``: the full file, or the shipped sample.
DEFAULT_LENGTHS = FULL_LENGTHS if FULL_LENGTHS.exists() else SAMPLE_LENGTHS

if DEFAULT_LENGTHS == SAMPLE_LENGTHS and __name__ != "__main__":
    print(
        f"(full manpages lengths not found at {FULL_LENGTHS}: reading the 4,000-length sample "
        f"{SAMPLE_LENGTHS.relative_to(_REPO)}; figures differ from the benchmark pages)",
        file=sys.stderr,
    )
