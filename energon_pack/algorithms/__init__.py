# SPDX-License-Identifier: Apache-2.0
"""Packing algorithms: lengths in, bins of indices out (stdlib + NumPy only, never torch).

``pack_lengths([5, 4, 6, 3, 2], PackingSpec(pack_size=10))`` is ``[[2, 1], [0, 3, 4]]``;
``simulate`` replays energon's packing buffer over a stream of lengths. See
docs/concepts/packing.md and docs/benchmarks/algorithms.md.
"""

from energon_pack.algorithms._balance import CostModel, balance_packs, slowest_rank_loss
from energon_pack.algorithms._carry_over import CarryOverPlan, plan_carry_over
from energon_pack.algorithms._lengths import round_up
from energon_pack.algorithms._media import MediaLoad, enforce_media_budgets
from energon_pack.algorithms._overlong import OverlongPolicy, OverlongSampleError, cut_overlong
from energon_pack.algorithms._pack import MEDIA_COST, pack_lengths
from energon_pack.algorithms._registry import ALGORITHMS, PackingAlgorithm
from energon_pack.algorithms._simulate import SimulationResult, simulate, simulate_packs
from energon_pack.algorithms._spec import CarryOver, PackingSpec, as_spec
from energon_pack.algorithms._step_order import step_order

__all__ = [
    "ALGORITHMS",
    "MEDIA_COST",
    "CarryOver",
    "CarryOverPlan",
    "CostModel",
    "MediaLoad",
    "OverlongPolicy",
    "OverlongSampleError",
    "PackingAlgorithm",
    "PackingSpec",
    "SimulationResult",
    "as_spec",
    "balance_packs",
    "cut_overlong",
    "enforce_media_budgets",
    "pack_lengths",
    "plan_carry_over",
    "round_up",
    "simulate",
    "simulate_packs",
    "slowest_rank_loss",
    "step_order",
]
