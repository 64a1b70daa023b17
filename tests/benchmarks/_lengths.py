"""Where the benchmarks find the shared manpages lengths (``--lengths PATH`` overrides it).

Looked up in ``shared/data/`` inside the clone, then beside it (``../shared/data/``); when neither
exists the default is the second, and each script says to pass ``--lengths``.
"""

from pathlib import Path

_NAME = "manpages.lengths.txt"
_REPO = Path(__file__).resolve().parents[2]
_CANDIDATES = (_REPO / "shared" / "data" / _NAME, _REPO.parent / "shared" / "data" / _NAME)

DEFAULT_LENGTHS = next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[-1])
