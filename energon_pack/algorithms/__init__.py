# SPDX-License-Identifier: Apache-2.0
"""Packing algorithms: lengths in, bins of indices out (stdlib + NumPy only, never torch).

``pack_lengths([5, 4, 6, 3, 2], PackingSpec(pack_size=10))`` is ``[[2, 1], [0, 3, 4]]``;
``simulate`` replays energon's packing buffer over a stream of lengths. See
docs/concepts/packing.md and docs/benchmarks/algorithms.md.
"""

from energon_pack.algorithms._balance import CostModel
from energon_pack.algorithms._carry_over import CarryOverPlan, plan_carry_over
from energon_pack.algorithms._lengths import round_up
from energon_pack.algorithms._media import MediaLoad
from energon_pack.algorithms._overlong import OverlongPolicy, OverlongSampleError, cut_overlong
from energon_pack.algorithms._pack import pack_lengths
from energon_pack.algorithms._registry import ALGORITHMS
from energon_pack.algorithms._simulate import (
    PackingResult,
    SimulationResult,
    simulate,
    simulate_packs,
)
from energon_pack.algorithms._spec import CarryOver, PackingSpec, as_spec

__all__ = [
    "ALGORITHMS",
    "CarryOver",
    "CarryOverPlan",
    "CostModel",
    "MediaLoad",
    "OverlongPolicy",
    "OverlongSampleError",
    "PackingResult",
    "PackingSpec",
    "SimulationResult",
    "as_spec",
    "cut_overlong",
    "pack_lengths",
    "plan_carry_over",
    "round_up",
    "simulate",
    "simulate_packs",
]
