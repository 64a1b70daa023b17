# SPDX-License-Identifier: Apache-2.0
"""Packs: documents concatenated into one sequence with aligned labels (``labels[i]`` is the
token position ``i`` predicts, -100 at each document's end, on masked targets and on alignment
padding) and positions reset per document. A pack type names the document type it holds
(``document_type``) and adds its fields in ``modality_fields``; ``pack_documents`` picks it
from the documents' type. See docs/concepts/metadata.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
import torch
from megatron.energon import Sample, edataclass

from energon_pack.attention import (
    aligned_lengths,
    frame_runs,
    mrope_position_ids,
    position_ids_from_lengths,
    xdrope_position_ids,
)
from energon_pack.samples._counts import PackingCounts
from energon_pack.samples._encoded import (
    EncodedCaptioningSample,
    EncodedMultimodalSample,
    EncodedSample,
    ImageFields,
    MediaFamily,
    VideoFields,
    media_tokens,
)
from energon_pack.samples._rows import concat_rows
from energon_pack.samples._types import TypeRegistry

__all__ = [
    "PackedCaptioningSample",
    "PackedMultimodalSample",
    "PackedTextSample",
    "pack_documents",
]

#: Label value of positions without a target (PyTorch's and Hugging Face's ignore_index).
IGNORE_INDEX = -100

#: Pack types by the document type they hold (filled by ``document_type`` class attributes).
PACK_TYPES = TypeRegistry("document")


class PackLayout(NamedTuple):
    """Where the documents lie in a pack: lengths ``[3, 2]``, alignment 4 -> padded ``[4, 4]``,
    starts ``[0, 4]``."""

    lengths: list[int]
    padded: list[int]
    starts: list[int]


@edataclass
class PackedTextSample(Sample):
    """One pack of text documents (unpadded; collation pads)."""

    #: The document type this pack type holds; setting it in a subclass registers the subclass.
    document_type: ClassVar[type[EncodedSample]] = EncodedSample

    #: (n,) int64 token ids, n = sum(doc_lengths_padded).
    tokens: torch.Tensor
    #: (n,) bool, the documents' loss masks (False on alignment padding): token ``i`` is a
    #: target of position ``i - 1`` of its document when True (see :attr:`labels`).
    loss_mask: torch.Tensor
    #: Real document lengths, in order.
    doc_lengths: list[int]
    #: Lengths after alignment padding (== doc_lengths when alignment=1).
    doc_lengths_padded: list[int]
    #: ``__key__`` of each member document, in order.
    sample_keys: list[str]
    #: What the worker counted since its previous pack (set by the task encoder; None when
    #: built outside one). A record of the run, not content: ``restore_sample`` gives zeros.
    counts: PackingCounts | None = None
    #: (n,) int64 the documents' ``token_type_ids`` (0 on alignment padding), or None when
    #: the documents have none.
    token_type_ids: torch.Tensor | None = None
    #: (n,) int64 the documents' ``moe_mm_token_type_ids`` (0 on alignment padding), or None.
    moe_mm_token_type_ids: torch.Tensor | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # explicit class: zero-argument super() fails in slots dataclasses before Python 3.14
        super(PackedTextSample, cls).__init_subclass__(**kwargs)  # noqa: UP008
        if "document_type" in cls.__dict__:
            PACK_TYPES.register(cls.document_type, cls)

    @property
    def length(self) -> int:
        """Number of tokens of the pack (alignment padding included)."""
        return int(self.tokens.shape[0])

    @property
    def labels(self) -> torch.Tensor:
        """(n,) int64 aligned targets (``labels[i]`` is the token position ``i`` predicts);
        -100 at the last token of each document, where the target is not in the loss mask
        and on alignment padding (computed from the fields when read; a batch writes its own
        into its rows)."""
        out = np.empty(self.length, dtype=np.int64)
        padded = self.doc_lengths_padded
        starts = list(itertools.accumulate(padded, initial=0))[:-1]
        mask = (0, self.loss_mask.cpu().numpy(), starts)
        write_labels(out, self.tokens.cpu().numpy(), padded, self.doc_lengths, [mask])
        return torch.from_numpy(out).to(self.tokens.device)

    @property
    def position_ids(self) -> torch.Tensor:
        """(n,) int64 position inside the document, reset to 0 per document slot (computed
        from ``doc_lengths_padded`` when read; a batch computes its own)."""
        return position_ids_from_lengths(self.doc_lengths_padded)

    @classmethod
    def from_documents(
        cls,
        samples: Sequence[EncodedSample],
        *,
        alignment: int = 1,
        pad_token_id: int = 0,
        **options: Any,
    ) -> Self:
        """Concatenate encoded documents (of this type's ``document_type``) into one pack.

        Args:
            samples: the documents, in pack order.
            alignment: pad every document to a multiple of this (2 * context-parallel size).
            pad_token_id: token id of alignment padding.
            **options: the modality's options (see :meth:`modality_fields`).

        ``__key__`` is the member keys joined by ``","``, ``__restore_key__=()`` (energon sets
        it), ``__subflavors__`` the first member's, ``__sources__`` the members' (deduplicated).
        """
        lengths = _check_documents(cls, samples)
        padded = aligned_lengths(lengths, alignment)
        layout = PackLayout(lengths, padded, list(itertools.accumulate(padded, initial=0))[:-1])
        tokens, loss_mask = _tokens_and_mask(samples, layout, pad_token_id)
        keys = [s.__key__ for s in samples]
        return cls(
            __key__=",".join(keys),
            __restore_key__=(),
            __subflavors__=samples[0].__subflavors__,
            __sources__=_sources(samples),
            tokens=tokens,
            loss_mask=loss_mask,
            doc_lengths=lengths,
            doc_lengths_padded=padded,
            sample_keys=keys,
            token_type_ids=token_types(samples, layout.starts, sum(padded), "sample", "pack"),
            moe_mm_token_type_ids=token_types(
                samples, layout.starts, sum(padded), "sample", "pack", "moe_mm_token_type_ids"
            ),
            **cls.modality_fields(samples, layout, **options),
        )

    @classmethod
    def modality_fields(
        cls, samples: Sequence[EncodedSample], layout: PackLayout, **options: Any
    ) -> dict[str, Any]:
        """Hook: the fields a modality adds to the text fields (text: none, no options)."""
        if options:
            raise TypeError(
                f"{cls.__name__}.from_documents() got unexpected options {sorted(options)}; "
                "they belong to another pack type (mrope: PackedCaptioningSample)"
            )
        return {}


PACK_TYPES.register(EncodedSample, PackedTextSample)


@dataclasses.dataclass(kw_only=True)
class PackedImageFields(ImageFields):
    """The image fields of packs and batches: a document's, plus the mRoPE positions."""

    __slots__ = ()
    #: mRoPE (temporal, height, width) positions reset per document, or None: (3, n) in a pack,
    #: (3, B, L) in a batch (padding continues the count).
    mrope_position_ids: torch.Tensor | None = None
    #: (num_documents,) int64 images per document (LLaVA-OneVision), or None.
    batch_num_images: torch.Tensor | None = None


@edataclass
class PackedCaptioningSample(PackedImageFields, PackedTextSample):
    """One pack of captioning documents: their images in pack order, spans in pack tokens."""

    document_type: ClassVar[type[EncodedSample]] = EncodedCaptioningSample

    @classmethod
    def modality_fields(  # type: ignore[override]
        cls,
        samples: Sequence[EncodedCaptioningSample],
        layout: PackLayout,
        *,
        mrope: bool = False,
        spatial_merge_size: int = 2,
    ) -> dict[str, Any]:
        """The images and, with ``mrope=True``, the ``(3, n)`` mRoPE positions of each document
        (``spatial_merge_size``: the vision tower's spatial merge)."""
        mrope_ids = _mrope(samples, layout, spatial_merge_size) if mrope else None
        return {
            **concat_media(samples, layout.starts, cls.image_fields),
            "image_sizes": cat_optional(samples, "image_sizes"),
            "mrope_position_ids": mrope_ids,
            "family": one_family(samples, "documents"),
        }


@edataclass
class PackedMultimodalSample(VideoFields, PackedCaptioningSample):
    """One pack of multimodal documents: the images, then the videos, each in pack order."""

    document_type: ClassVar[type[EncodedSample]] = EncodedMultimodalSample

    @classmethod
    def modality_fields(  # type: ignore[override]
        cls,
        samples: Sequence[EncodedMultimodalSample],
        layout: PackLayout,
        *,
        mrope: bool = False,
        mrope_layout: str = "qwen",
        spatial_merge_size: int = 2,
        tokens_per_second: float | None = None,
        batch_num_images: bool = False,
    ) -> dict[str, Any]:
        """Images and videos as the captioning pack joins images, images per document with
        ``batch_num_images``, and with ``mrope=True`` the positions of each document over its
        image and video runs by ``mrope_layout`` (``"qwen"``: ``(3, n)``; ``"xdrope"``,
        HunYuan-VL: ``(4, n)``, images only)."""
        fields = PackedCaptioningSample.modality_fields(samples, layout)
        if batch_num_images:
            per_doc = [len(s.image_grid_thw.view(-1, 3)) for s in samples]
            fields["batch_num_images"] = torch.tensor(per_doc, dtype=torch.int64)
        fields.update(concat_media(samples, layout.starts, cls.video_fields))
        fields["video_second_per_grid"] = torch.cat(
            [s.video_second_per_grid.view(-1) for s in samples]
        ).to(torch.float32)
        if mrope and mrope_layout == "xdrope":
            fields["mrope_position_ids"] = _xdrope(samples, layout, spatial_merge_size)
        elif mrope:
            fields["mrope_position_ids"] = _mrope(
                samples, layout, spatial_merge_size, tokens_per_second
            )
        return fields

    @property
    def num_media_tokens(self) -> int:
        """Image plus video placeholder tokens of the pack."""
        return media_tokens(self.tokens, self.image_spans, self.video_spans)


def _mrope(
    samples: Sequence[EncodedCaptioningSample],
    layout: PackLayout,
    merge: int,
    tokens_per_second: float | None = None,
) -> torch.Tensor:
    """``(3, n)`` mRoPE positions of a pack, each document's over its media runs."""
    per_document = []
    for doc, n, padded in zip(samples, layout.lengths, layout.padded):
        spans, grids, intervals = _runs(doc, tokens_per_second, merge)
        per_document.append(
            mrope_position_ids(
                n,
                spans,
                grids,
                spatial_merge_size=merge,
                padded_length=padded,
                time_intervals=intervals,
            )
        )
    return torch.cat(per_document, dim=1)


def _xdrope(
    samples: Sequence[EncodedMultimodalSample], layout: PackLayout, merge: int
) -> torch.Tensor:
    """``(4, n)`` HunYuan-VL positions of a pack (:func:`xdrope_position_ids` per document)."""
    if any(len(doc.video_grid_thw) for doc in samples):
        raise ValueError("xdrope positions (HunYuan-VL) are laid out for images only")
    return torch.cat(
        [
            xdrope_position_ids(
                n, doc.image_spans, doc.image_grid_thw, spatial_merge_size=merge, padded_length=p
            )
            for doc, n, p in zip(samples, layout.lengths, layout.padded)
        ],
        dim=1,
    )


def _runs(
    doc: EncodedCaptioningSample, tokens_per_second: float | None, merge: int
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """A document's images and videos in token order: spans, grids, time intervals. A Qwen3-VL
    video is one run per temporal patch (``frame_runs``); a video's temporal row steps by
    ``tokens_per_second * second_per_grid`` (Qwen2.5-VL; ``None``: by 1, Qwen2-VL)."""
    spans, grids = doc.image_spans.view(-1, 2).tolist(), doc.image_grid_thw.view(-1, 3).tolist()
    intervals = [1.0] * len(grids)
    if isinstance(doc, VideoFields):
        videos = doc.video_grid_thw.view(-1, 3)
        per_video = (
            [1.0] * len(videos)
            if tokens_per_second is None
            else (doc.video_second_per_grid.view(-1) * tokens_per_second).tolist()
        )
        for span, grid, interval in zip(doc.video_spans.view(-1, 2), videos, per_video):
            runs, run_grids = frame_runs(doc.tokens, span, grid, spatial_merge_size=merge)
            spans, grids = spans + runs, grids + run_grids
            intervals += [interval] * len(runs)
    spans_t = torch.tensor(spans, dtype=torch.int64).view(-1, 2)
    grids_t = torch.tensor(grids, dtype=torch.int64).view(-1, 3)
    order = torch.argsort(spans_t[:, 0], stable=True)
    return spans_t[order], grids_t[order], [intervals[i] for i in order.tolist()]


def one_family(members: Sequence[Any], what: str) -> MediaFamily | None:
    """The one :class:`MediaFamily` of ``members`` (documents of a pack, packs of a batch);
    members of different families (or some built by hand) are a ValueError."""
    families = list(dict.fromkeys(m.family for m in members))
    if len(families) > 1:
        names = [f.name if f is not None else "none (built by hand)" for f in families]
        raise ValueError(
            f"the {what} of one {'batch' if what == 'packs' else 'pack'} come from different VLM "
            f"families ({', '.join(names)}): their layouts differ; pack each family's documents "
            "apart (one encoder per family)"
        )
    return families[0]


def cat_optional(members: Sequence[Any], name: str) -> torch.Tensor | None:
    """Field ``name`` of ``members`` concatenated, or None where they have none."""
    parts = [getattr(m, name) for m in members]
    return None if any(p is None for p in parts) else torch.cat(parts)


def concat_media(
    members: Sequence[Any], offsets: Sequence[int], names: tuple[str, str, str]
) -> dict[str, torch.Tensor]:
    """The media fields ``names`` (rows, grid, spans) of ``members`` joined in member order,
    each member's spans shifted by its offset (its start in a pack, ``row * L`` in a batch):
    spans ``[[1, 3]]`` and ``[[0, 2]]`` at offsets ``[0, 5]`` give ``[[1, 3], [5, 7]]``."""
    rows, grid, spans = names
    shifted = [getattr(m, spans).view(-1, 2) + o for m, o in zip(members, offsets)]
    return {
        rows: concat_rows([getattr(m, rows) for m in members]),
        grid: torch.cat([getattr(m, grid).view(-1, 3) for m in members]),
        spans: torch.cat(shifted).to(torch.int64),
    }


def token_types(
    members: Sequence[Any],
    offsets: Sequence[int],
    size: int,
    member: str,
    container: str,
    name: str = "token_type_ids",
) -> torch.Tensor | None:
    """The members' per-token ``name`` (``token_type_ids``, ``moe_mm_token_type_ids``) at their
    offsets in a ``(size,)`` int64 tensor, 0 on padding; None when no member has them. All or
    none: one member without them is an error."""
    values = list(map(operator.attrgetter(name), members))
    missing = values.count(None)
    if missing == len(members):
        return None
    if missing:
        key = next(m.__key__ for m, v in zip(members, values) if v is None)
        raise ValueError(
            f"{member} {key!r} has no {name} but others in its {container} do; "
            f"give every document {name} (zeros for text-only ones)"
        )
    out = torch.zeros(size, dtype=torch.int64)
    for m, types, start in zip(members, values, offsets):
        if types.shape != (m.length,):
            raise ValueError(
                f"{member} {m.__key__!r}: {name} {tuple(types.shape)} for "
                f"{m.length} tokens; give one type per token"
            )
        out[start : start + m.length] = types
    return out


def _check_documents(cls: type[PackedTextSample], samples: Sequence[EncodedSample]) -> list[int]:
    """Validate the documents for pack type ``cls``; return their lengths (one pass per check
    over all documents; the first offending one is named)."""
    if len(samples) == 0:
        raise ValueError("pack_documents got no samples; a pack needs at least one document")
    PACK_TYPES.check(cls, samples, cls.document_type)
    if not all(t.ready_to_pack for t in set(map(type, samples))):
        s = next(s for s in samples if not s.ready_to_pack)
        raise ValueError(
            f"sample {s.__key__!r} is a {type(s).__name__}: its media are planned, not "
            "decoded; call the encoder's materialize(doc) first (energon does this in "
            "postencode for the members of each pack)"
        )
    shapes = [s.tokens.shape for s in samples]
    masks = [s.loss_mask.shape for s in samples]
    lengths = [shape[0] if len(shape) == 1 else 0 for shape in shapes]  # 0: not 1-D
    if shapes != masks or not all(lengths):
        s = next(s for s, t, m, n in zip(samples, shapes, masks, lengths) if t != m or not n)
        raise ValueError(
            f"sample {s.__key__!r}: tokens {tuple(s.tokens.shape)} and loss_mask "
            f"{tuple(s.loss_mask.shape)} must be equal non-empty 1-D shapes"
        )
    return lengths


def _sources(samples: Sequence[Sample]) -> tuple[Any, ...] | None:
    given = [src for src in map(operator.attrgetter("__sources__"), samples) if src is not None]
    if not given:
        return None
    seen: list[Any] = []
    for sources in given:
        for src in sources:
            if src not in seen:
                seen.append(src)
    return tuple(seen)


def write_labels(
    out: np.ndarray,
    tokens: np.ndarray,
    slots: Sequence[int],
    lengths: Sequence[int],
    masks: Sequence[tuple[int, np.ndarray, Sequence[int]]],
) -> None:
    """Write the aligned labels of packs' ``tokens`` into ``out`` (both flattened ``(n,)``: a
    pack, or a batch's rows one after the other): ``out[i] = tokens[i+1]`` where
    ``loss_mask[i+1]``, -100 at each document's last token, on padding and elsewhere.
    ``slots`` / ``lengths``: every document's slot and real length in order (the slots cover
    all of ``out``: a row's tail padding belongs to its last slot); ``masks``: per pack
    ``(offset, loss_mask, starts)``, where its tokens begin in ``out``, its loss mask and its
    documents' starts in it."""
    out[:-1] = tokens[1:]
    out[-1:] = IGNORE_INDEX
    start = 0
    for n, slot in zip(lengths, slots):  # a document's last token and its slot's padding
        out[start + n - 1 : start + slot] = IGNORE_INDEX
        start += slot
    for offset, loss_mask, doc_starts in masks:
        mask = loss_mask.astype(bool, copy=False)
        holes = len(mask) - np.count_nonzero(mask)
        # untrained tokens only at the documents' starts (BOS): their -100 are the ends' above
        if holes and not (holes == len(doc_starts) and not mask[doc_starts].any()):
            np.putmask(out[offset : offset + len(mask) - 1], ~mask[1:], IGNORE_INDEX)


def _tokens_and_mask(
    samples: Sequence[EncodedSample], layout: PackLayout, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenated tokens and loss masks, alignment padding included (``pad_token_id``,
    False). A lone document's are the pack's, not copied (documents are not changed after
    ``encode_sample``; a split piece is a view of its document's, which a worker sends as
    the view alone: ``one_storage``)."""
    if len(samples) == 1 and layout.padded == layout.lengths:
        return samples[0].tokens, samples[0].loss_mask.to(torch.bool)
    # torch.cat: a tensor's .numpy() costs about as much as copying 4k tokens
    tokens = torch.cat([s.tokens for s in samples])
    mask = torch.cat([s.loss_mask for s in samples]).to(torch.bool)
    if layout.padded == layout.lengths:
        return tokens, mask
    n = sum(layout.padded)
    real = np.concatenate([np.arange(st, st + ln) for st, ln in zip(layout.starts, layout.lengths)])
    flat = tokens.numpy()
    out_tokens = np.full(n, pad_token_id, dtype=flat.dtype)
    out_tokens[real] = flat
    out_mask = np.zeros(n, dtype=bool)
    out_mask[real] = mask.numpy()
    return torch.from_numpy(out_tokens), torch.from_numpy(out_mask)


def pack_documents(
    samples: Sequence[EncodedSample], *, alignment: int = 1, pad_token_id: int = 0, **options: Any
) -> PackedTextSample:
    """Pack documents into the pack type registered for their type: text documents give a
    :class:`PackedTextSample`, captioning ones a :class:`PackedCaptioningSample` (options
    ``mrope``, ``spatial_merge_size``), ... Arguments as in
    :meth:`PackedTextSample.from_documents`."""
    if len(samples) == 0:
        raise ValueError("pack_documents got no samples; a pack needs at least one document")
    pack_type = PACK_TYPES.lookup(type(samples[0])) or PackedTextSample
    return pack_type.from_documents(
        samples, alignment=alignment, pad_token_id=pad_token_id, **options
    )
