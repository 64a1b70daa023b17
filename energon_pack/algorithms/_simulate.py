# SPDX-License-Identifier: Apache-2.0
"""Stream lengths through energon's packing buffer, exactly as ``PackingDataset`` does.

The model of ``megatron.energon.wrappers.packing_dataset.PackingDataset.__iter__``:

1. Fill the reading buffer until ``reading + pending == buffer_size``.
2. When no groups are pending, the whole reading buffer is packed (one ``select`` call); the
   groups are queued and the reading buffer is emptied (with carry-over, the carried samples
   stay in it).
3. One pack per step; the reading buffer refills by the samples that pack consumed.
4. End of data: pending groups are flushed, then the partial reading buffer is packed and
   flushed (with carry-over, that last call emits everything).

Example: 5 samples of length 3, pack size 6, buffer 4: ``select([3, 3, 3, 3])`` gives two packs;
after the first one is emitted the buffer refills with sample 4 (``reading=[4]``, 2 pending),
the second pack leaves the loop wanting more: end of data, ``select([3])``, one last pack.
3 packs, fill 15 / 18 = 83.3%, per-buffer lower bound ``ceil(12/6) + ceil(3/6) = 3``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from energon_pack.algorithms._carry_over import CarryOver, plan_carry_over
from energon_pack.algorithms._options import PackOptions, as_int_lengths, prepare_lengths
from energon_pack.algorithms._overlong import OverlongPolicy, apply_overlong
from energon_pack.algorithms._registry import DEFAULT_ALGORITHM, pack_lengths

__all__ = ["SimulationResult", "simulate"]


@dataclass(frozen=True, kw_only=True)
class SimulationResult:
    """Figures of one simulated pass (``fill`` = real tokens / pack slots)."""

    pack_size: int
    buffer_size: int
    algorithm: str
    overlong: str
    carry_over: bool
    samples_in: int  #: lengths read from the input
    samples_packed: int  #: samples after the over-long policy (split may add, drop removes)
    samples_out: int  #: samples emitted in packs (== samples_packed: nothing is lost)
    dropped_overlong: int
    truncated_overlong: int  #: samples cut to the pack size (overlong="truncate")
    truncated_tokens: int  #: tokens those cuts removed (not in ``tokens``)
    split_overlong: int  #: samples split into pieces (overlong="split")
    packs: int
    tokens: int  #: real tokens in all packs (after truncation/splitting)
    fill: float
    lower_bound_packs: int  #: sum over select calls of ceil(emitted tokens / pack_size)
    lower_bound_fill: float
    global_lower_bound_packs: int  #: ceil(all tokens / pack_size)
    mean_samples_per_pack: float
    select_calls: int
    select_seconds: float
    max_age: int  #: most times one sample was carried
    max_wait_samples: int  #: most samples read between a sample's read and its emission
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def simulate(
    lengths: Sequence[int] | np.ndarray,
    pack_size: int,
    buffer_size: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    overlong: OverlongPolicy | str = OverlongPolicy.SPLIT,
    carry_over: CarryOver | None = None,
    max_samples_per_pack: int | None = None,
    alignment: int = 1,
) -> SimulationResult:
    """Simulate energon's packing buffer over ``lengths`` (see the module docstring)."""
    if buffer_size < 1:
        raise ValueError(f"buffer_size={buffer_size} must be >= 1 (packing_buffer_size).")
    if pack_size < 1:
        raise ValueError(f"pack_size={pack_size} must be a positive number of tokens.")
    PackOptions(max_samples_per_pack=max_samples_per_pack, alignment=alignment)  # validates
    if alignment > pack_size:
        raise ValueError(
            f"alignment={alignment} exceeds pack_size={pack_size}: no sample fits; use an "
            "alignment that divides the pack size."
        )
    raw = as_int_lengths(lengths)
    if raw.size and int(raw.min()) <= 0:
        i = int(np.argmin(raw))
        raise ValueError(f"length #{i} is {int(raw[i])}: lengths must be positive token counts.")
    policy = OverlongPolicy(overlong)
    limit = pack_size - pack_size % alignment  # the longest length that fits once aligned
    lens = apply_overlong(raw, limit, policy)
    over = raw[raw > limit]
    dropped = int(over.size) if policy is OverlongPolicy.DROP else 0
    truncated = int(over.size) if policy is OverlongPolicy.TRUNCATE else 0
    truncated_tokens = int((over - limit).sum()) if truncated else 0
    split = int(over.size) if policy is OverlongPolicy.SPLIT else 0
    packed_lens = prepare_lengths(lens, pack_size, alignment)  # validates, aligns
    lens_list = lens.tolist()
    packed_list = packed_lens.tolist()
    n = len(lens_list)

    reading: list[int] = []
    age: dict[int, int] = {}
    pending: deque[list[int]] = deque()
    pending_samples = 0
    src = 0
    packs = tokens = samples_out = lb_packs = select_calls = 0
    max_age = max_wait = 0
    select_seconds = 0.0
    empty_rounds = 0

    def select(final: bool) -> None:
        nonlocal reading, pending_samples, lb_packs, select_calls, select_seconds, max_age
        buf = reading
        buf_lens = [packed_list[s] for s in buf]
        t0 = time.perf_counter()
        bins = pack_lengths(
            buf_lens, pack_size, algorithm=algorithm, max_samples_per_pack=max_samples_per_pack
        )
        if carry_over is not None:
            ages = [age.get(s, 0) for s in buf]
            plan = plan_carry_over(buf_lens, ages, pack_size, bins, carry_over, final=final)
            emit, carry, carry_ages = plan.emit, plan.carry, plan.carry_ages.tolist()
        else:
            emit, carry, carry_ages = bins, [], []
        select_seconds += time.perf_counter() - t0
        select_calls += 1
        emitted_tokens = 0
        for group in emit:
            ids = [buf[i] for i in group]
            pending.append(ids)
            pending_samples += len(ids)
            emitted_tokens += sum(packed_list[s] for s in ids)
        lb_packs += -(-emitted_tokens // pack_size)
        reading = [buf[i] for i in carry]
        for s, a in zip(reading, carry_ages):
            age[s] = a
            max_age = max(max_age, a)

    def emit_one() -> None:
        nonlocal pending_samples, packs, tokens, samples_out, max_wait
        ids = pending.popleft()
        pending_samples -= len(ids)
        packs += 1
        samples_out += len(ids)
        tokens += sum(lens_list[s] for s in ids)
        max_wait = max(max_wait, src - min(ids))

    while True:
        exhausted = False
        while len(reading) + pending_samples < buffer_size:
            if src >= n:
                exhausted = True
                break
            reading.append(src)
            src += 1
        if exhausted:
            break
        if not pending:
            select(final=False)
            if not pending:
                empty_rounds += 1
                if empty_rounds > 100:
                    raise RuntimeError("selection returned no group 100 times in a row")
                continue
        empty_rounds = 0
        emit_one()
    while pending:
        emit_one()
    if reading:
        select(final=True)
    while pending:
        emit_one()

    total = int(sum(lens_list))
    warnings: list[str] = []
    if n:
        per_pack = pack_size / (sum(packed_list) / n)
        if per_pack > buffer_size:
            warnings.append(
                f"buffer_size={buffer_size} cannot fill a pack: a {pack_size}-token pack needs "
                f"about {per_pack:.0f} samples of mean length {sum(packed_list) / n:.0f}; use "
                f"a buffer of at least {int(np.ceil(per_pack)) * 4} samples."
            )
    slots = packs * pack_size
    return SimulationResult(
        pack_size=pack_size,
        buffer_size=buffer_size,
        algorithm=algorithm,
        overlong=policy.value,
        carry_over=carry_over is not None,
        samples_in=int(raw.size),
        samples_packed=n,
        samples_out=samples_out,
        dropped_overlong=dropped,
        truncated_overlong=truncated,
        truncated_tokens=truncated_tokens,
        split_overlong=split,
        packs=packs,
        tokens=tokens,
        fill=tokens / slots if slots else 0.0,
        lower_bound_packs=lb_packs,
        lower_bound_fill=tokens / (lb_packs * pack_size) if lb_packs else 0.0,
        global_lower_bound_packs=-(-total // pack_size),
        mean_samples_per_pack=samples_out / packs if packs else 0.0,
        select_calls=select_calls,
        select_seconds=select_seconds,
        max_age=max_age,
        max_wait_samples=max_wait,
        warnings=warnings,
    )
