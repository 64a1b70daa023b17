# SPDX-License-Identifier: Apache-2.0
"""Packing algorithms: lengths in, bins of indices out (stdlib + NumPy only).

    >>> from energon_pack.algorithms import PackingSpec, pack_lengths, lower_bound
    >>> pack_lengths([5, 4, 6, 3, 2], PackingSpec(pack_size=10))
    [[2, 1], [0, 3, 4]]
    >>> lower_bound([5, 4, 6, 3, 2], 10)
    2

``__all__`` is the public surface; tuning internals (repair effort tables, the subset-sum engine,
the Martello-Toth bound) stay in their private modules.

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
from energon_pack.algorithms._bounds import lower_bound
from energon_pack.algorithms._carry_over import CarryOver, CarryOverPlan, plan_carry_over
from energon_pack.algorithms._first_fit import first_fit, first_fit_decreasing
from energon_pack.algorithms._lengths import round_up
from energon_pack.algorithms._media import MediaLoad, check_media_fits, enforce_media_budgets
from energon_pack.algorithms._next_fit import next_fit
from energon_pack.algorithms._overlong import (
    OverlongPolicy,
    OverlongSampleError,
    apply_overlong,
    cut_overlong,
)
from energon_pack.algorithms._pack import MEDIA_COST, pack_lengths
from energon_pack.algorithms._registry import ALGORITHMS, DEFAULT_ALGORITHM, PackingAlgorithm
from energon_pack.algorithms._repair import (
    best_fit_decreasing_repair,
    best_fit_decreasing_search,
)
from energon_pack.algorithms._simulate import SimulationResult, simulate, simulate_packs
from energon_pack.algorithms._spec import PackingSpec, as_spec
from energon_pack.algorithms._step_order import step_order

__all__ = [
    "ALGORITHMS",
    "best_fit_decreasing_search",
    "step_order",
    "DEFAULT_ALGORITHM",
    "CarryOver",
    "CostModel",
    "MEDIA_COST",
    "MediaLoad",
    "check_media_fits",
    "enforce_media_budgets",
    "balance_packs",
    "balanced",
    "cost_spread",
    "slowest_rank_loss",
    "CarryOverPlan",
    "OverlongPolicy",
    "OverlongSampleError",
    "SimulationResult",
    "apply_overlong",
    "as_spec",
    "cut_overlong",
    "plan_carry_over",
    "simulate",
    "simulate_packs",
    "PackingSpec",
    "PackingAlgorithm",
    "best_fit_decreasing",
    "best_fit_decreasing_repair",
    "first_fit",
    "first_fit_decreasing",
    "lower_bound",
    "next_fit",
    "pack_lengths",
    "round_up",
]
