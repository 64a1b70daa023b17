# SPDX-License-Identifier: Apache-2.0
"""``PackingSpec``: every packing knob, declared and validated once, and the carry-over policy.

The encoders, :func:`~energon_pack.algorithms.pack_lengths`, ``simulate``, ``analyze`` and the
command line all take one spec, so a knob means the same thing, with the same default,
everywhere; a bad value fails here, naming the value and the fix. See docs/concepts/packing.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from energon_pack.algorithms._lengths import as_int_lengths, round_up
from energon_pack.algorithms._overlong import OverlongPolicy
from energon_pack.algorithms._registry import DEFAULT_ALGORITHM, check_algorithm
from energon_pack.algorithms._step_order import check_step_packs

__all__ = ["MAX_AGE_LIMIT", "CarryOver", "PackingSpec", "as_spec"]

T_spec = TypeVar("T_spec", bound="PackingSpec")
#: Largest ``max_age``: energon's ``PackingDataset`` raises after 100 selections in a row that
#: return no group, and carry-over may return none up to ``max_age`` times in a row.
MAX_AGE_LIMIT = 99


@dataclass(frozen=True, kw_only=True)
class CarryOver:
    """Carry-over policy (``PackingSpec(carry_over=CarryOver())``; ``None`` there: off).

    The defaults suit every corpus measured (docs/benchmarks/peers.md). A partial pack may wait
    up to ``max_age`` buffers, so with a buffer holding less than ``1 / max_age`` of a pack
    raise the buffer or ``max_age`` (``energon-pack analyze`` says which).
    """

    #: Groups filled below this fraction of the pack size may be carried.
    min_fill: float = 0.998
    #: Carried samples total at most this many packs' worth of tokens (the token budget).
    max_carry_packs: float = 8.0
    #: A sample carried this many times is emitted whatever its group's fill (0: never carry);
    #: it is selected at most max_age + 1 times, so it waits at most max_age + 1 buffers.
    max_age: int = 64

    def __post_init__(self) -> None:
        if not 0.0 < self.min_fill <= 1.0:
            raise ValueError(f"min_fill={self.min_fill} must be in (0, 1], e.g. 0.99.")
        if not self.max_carry_packs >= 0.0:
            raise ValueError(
                f"max_carry_packs={self.max_carry_packs} must be >= 0: the carried tokens in "
                "packs' worth, e.g. 4 (0 disables carrying)."
            )
        if not 0 <= self.max_age <= MAX_AGE_LIMIT:
            raise ValueError(
                f"max_age={self.max_age} must be in [0, {MAX_AGE_LIMIT}] (0 disables carrying): "
                "a buffer may emit nothing up to max_age times in a row, and energon gives up "
                f"after {MAX_AGE_LIMIT + 1} empty selections."
            )

    def budget_tokens(self, pack_size: int) -> int:
        """The token budget for carried samples: ``max_carry_packs=2`` -> 8192 at pack 4096."""
        return int(self.max_carry_packs * pack_size)


@dataclass(frozen=True, kw_only=True)
class PackingSpec:
    """How documents are packed (frozen; validated at construction; strings coerced).

    The default over-long policy is ``truncate`` (as TRL and LLaMA-Factory; the truncated
    tokens are counted): a sample cut in two loses its image or prompt in the second piece.
    ``split`` keeps every token of long pretraining text: choose it explicitly.
    """

    #: Tokens per pack; every document is at most this long after the over-long policy.
    pack_size: int
    #: Packing algorithm, a key of energon_pack.algorithms.ALGORITHMS.
    algorithm: str = DEFAULT_ALGORITHM
    #: At most this many documents in one pack (unset: no cap; TransformerEngine's THD
    #: attention bounds the segments per sequence).
    max_samples_per_pack: int | None = None
    #: Round each document up to a multiple of this in the pack (2 * context-parallel size for
    #: context parallelism); must divide pack_size.
    alignment: int = 1
    #: What to do with a document longer than the pack: truncate, split, drop or error.
    overlong: OverlongPolicy = OverlongPolicy.TRUNCATE
    #: Carry under-filled packs over (outside energon's buffer, within a token budget and a
    #: maximum age) to be packed again with the next samples (a CarryOver policy; unset:
    #: stock energon packing, each buffer on its own).
    carry_over: CarryOver | None = None
    #: Packs one data-parallel rank trains on per optimizer step (micro-batch size x gradient
    #: accumulation steps): each buffer's packs are ordered so that any step_packs in a row cost
    #: about the same (same packs, same fill). Unset: the algorithm's order.
    step_packs: int | None = None
    #: At most this many media placeholder tokens (images + videos) in one pack: the vision
    #: tower's memory (unset: no budget). A document over it alone is dropped and counted.
    max_media_tokens_per_pack: int | None = None
    #: At most this many images plus videos in one pack (unset: no budget).
    max_media_per_pack: int | None = None

    def __post_init__(self) -> None:
        size = self.pack_size
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise ValueError(
                f"pack_size={size!r} must be a positive int: the tokens per pack, e.g. 4096."
            )
        object.__setattr__(self, "pack_size", int(size))
        check_algorithm(self.algorithm)
        for name in ("max_samples_per_pack", "max_media_tokens_per_pack", "max_media_per_pack"):
            cap = getattr(self, name)
            if cap is not None and (
                not isinstance(cap, (int, np.integer)) or isinstance(cap, bool) or cap < 1
            ):
                raise ValueError(f"{name}={cap!r} must be an int >= 1 (or None for no cap).")
            if cap is not None:
                object.__setattr__(self, name, int(cap))
        self._check_alignment()
        try:
            object.__setattr__(self, "overlong", OverlongPolicy(self.overlong))
        except ValueError:
            raise ValueError(
                f"overlong={self.overlong!r}; choose one of {[p.value for p in OverlongPolicy]}."
            ) from None
        if self.carry_over is not None and not isinstance(self.carry_over, CarryOver):
            raise ValueError(
                f"carry_over={self.carry_over!r} must be a CarryOver policy or None, e.g. "
                "carry_over=CarryOver() (defaults) or CarryOver(max_age=4)."
            )
        if self.step_packs is not None:
            check_step_packs(self.step_packs)

    @property
    def has_media_budgets(self) -> bool:
        """True when ``max_media_tokens_per_pack`` or ``max_media_per_pack`` is set."""
        return self.max_media_tokens_per_pack is not None or self.max_media_per_pack is not None

    @property
    def uses_media(self) -> bool:
        """True when packing needs each document's media load (``pack_lengths(media=...)``):
        a media budget is set, or ``step_packs`` (its order levels the vision load)."""
        return self.step_packs is not None or self.has_media_budgets

    def media_over_budget(self, tokens: int, items: int) -> str | None:
        """Why one document of ``tokens`` media tokens and ``items`` images and videos can
        never be packed, or ``None``; ``max_media_per_pack=2``: ``media_over_budget(300, 3)``
        is ``"3 images and videos > max_media_per_pack=2"``."""
        tok_cap, item_cap = self.max_media_tokens_per_pack, self.max_media_per_pack
        if tok_cap is not None and tokens > tok_cap:
            return f"{tokens} media tokens > max_media_tokens_per_pack={tok_cap}"
        if item_cap is not None and items > item_cap:
            return f"{items} images and videos > max_media_per_pack={item_cap}"
        return None

    def _check_alignment(self) -> None:
        a = self.alignment
        if not isinstance(a, (int, np.integer)) or a < 1 or self.pack_size % a:
            raise ValueError(
                f"alignment={a!r} must be an int >= 1 and divide pack_size={self.pack_size} "
                "(1 for none, 2 * context_parallel_size for context parallelism)."
            )

    def slots(self, length: Any) -> Any:
        """Pack slots of a document of ``length`` tokens (an int or an int array): the length
        rounded up to ``alignment``. ``alignment=4``: ``slots(5) == 8``."""
        return round_up(length, self.alignment)

    def slot_lengths(self, lengths: Sequence[int] | np.ndarray) -> np.ndarray:
        """``lengths`` validated and as packed (``int64``, rounded up to ``alignment``).

        Raises ``ValueError`` naming the offending value and what to do: a length ``<= 0``, or
        one above ``pack_size`` once aligned (over-long samples are the encoder's business:
        truncate, split or drop them there; the algorithms never cut a sample).
        """
        if type(lengths) is list and set(map(type, lengths)) == {int}:
            if min(lengths) > 0 and self.slots(max(lengths)) <= self.pack_size:
                return self.slots(np.array(lengths, dtype=np.int64))  # valid: no NumPy checks
        arr = as_int_lengths(lengths)
        if arr.size == 0:
            return arr
        if int(arr.min()) <= 0:
            i = int(np.argmin(arr))
            raise ValueError(
                f"lengths[{i}]={int(arr[i])} is not positive: every sample needs at least one "
                "token; drop empty samples before packing."
            )
        arr = self.slots(arr)
        if int(arr.max()) > self.pack_size:
            i = int(np.argmax(arr))
            aligned = f" (rounded up to alignment={self.alignment})" if self.alignment > 1 else ""
            raise ValueError(
                f"lengths[{i}]={int(arr[i])}{aligned} exceeds pack_size={self.pack_size}: "
                "truncate, split or drop over-long samples before packing (the overlong "
                "policy), or raise the pack size."
            )
        return arr


def as_spec(spec: T_spec | int | None = None, /, **fields: Any) -> PackingSpec:
    """The spec an entry point works with: ``spec`` with ``fields`` replaced, or, for an int
    (the pack size) or ``None``, a new :class:`PackingSpec` from ``fields``.

    ``as_spec(4096, overlong="split") == PackingSpec(pack_size=4096, overlong="split")``.
    """
    if isinstance(spec, PackingSpec):
        return dataclasses.replace(spec, **fields) if fields else spec
    if spec is not None:
        fields["pack_size"] = spec
    return PackingSpec(**fields)
