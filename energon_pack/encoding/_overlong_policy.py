""":func:`apply_overlong_policy`: one encoded document -> the documents that go into the buffer.

The cuts are :func:`energon_pack.algorithms.cut_overlong`'s (the function ``simulate`` applies to
plain lengths), given the document's media spans (never cut) and loss mask (no piece without a
target); the document slices itself, so every document type goes through this one function,
which only counts (``truncated``, ``split``, ``dropped_overlong``, ``split_pieces_dropped``).
Under ``overlong="error"`` the :class:`~energon_pack.algorithms.OverlongSampleError` stops the
loader (:class:`~energon_pack.energon.FatalOverlongSampleError`). Policies with a worked
example: docs/concepts/packing.md.
"""

from __future__ import annotations

import torch

from energon_pack.algorithms import OverlongPolicy, cut_overlong
from energon_pack.encoding._stats import PackingStats
from energon_pack.samples import EncodedSample

__all__ = ["apply_overlong_policy"]


def apply_overlong_policy(
    doc: EncodedSample,
    pack_size: int,
    policy: OverlongPolicy | str,
    stats: PackingStats,
    *,
    no_cut: torch.Tensor | None = None,
) -> list[EncodedSample]:
    """The documents that ``doc`` becomes under ``policy`` (``[doc]`` when it fits); ``no_cut``:
    the spans no cut may fall inside, each covering whole media spans (``None``: the media
    spans, ``doc.media_spans()``)."""
    policy = OverlongPolicy(policy)
    n = doc.tokens.shape[0]
    key = doc.__key__
    if n <= pack_size:
        return [doc]
    targets = torch.as_tensor(doc.loss_mask).cpu().numpy()
    cut = cut_overlong(
        n,
        pack_size,
        policy,
        no_cut=(doc.media_spans() if no_cut is None else no_cut).numpy(),
        targets=targets,
        name=repr(key),
    )
    if cut.dropped is not None:
        stats.record_drop(key, cut.dropped)
        return []
    if policy is OverlongPolicy.TRUNCATE:
        ((start, end),) = cut.pieces
        stats.record_truncation(key, cut.lost, pack_size)
        return [doc.slice(start, end, key=key)]
    stats.split_overlong += 1
    stats.split_pieces += cut.made
    if len(cut.pieces) < cut.made:
        stats.record_dropped_pieces(key, cut.made - len(cut.pieces))
    # A left-out piece leaves a gap in the keys: the others keep their number among the cuts.
    return [doc.slice(s, e, key=f"{key}#{i}") for i, (s, e) in zip(cut.ids, cut.pieces)]
