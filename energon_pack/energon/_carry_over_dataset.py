# SPDX-License-Identifier: Apache-2.0
"""Carry-over packing: energon's ``PackingDataset`` whose under-filled packs go back to the buffer.

Each ``select_samples_to_pack`` call packs the carried samples with the buffer's new ones, and
:func:`energon_pack.algorithms.plan_carry_over` (the planner ``simulate --carry-over`` runs)
decides what to emit and what to carry again. The carried samples and their ages are savable
fields, so the carry survives save/restore; pack restore keys stay energon's. The worked trace
is in docs/concepts/packing.md; energon internals used: ``_fill_reading_buffer`` and
``_reading_buffer`` (hence :func:`~energon_pack.energon.check_energon_version`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from megatron.energon.flavors.base_dataset import SavableDataset
from megatron.energon.task_encoder.base import TaskEncoder
from megatron.energon.worker import WorkerConfig
from megatron.energon.wrappers.buffer import SavableSampleBuffer
from megatron.energon.wrappers.packing_dataset import PackingDataset

from energon_pack.algorithms import MediaLoad, PackingSpec, plan_carry_over
from energon_pack.encoding import warn_if_buffer_too_small
from energon_pack.energon._postencode_dataset import (
    PostencodePackingDataset,
    packing_arguments,
)
from energon_pack.energon._version import check_energon_version

__all__ = ["CarryOverPackingDataset", "build_carry_over_dataset"]


class CarryOverPackingDataset(PostencodePackingDataset):
    """energon's ``PackingDataset`` whose under-filled groups return to the reading buffer.

    With a ``sample_encoder`` (light media buffers: the encoder's ``_postencode``) energon runs it on
    the members of emitted packs only; carried samples stay as selected (planned, no pixels) in
    ``_carry_buffer`` and in the saved state, and ``restore_sample`` is
    :class:`PostencodePackingDataset`'s.

    Args (besides ``PackingDataset``'s):
        sample_length: Token length of one encoded sample (what the planner measures fill by).
        spec: The packing spec: its ``pack_size``, its ``carry_over`` policy (required) and, when
            set, its other limits (``max_samples_per_pack``, media budgets, measured by each
            sample's ``media_load``), which the planner keeps.
    """

    #: The carried samples (outside energon's reading buffer and its sample count).
    _carry_buffer: SavableSampleBuffer
    #: Times each ``_carry_buffer`` entry has been carried.
    _carry_ages: list[int]

    #: The source reached its end in this epoch (the carried samples joined the last buffer).
    _source_exhausted: bool

    _savable_fields = (
        *PackingDataset._savable_fields,
        "_carry_buffer",
        "_carry_ages",
        "_source_exhausted",
    )

    def __init__(
        self,
        dataset: SavableDataset[Any],
        buffer_size: int,
        pre_packer: Callable[[list[Any]], list[list[Any]]],
        final_packer: Callable[[list[Any]], Any],
        *,
        sample_length: Callable[[Any], int],
        spec: PackingSpec,
        worker_config: WorkerConfig,
        **kwargs: Any,
    ) -> None:
        check_energon_version()
        if spec.carry_over is None:
            raise ValueError("CarryOverPackingDataset needs spec.carry_over (a CarryOver policy).")
        carry_over = spec.carry_over
        self._select = pre_packer
        self._sample_length = sample_length
        self.pack_size = spec.pack_size
        self.carry_over = carry_over
        limited = spec.has_media_budgets or spec.max_samples_per_pack
        #: The spec the planner keeps (None: tokens only, the planner gets no spec).
        self._spec = spec if limited else None
        self._warned_small_buffer = False
        tolerance = kwargs.get("pre_packer_failure_tolerance", 100)
        if 0 < tolerance <= carry_over.max_age:
            raise ValueError(
                f"carry_over.max_age={carry_over.max_age} must be below the select failure "
                f"tolerance {tolerance}: a buffer may emit no pack max_age times in a row and "
                "energon gives up after that many empty selections. Lower max_age or raise "
                "the tolerance."
            )
        super().__init__(
            dataset,
            buffer_size,
            pre_packer=self._select_and_plan,
            final_packer=final_packer,
            worker_config=worker_config,
            **kwargs,
        )

    def reset_state_own(self) -> None:
        super().reset_state_own()
        self._carry_buffer = SavableSampleBuffer(self.dataset, worker_config=self.worker_config)
        self._carry_ages = []
        self._source_exhausted = False
        self._restored = False

    def restore_state(self, state: Any) -> None:
        super().restore_state(state)
        self._restored = True

    def _fill_reading_buffer(self, source_iter: Iterator[Any], log_progress: bool = False) -> bool:
        if self._source_exhausted:
            # Restored after the end of the data: only the flush is left (the reading buffer
            # may hold more than buffer_size samples then, which energon's loop cannot read on).
            return False
        more = super()._fill_reading_buffer(source_iter, log_progress=log_progress)
        if not more:
            # From here on energon only flushes (the reading buffer, if not empty): the carried
            # samples join it, in front as in every select, and the last select emits all.
            self._source_exhausted = True
            carried, carried_keys = self._carry_buffer.flush()
            self._carry_ages = []
            read, read_keys = self._reading_buffer.flush()
            self._reading_buffer.extend(carried, carried_keys)
            self._reading_buffer.extend(read, read_keys)
        return more

    def __iter__(self) -> Iterator[Any]:
        if not self._restored:  # a new epoch (restored: the saved one goes on)
            self._source_exhausted = False
        self._restored = False
        self._carry_buffer.worker_start()
        yield from super().__iter__()

    def _select_and_plan(self, samples: list[Any]) -> list[list[Any]]:
        """The ``pre_packer`` energon calls: select over carried + new, plan, keep the carry."""
        # Take the carried samples out first, so that an exception below (energon then skips
        # the buffer) leaves a consistent state.
        carried, _ = self._carry_buffer.flush()
        carried_ages, self._carry_ages = self._carry_ages, []
        final = self._source_exhausted
        pool = carried + samples
        lengths = [int(self._sample_length(sample)) for sample in pool]
        if not final and not self._warned_small_buffer:
            self._warned_small_buffer = warn_if_buffer_too_small(
                lengths[len(carried) :],  # the buffer's new samples
                self.pack_size,
                self.buffer_size,
                carry_over=self.carry_over,
            )
        index_groups = self._index_groups(pool, self._select(pool))
        ages = carried_ages + [0] * len(samples)
        limits: dict[str, Any] = {}
        if self._spec is not None:
            media = MediaLoad.of(s.media_load for s in pool) if self._spec.uses_media else None
            limits = {"spec": self._spec, "media": media}
        plan = plan_carry_over(
            lengths, ages, self.pack_size, index_groups, self.carry_over, final=final, **limits
        )
        carry = [int(i) for i in plan.carry]
        new_ages = [int(age) for age in plan.carry_ages]
        placed = sorted([i for group in plan.emit for i in group] + carry)
        if placed != list(range(len(pool))) or len(new_ages) != len(carry):
            raise RuntimeError(
                f"The carry-over planner did not place every sample exactly "
                f"once (emit={plan.emit}, carry={carry}, ages={new_ages}); this is its bug."
            )
        self._carry_buffer.extend([pool[i] for i in carry])
        self._carry_ages = new_ages
        return [[pool[i] for i in group] for group in plan.emit]

    @staticmethod
    def _index_groups(pool: list[Any], groups: list[list[Any]]) -> list[list[int]]:
        """``groups`` of samples as pool indices; every sample of the pool exactly once."""
        index_of = {id(sample): i for i, sample in enumerate(pool)}
        index_groups = [[index_of.get(id(sample), -1) for sample in group] for group in groups]
        placed = sorted(i for group in index_groups for i in group)
        if placed != list(range(len(pool))):
            raise ValueError(
                f"select_samples_to_pack must return every sample of the buffer exactly once "
                f"(the same objects) under carry-over; it placed {len(placed)} of "
                f"{len(pool)} samples: buffer indices {placed[:16]}... (-1: a new object)."
            )
        return index_groups

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["type"] = type(self).__qualname__
        config["pre_packer"] = self._function_config(self._select)
        config["pack_size"] = self.pack_size
        config["carry_over"] = dataclasses.asdict(self.carry_over)
        config["planner"] = self._function_config(plan_carry_over)
        return config

    def __str__(self) -> str:
        return (
            f"CarryOverPackingDataset(buffer_size={self.buffer_size}, pack_size={self.pack_size}, "
            f"carry_over={self.carry_over}, pre_packer={self._select}, "
            f"final_packer={self.final_packer}, dataset={self.dataset})"
        )


def build_carry_over_dataset(
    task_encoder: TaskEncoder[Any, Any, Any, Any],
    dataset: SavableDataset[Any],
    *,
    packing_buffer_size: int,
    worker_config: WorkerConfig,
    spec: PackingSpec,
    sample_length: Callable[[Any], int],
    sample_encoder: Callable[[Any], Any] | None = None,
    pre_packer: Callable[[list[Any]], list[list[Any]]] | None = None,
) -> CarryOverPackingDataset:
    """What energon's ``TaskEncoder.build_batch`` does for packing, with carry-over.

    Call it from ``build_batch`` and pass ``packing_buffer_size=None`` to energon's
    ``build_batch`` for the rest (batching, ``encode_batch``). ``sample_encoder`` (a stateless
    method of ``task_encoder``, e.g. ``_postencode`` for light media buffers) runs on
    each member of an emitted pack, never on a carried sample. ``pre_packer`` stands in for
    ``task_encoder.select_samples_to_pack`` (a packing group's checked selection).

    Raises:
        ValueError: the task encoder overrides ``postencode_sample`` (energon would apply it a
            second time, to the packs, and cannot ``restore_sample`` such packs anyway).
    """
    if task_encoder._is_overridden(task_encoder.postencode_sample):
        raise ValueError(
            f"{type(task_encoder).__name__} overrides postencode_sample, which carry-over packing "
            "does not support: do that per-sample work in pack_selected_samples, or set "
            "carry_over=None."
        )
    return CarryOverPackingDataset(
        dataset,
        buffer_size=packing_buffer_size,
        sample_length=sample_length,
        spec=spec,
        worker_config=worker_config,
        **packing_arguments(task_encoder, sample_encoder=sample_encoder, pre_packer=pre_packer),
    )
