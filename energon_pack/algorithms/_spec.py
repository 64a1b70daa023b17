# SPDX-License-Identifier: Apache-2.0
"""``PackingSpec``: every packing knob, declared and validated once.

The encoders (``PackingConfig`` extends it), :func:`~energon_pack.algorithms.pack_lengths`,
:func:`~energon_pack.algorithms.simulate`, ``analyze_dataset`` and the ``energon-pack`` command
line (its options are generated from these fields) all take one spec, so a knob means the same
thing, with the same default, everywhere::

    >>> spec = PackingSpec(pack_size=16, alignment=4, overlong="split")
    >>> spec.overlong
    <OverlongPolicy.SPLIT: 'split'>
    >>> spec.slots(5), spec.slots(8)   # pack slots a document takes: rounded up to alignment
    (8, 8)
    >>> spec.slot_lengths([5, 8, 1]).tolist()
    [8, 8, 4]

A bad value fails here, naming the value and the fix, before any data is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from energon_pack.algorithms._carry_over import CarryOver
from energon_pack.algorithms._lengths import as_int_lengths, round_up
from energon_pack.algorithms._media import has_media_budgets, media_over_budget
from energon_pack.algorithms._overlong import OverlongPolicy
from energon_pack.algorithms._registry import ALGORITHMS, DEFAULT_ALGORITHM
from energon_pack.algorithms._step_order import check_step_packs

__all__ = ["PackingSpec", "as_spec"]

T_spec = TypeVar("T_spec", bound="PackingSpec")
#: Lists up to this long are validated in Python (faster than NumPy reductions there).
_LIST_FAST_PATH = 64


@dataclass(frozen=True, kw_only=True)
class PackingSpec:
    """How documents are packed (frozen; validated at construction; strings coerced).

    The default over-long policy is ``truncate``, in training and in ``simulate`` / ``analyze``
    alike: a captioning or SFT sample cut in two does not train as the whole would (the second
    piece loses its image or prompt); TRL and LLaMA-Factory truncate by default and no peer
    splits by default (TRL made splitting the default once and reverted it: trl#5075); the
    truncated tokens are counted and logged. ``split`` keeps every token of long pretraining
    text: choose it explicitly.
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
    # Not a field (no annotation): set per spec in __post_init__; this class default keeps a
    # spec unpickled from before it existed on the validating path.
    _plain = False

    def __post_init__(self) -> None:
        size = self.pack_size
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise ValueError(
                f"pack_size={size!r} must be a positive int: the tokens per pack, e.g. 4096."
            )
        object.__setattr__(self, "pack_size", int(size))
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"algorithm={self.algorithm!r} is not registered; choose one of "
                f"{sorted(ALGORITHMS)} (or register yours in energon_pack.algorithms.ALGORITHMS)."
            )
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
        # pack_lengths' short-list path: lengths as given are the slots, in any order, with no
        # budget but the pack's (decided once here; a frozen spec keeps it true).
        plain = self.alignment == 1 and self.step_packs is None and not has_media_budgets(self)
        object.__setattr__(self, "_plain", plain)

    @property
    def has_media_budgets(self) -> bool:
        """True when ``max_media_tokens_per_pack`` or ``max_media_per_pack`` is set."""
        return has_media_budgets(self)

    @property
    def uses_media(self) -> bool:
        """True when packing needs each document's media load (``pack_lengths(media=...)``):
        a media budget is set, or ``step_packs`` (its order levels the vision load)."""
        return self.step_packs is not None or has_media_budgets(self)

    def media_over_budget(self, tokens: int, items: int) -> str | None:
        """Why one document of ``tokens`` media tokens and ``items`` images and videos can
        never be packed, or ``None``; ``max_media_per_pack=2``: ``media_over_budget(300, 3)``
        is ``"3 images and videos > max_media_per_pack=2"``."""
        return media_over_budget(tokens, items, self)

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
        if type(lengths) is list and len(lengths) <= _LIST_FAST_PATH:
            fast = self._list_slot_lengths(lengths)
            if fast is not None:
                return fast
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

    def _list_slot_lengths(self, lengths: list) -> np.ndarray | None:
        """:meth:`slot_lengths` of a short list of valid Python ints without NumPy reductions
        (``select_samples_to_pack`` passes a list per buffer); ``None`` for anything else (the
        array path then validates it and names the problem)."""
        if not lengths or not all(type(x) is int for x in lengths):
            return None
        if min(lengths) <= 0 or self.slots(max(lengths)) > self.pack_size:
            return None
        return self.slots(np.array(lengths, dtype=np.int64))


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
