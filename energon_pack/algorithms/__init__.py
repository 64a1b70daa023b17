# SPDX-License-Identifier: Apache-2.0
"""Packing algorithms: lengths in, bins of indices out (stdlib + NumPy only).

    >>> from energon_pack.algorithms import PackingSpec, pack_lengths, lower_bound
    >>> pack_lengths([5, 4, 6, 3, 2], PackingSpec(pack_size=10))
    [[2, 1], [0, 3, 4]]
    >>> lower_bound([5, 4, 6, 3, 2], 10)
    2

This package must never import torch or megatron (a test enforces it), so that the CLI's
``simulate`` and any user tool can use the algorithms without the training stack.
"""

from energon_pack.algorithms._balance import (
    CostModel,
    balance_packs,
    balanced,
    cost_spread,
    slowest_rank_loss,
)
from energon_pack.algorithms._best_fit import best_fit_decreasing
from energon_pack.algorithms._bounds import lower_bound, martello_toth_l2
from energon_pack.algorithms._carry_over import CarryOver, CarryOverPlan, plan_carry_over
from energon_pack.algorithms._first_fit import first_fit, first_fit_decreasing
from energon_pack.algorithms._lengths import round_up
from energon_pack.algorithms._next_fit import next_fit
from energon_pack.algorithms._overlong import (
    OverlongCut,
    OverlongPolicy,
    OverlongSampleError,
    apply_overlong,
    cut_overlong,
)
from energon_pack.algorithms._pack import pack_lengths
from energon_pack.algorithms._registry import ALGORITHMS, DEFAULT_ALGORITHM, PackingAlgorithm
from energon_pack.algorithms._repair import (
    BUFFER_EFFORT,
    BUFFER_LENGTHS,
    DEFAULT_EFFORT,
    SEARCH_EFFORT,
    RepairEffort,
    best_fit_decreasing_repair,
    best_fit_decreasing_search,
    repair_packs,
)
from energon_pack.algorithms._simulate import SimulationResult, simulate
from energon_pack.algorithms._spec import PackingSpec, as_spec
from energon_pack.algorithms._step_order import check_step_packs, step_order
from energon_pack.algorithms._subset_sum import fill_counts, fill_room

__all__ = [
    "ALGORITHMS",
    "BUFFER_EFFORT",
    "BUFFER_LENGTHS",
    "DEFAULT_EFFORT",
    "SEARCH_EFFORT",
    "RepairEffort",
    "best_fit_decreasing_search",
    "repair_packs",
    "check_step_packs",
    "step_order",
    "DEFAULT_ALGORITHM",
    "CarryOver",
    "CostModel",
    "balance_packs",
    "balanced",
    "cost_spread",
    "slowest_rank_loss",
    "CarryOverPlan",
    "OverlongCut",
    "OverlongPolicy",
    "OverlongSampleError",
    "SimulationResult",
    "apply_overlong",
    "as_spec",
    "cut_overlong",
    "fill_counts",
    "fill_room",
    "plan_carry_over",
    "simulate",
    "PackingSpec",
    "PackingAlgorithm",
    "best_fit_decreasing",
    "best_fit_decreasing_repair",
    "first_fit",
    "first_fit_decreasing",
    "lower_bound",
    "martello_toth_l2",
    "next_fit",
    "pack_lengths",
    "round_up",
]
