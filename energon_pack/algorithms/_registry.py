# SPDX-License-Identifier: Apache-2.0
"""The registry of packing algorithms, chosen by name (``PackingSpec(algorithm=...)``).

The CLI, the encoders, the tests and the benchmark all iterate :data:`ALGORITHMS`. See
docs/benchmarks/algorithms.md (why these algorithms).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from energon_pack.algorithms._balance import balanced
from energon_pack.algorithms._best_fit import (
    best_fit_decreasing,
    best_fit_decreasing_repair,
    best_fit_decreasing_search,
)
from energon_pack.algorithms._first_fit import first_fit
from energon_pack.algorithms._next_fit import next_fit

__all__ = ["ALGORITHMS", "DEFAULT_ALGORITHM", "REMOVED", "PackingAlgorithm", "check_algorithm"]


class PackingAlgorithm(Protocol):
    """A packing algorithm: partition sample indices into packs of at most ``pack_size``.

    ``lengths`` is a 1-D ``int64`` array of positive lengths, each ``<= pack_size`` (already
    aligned); at most ``max_samples_per_pack`` indices per bin (``None``: no cap). Returns bins
    of indices: every index exactly once, no bin over ``pack_size``, deterministic.
    """

    def __call__(
        self, lengths: np.ndarray, pack_size: int, max_samples_per_pack: int | None = None
    ) -> list[list[int]]: ...


#: name -> algorithm. Iterate this to test or benchmark every algorithm.
ALGORITHMS: dict[str, PackingAlgorithm] = {
    "next_fit": next_fit,
    "first_fit": first_fit,
    "best_fit_decreasing": best_fit_decreasing,
    "best_fit_decreasing_repair": best_fit_decreasing_repair,
    "best_fit_decreasing_search": best_fit_decreasing_search,
    "balanced": balanced,
}

#: The algorithm ``pack_lengths`` uses when none is named.
DEFAULT_ALGORITHM = "best_fit_decreasing_repair"

#: Removed algorithm name -> (its replacement, why).
REMOVED = {
    "first_fit_decreasing": (
        "best_fit_decreasing",
        "it made the same packs as best_fit_decreasing on every benchmark input, more slowly "
        "(docs/benchmarks/algorithms.md)",
    ),
}


def check_algorithm(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is registered, naming the replacement of a removed
    one."""
    if name in ALGORITHMS:
        return
    if name in REMOVED:
        new, why = REMOVED[name]
        raise ValueError(f"algorithm={name!r} was removed: {why}; use algorithm={new!r}.")
    raise ValueError(
        f"algorithm={name!r} is not registered; choose one of {sorted(ALGORITHMS)} "
        "(or register yours in energon_pack.algorithms.ALGORITHMS)."
    )
