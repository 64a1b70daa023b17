# SPDX-License-Identifier: Apache-2.0
"""Carry-over packing: under-filled packs go back into energon's reading buffer.

Stock energon (7.4) packs every reading buffer on its own: whatever the packer returns is
emitted, so the last packs of every buffer are half empty. :class:`CarryOverPackingDataset` is
energon's ``PackingDataset`` with one step changed: after ``select_samples_to_pack`` has grouped
the buffer, the pure planner :func:`energon_pack.algorithms.plan_carry_over` (the same code as
``energon-pack simulate --carry-over``) decides which groups to emit and which samples to carry.
Carried samples are put back at the front of energon's own savable reading buffer, so energon
refills only the free slots and packs them with the next samples. Worked trace, pack size
10, buffer 4, first-fit-decreasing, ``CarryOver(min_fill=0.9, max_carry_fraction=0.5,
max_age=2)``::

    select 1: buffer [a=6 b=5 c=3 d=2], ages [0 0 0 0]   groups [a c] 9/10, [b d] 7/10
              emit [a c]; carry b, d (ages 1, 1)          reading buffer [b d]
              energon refills the 2 free slots            reading buffer [b d e=4 f=3]
    select 2: buffer [b d e f], ages [1 1 0 0]           groups [b e] 9/10, [f d] 5/10
              emit [b e]; carry f, d (ages 1, 2)          d is emitted at the latest in
                                                          select 3 (its age is max_age)

What makes the carry exact across save/restore: carried samples *are* entries of energon's
``SavableSampleBuffer`` (saved as restore keys, re-read and re-encoded on restore, like any
buffered sample), and their ages are one more savable field, ``_carry_ages`` (the ages of the
first ``len(_carry_ages)`` reading-buffer entries). Pack restore keys stay energon's own, so
``loader.restore_sample`` needs nothing new. When the source is exhausted (``repeat=False``)
nothing is carried: the last buffer is flushed as energon does, so no sample is lost. Carried
samples occupy buffer slots (reading + pending never exceeds ``packing_buffer_size``), so memory
and restore cost stay those of stock energon.

The wrapper reaches into two internals of energon's ``PackingDataset`` (``_fill_reading_buffer``
and ``_reading_buffer``); it refuses to run on energon versions it was not verified against
(:data:`VERIFIED_ENERGON_VERSIONS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from megatron.energon.flavors.base_dataset import SavableDataset
from megatron.energon.task_encoder.base import TaskEncoder, get_failure_tolerance, get_stateless
from megatron.energon.worker import WorkerConfig
from megatron.energon.wrappers.packing_dataset import PackingDataset

from energon_pack.algorithms import CarryOver, CarryOverPlan, plan_carry_over
from energon_pack.encoding import warn_if_buffer_too_small

__all__ = [
    "VERIFIED_ENERGON_VERSIONS",
    "CarryOverPackingDataset",
    "CarryOverPlanner",
    "build_packing_dataset",
    "check_energon_version",
]

#: megatron-energon ``major.minor`` series the wrapper was verified against (state layout,
#: ``PackingDataset`` internals, restore keys).
VERIFIED_ENERGON_VERSIONS: tuple[str, ...] = ("7.4",)


class CarryOverPlanner(Protocol):
    """The planning step, :func:`energon_pack.algorithms.plan_carry_over` by default.

    Gets the buffer's lengths, each sample's age (selections it has already been carried
    through), the pack size, the groups chosen by the packing algorithm (indices), the config
    and ``final`` (end of data: emit everything); returns a :class:`CarryOverPlan`.
    """

    def __call__(
        self,
        lengths: Sequence[int],
        ages: Sequence[int],
        capacity: int,
        groups: list[list[int]],
        config: CarryOver,
        *,
        final: bool = False,
    ) -> CarryOverPlan: ...


def check_energon_version(version: str | None = None) -> str:
    """Return the installed megatron-energon version; raise RuntimeError if it is not verified.

    ``version`` overrides the installed version (for tests).
    """
    if version is None:
        import megatron.energon

        version = str(getattr(megatron.energon, "__version__", "unknown"))
    if not any(version == v or version.startswith(v + ".") for v in VERIFIED_ENERGON_VERSIONS):
        verified = ", ".join(f"{v}.x" for v in VERIFIED_ENERGON_VERSIONS)
        raise RuntimeError(
            f"Carry-over packing relies on megatron-energon internals (PackingDataset's reading "
            f"buffer and state layout) and was verified only with megatron-energon {verified}; "
            f"the installed version is {version!r}. Install a verified version "
            f"(pip install 'megatron-energon>=7.4.1,<7.5') or disable carry-over "
            f"(carry_over=None on the task encoder)."
        )
    return version


class CarryOverPackingDataset(PackingDataset):
    """energon's ``PackingDataset`` whose under-filled groups return to the reading buffer.

    Args (besides ``PackingDataset``'s):
        sample_length: Token length of one encoded sample (what the planner measures fill by).
        pack_size: Pack capacity in tokens.
        carry_over: The policy (fill threshold, carried share, maximum age).
        planner: The planning function; default :func:`energon_pack.algorithms.plan_carry_over`.
    """

    #: Ages of the first ``len(_carry_ages)`` reading-buffer entries (the carried samples).
    _carry_ages: list[int]

    _savable_fields = (*PackingDataset._savable_fields, "_carry_ages")

    def __init__(
        self,
        dataset: SavableDataset[Any],
        buffer_size: int,
        pre_packer: Callable[[list[Any]], list[list[Any]]],
        final_packer: Callable[[list[Any]], Any],
        *,
        sample_length: Callable[[Any], int],
        pack_size: int,
        carry_over: CarryOver,
        planner: CarryOverPlanner | None = None,
        worker_config: WorkerConfig,
        **kwargs: Any,
    ) -> None:
        check_energon_version()
        if pack_size < 1:
            raise ValueError(f"pack_size={pack_size} must be a positive number of tokens.")
        self._select = pre_packer
        self._sample_length = sample_length
        self.pack_size = pack_size
        self.carry_over = carry_over
        self._planner: CarryOverPlanner = planner if planner is not None else plan_carry_over
        self._source_exhausted = False
        self._warned_small_buffer = False
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
        self._carry_ages = []

    def _fill_reading_buffer(self, source_iter: Iterator[Any], log_progress: bool = False) -> bool:
        more = super()._fill_reading_buffer(source_iter, log_progress=log_progress)
        if not more:
            # From here on energon only flushes: the carried samples must be emitted too.
            self._source_exhausted = True
        return more

    def __iter__(self) -> Iterator[Any]:
        self._source_exhausted = False
        yield from super().__iter__()

    def _select_and_plan(self, samples: list[Any]) -> list[list[Any]]:
        """The ``pre_packer`` energon calls: select, plan, put carried samples back."""
        # energon cleared the reading buffer before this call; clear the ages with it first, so
        # that an exception below (energon then skips the buffer) leaves a consistent state.
        carried_ages, self._carry_ages = self._carry_ages, []
        groups = self._select(samples)
        index_of = {id(sample): i for i, sample in enumerate(samples)}
        index_groups = [[index_of.get(id(sample), -1) for sample in group] for group in groups]
        placed = sorted(i for group in index_groups for i in group)
        if placed != list(range(len(samples))):
            raise ValueError(
                f"select_samples_to_pack must return every sample of the buffer exactly once "
                f"(the same objects) under carry-over; it placed {len(placed)} of "
                f"{len(samples)} samples: buffer indices {placed[:16]}... (-1: a new object)."
            )
        lengths = [int(self._sample_length(sample)) for sample in samples]
        final = self._source_exhausted
        if not final and not self._warned_small_buffer:
            self._warned_small_buffer = warn_if_buffer_too_small(
                lengths, self.pack_size, self.buffer_size
            )
        ages = carried_ages + [0] * (len(samples) - len(carried_ages))
        plan = self._planner(
            lengths, ages, self.pack_size, index_groups, self.carry_over, final=final
        )
        carry = [int(i) for i in plan.carry]
        new_ages = [int(age) for age in plan.carry_ages]
        placed = sorted([i for group in plan.emit for i in group] + carry)
        if placed != list(range(len(samples))) or len(new_ages) != len(carry):
            raise RuntimeError(
                f"The carry-over planner {self._planner!r} did not place every sample exactly "
                f"once (emit={plan.emit}, carry={carry}, ages={new_ages}); this is its bug."
            )
        # The carried samples go back to the front of the (empty) reading buffer; energon
        # refills only the remaining slots. At end of data the planner carries nothing.
        self._reading_buffer.extend([samples[i] for i in carry])
        self._carry_ages = new_ages
        return [[samples[i] for i in group] for group in plan.emit]

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["type"] = type(self).__qualname__
        config["pre_packer"] = self._function_config(self._select)
        config["pack_size"] = self.pack_size
        config["carry_over"] = dataclasses.asdict(self.carry_over)
        config["planner"] = self._function_config(self._planner)
        return config

    def __str__(self) -> str:
        return (
            f"CarryOverPackingDataset(buffer_size={self.buffer_size}, pack_size={self.pack_size}, "
            f"carry_over={self.carry_over}, pre_packer={self._select}, "
            f"final_packer={self.final_packer}, dataset={self.dataset})"
        )


def build_packing_dataset(
    task_encoder: TaskEncoder[Any, Any, Any, Any],
    dataset: SavableDataset[Any],
    *,
    packing_buffer_size: int,
    worker_config: WorkerConfig,
    carry_over: CarryOver,
    pack_size: int,
    sample_length: Callable[[Any], int],
    planner: CarryOverPlanner | None = None,
) -> CarryOverPackingDataset:
    """What energon's ``TaskEncoder.build_batch`` does for packing, with carry-over.

    Call it from ``build_batch`` and pass ``packing_buffer_size=None`` to energon's
    ``build_batch`` for the rest (batching, ``encode_batch``).

    Raises:
        ValueError: the task encoder overrides ``postencode_sample`` (energon would apply it a
            second time, to the packs, and 7.4.1 cannot ``restore_sample`` such packs anyway).
    """
    if task_encoder._is_overridden(task_encoder.postencode_sample):
        raise ValueError(
            f"{type(task_encoder).__name__} overrides postencode_sample, which carry-over packing "
            "does not support: do that per-sample work in pack_selected_samples, or set "
            "carry_over=None."
        )
    tolerance = task_encoder.__default_failure_tolerance__
    return CarryOverPackingDataset(
        dataset,
        buffer_size=packing_buffer_size,
        pre_packer=task_encoder.select_samples_to_pack,
        final_packer=task_encoder.pack_selected_samples,
        final_packer_stateless=get_stateless(task_encoder.pack_selected_samples),
        sample_length=sample_length,
        pack_size=pack_size,
        carry_over=carry_over,
        planner=planner,
        worker_config=worker_config,
        pre_packer_failure_tolerance=get_failure_tolerance(
            task_encoder.select_samples_to_pack, tolerance
        ),
        final_packer_failure_tolerance=get_failure_tolerance(
            task_encoder.pack_selected_samples, tolerance
        ),
        sample_encoder_failure_tolerance=0,
    )
