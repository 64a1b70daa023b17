"""Apply the over-long policy to one encoded document (in ``encode_sample``, never later).

A document longer than the pack cannot be packed. :func:`apply_overlong_policy` turns one
:class:`~energon_pack.samples.EncodedSample` into the list of documents that go into the packing
buffer. The cuts come from :func:`energon_pack.algorithms.cut_overlong`, the function
``simulate`` applies to plain lengths, given the document's media spans (``no_cut``, from
:meth:`~energon_pack.samples.EncodedSample.media_spans`) and loss mask (``targets``); the
document cuts itself (:meth:`~energon_pack.samples.EncodedSample.slice`), so every document
type (text, captioning, multimodal, light) goes through the same code; this module only counts.
With pack size 4 and a sample ``"k"`` of tokens ``[a b c d e f g h i]``:

* ``TRUNCATE``: ``["k": a b c d]`` (5 tokens counted in ``stats.truncated_tokens``);
* ``SPLIT``: ``["k#0": a b c d] ["k#1": e f g h] ["k#2": i]``, each its own document: the
  position ids restart and ``d`` does not predict ``e``;
* ``DROP``: ``[]`` (counted in ``stats.dropped_overlong`` and logged);
* ``ERROR``: :class:`OverlongSampleError` naming ``"k"``, its length, the pack size and the
  other policies. Raised inside ``encode_sample`` it reaches energon's error handler, where the
  packing encoders' :class:`~energon_pack.energon.counting_skips` turns it into
  :class:`~energon_pack.energon.FatalOverlongSampleError`: the run stops at the first
  over-long sample, at any number of workers.

Nothing is kept that would train on nothing: when the loss mask leaves no target in what is
kept (an SFT prompt longer than the pack), ``TRUNCATE`` drops the sample (counted in
``stats.dropped_overlong``) and ``SPLIT`` leaves out the target-free pieces (counted in
``stats.split_pieces_dropped``; the others keep their ``#i`` keys).

Media tokens are never cut: a cut that would fall inside an image or video span moves back to
the start of that span, and each piece carries exactly the images and videos (pixel rows,
grids, spans) inside it. An image longer than the pack is an :class:`OverlongSampleError` under
``SPLIT``; under ``TRUNCATE`` the cut moves back before it (the tokens before it are kept, the
rest is counted as lost) and it is an error only when the document starts with it. (The
multimodal encoders drop and count a document holding such an item instead, see
:mod:`energon_pack.task_encoders`.)
Split pieces are emitted from a generator ``encode_sample``, so energon's restore key of piece
``i`` ends in ``(..., 'MapDataset', sample_index, i, ...)`` and ``restore_sample`` is exact.
"""

from __future__ import annotations

import torch

from energon_pack.algorithms import OverlongPolicy, cut_overlong
from energon_pack.encoding._stats import PackingStats
from energon_pack.samples import EncodedSample

__all__ = ["apply_overlong_policy", "slice_document"]


def slice_document(doc: EncodedSample, start: int, end: int, *, key: str) -> EncodedSample:
    """``doc.slice(start, end, key=key)``: tokens ``[start, end)`` and the media inside.

    ``[start, end)`` must not cut through a media span; images and videos wholly inside are
    kept with their pixel rows (``t*h*w`` rows each) and their spans shifted by ``-start``.
    """
    return doc.slice(start, end, key=key)


def apply_overlong_policy(
    doc: EncodedSample, pack_size: int, policy: OverlongPolicy | str, stats: PackingStats
) -> list[EncodedSample]:
    """The documents that ``doc`` becomes under ``policy`` (``[doc]`` when it fits)."""
    policy = OverlongPolicy(policy)
    n = len(doc.tokens)
    key = doc.__key__
    if n <= pack_size:
        return [doc]
    targets = torch.as_tensor(doc.loss_mask).cpu().numpy()
    cut = cut_overlong(
        n, pack_size, policy, no_cut=doc.media_spans().numpy(), targets=targets, name=repr(key)
    )
    if cut.dropped is not None:
        stats.record_drop(key, cut.dropped)
        return []
    if policy is OverlongPolicy.TRUNCATE:
        ((start, end),) = cut.pieces
        stats.record_truncation(key, cut.lost, pack_size)
        return [doc.slice(start, end, key=key)]
    stats.split += 1
    stats.split_pieces += cut.made
    if len(cut.pieces) < cut.made:
        stats.record_dropped_pieces(key, cut.made - len(cut.pieces))
    # A left-out piece leaves a gap in the keys: the others keep their number among the cuts.
    return [doc.slice(s, e, key=f"{key}#{i}") for i, (s, e) in zip(cut.ids, cut.pieces)]
