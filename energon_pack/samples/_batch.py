# SPDX-License-Identifier: Apache-2.0
"""Batches of packs: ``(B, L)`` rows, each padded at the end (the tail padding joins the row's
last document slot), one :class:`~energon_pack.attention.DocumentMetadata` for all rows, and
adapters in each kernel's vocabulary. A batch type names the pack type it collates
(``pack_type``) and adds its fields in ``modality_fields``; ``collate_packs`` picks it. See
docs/concepts/metadata.md.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Self, TypeVar

import torch
from megatron.energon import Batch, edataclass
from torch.nn.attention.flex_attention import BlockMask
from torch.nn.utils.rnn import pad_sequence

from energon_pack.attention import (
    DEFAULT_BLOCK_SIZE,
    DocumentMetadata,
    block_mask,
    dense_mask,
    document_metadata,
    flash_attn_kwargs,
    hf_kwargs,
    packed_seq_params,
)
from energon_pack.samples._arena import Arena
from energon_pack.samples._counts import PackingCounts
from energon_pack.samples._encoded import VideoFields
from energon_pack.samples._packed import (
    IGNORE_INDEX,
    PackedCaptioningSample,
    PackedImageFields,
    PackedMultimodalSample,
    PackedTextSample,
    cat_optional,
    concat_media,
    one_family,
    token_types,
    write_labels,
)
from energon_pack.samples._types import TypeRegistry

__all__ = [
    "PackedCaptioningBatch",
    "PackedMultimodalBatch",
    "PackedTextBatch",
    "collate_packs",
]

#: Batch types by the pack type they collate (filled by ``pack_type`` class attributes).
BATCH_TYPES = TypeRegistry("pack")

T = TypeVar("T")


def _lists(rows: Any) -> list[list[int]]:
    return [list(row) for row in rows]


class _View(Generic[T]):
    """``batch.<name>``: ``batch.metadata.<name>``, read-only (``convert``: as a new value)."""

    def __init__(self, convert: Callable[[Any], T] | None = None) -> None:
        self.convert = convert

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, batch: Any, owner: type | None = None) -> T:
        if batch is None:
            return self  # type: ignore[return-value]
        value = getattr(batch.metadata, self.name)
        return value if self.convert is None else self.convert(value)

    def __set__(self, batch: Any, value: Any) -> None:
        raise AttributeError(f"{self.name} is read-only: a view of batch.metadata")


@edataclass
class PackedTextBatch(Batch):
    """A batch of ``B`` packs padded to length ``L`` (``D`` documents in total)."""

    #: The pack type this batch type collates; setting it in a subclass registers the subclass.
    pack_type: ClassVar[type[PackedTextSample]] = PackedTextSample
    #: The Megatron layout :func:`~energon_pack.samples.megatron_batch` builds for this type:
    #: ``"text"`` (THD tokens) or ``"vlm"`` (plus mRoPE rows, pixels, token masks).
    megatron_layout: ClassVar[str] = "text"

    #: (B, L) int64 token ids; tail padding is ``pad_token_id``.
    tokens: torch.Tensor
    #: (B, L) int64 aligned targets (label[i] = next token of the same document), -100 elsewhere.
    labels: torch.Tensor
    #: Document layout of the rows: positions, segment ids, ``cu_seqlens``, lengths, ...
    metadata: DocumentMetadata
    #: Per row, the member documents' ``__key__``.
    sample_keys: list[list[str]]
    #: What packing counted for these packs (the sum of the packs' ``counts``; see
    #: :class:`~energon_pack.samples.PackingCounts`). A record of the run, not content.
    counts: PackingCounts = dataclasses.field(default_factory=PackingCounts)
    #: (B, L) int64 the packs' ``token_type_ids`` (0 on padding), or None; ``hf_kwargs`` builds
    #: the bidirectional blocks of Gemma 3 VLMs and PaliGemma from them.
    token_type_ids: torch.Tensor | None = None
    #: (B, L) int64 the packs' ``moe_mm_token_type_ids`` (0 on padding), or None; ``hf_kwargs``
    #: passes them to the model (Ernie-4.5-VL's experts route image tokens by them).
    moe_mm_token_type_ids: torch.Tensor | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # explicit class: zero-argument super() fails in slots dataclasses before Python 3.14
        super(PackedTextBatch, cls).__init_subclass__(**kwargs)  # noqa: UP008
        if "pack_type" in cls.__dict__:
            BATCH_TYPES.register(cls.pack_type, cls)

    # -- read-only views of the metadata (shapes and dtypes: DocumentMetadata's fields) -------
    position_ids: ClassVar[_View[torch.Tensor]] = _View()
    segment_ids: ClassVar[_View[torch.Tensor]] = _View()
    document_borders: ClassVar[_View[torch.Tensor]] = _View()
    seq_idx: ClassVar[_View[torch.Tensor]] = _View()
    cu_seqlens: ClassVar[_View[torch.Tensor]] = _View()
    cu_seqlens_padded: ClassVar[_View[torch.Tensor]] = _View()
    max_seqlen: ClassVar[_View[int]] = _View()
    max_seqlen_padded: ClassVar[_View[int]] = _View()
    doc_lengths: ClassVar[_View[list[list[int]]]] = _View(_lists)
    doc_lengths_padded: ClassVar[_View[list[list[int]]]] = _View(_lists)

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Self:
        """The same batch with every tensor, the metadata's included, on ``device``.

        Read ``num_target_tokens`` first if you need it on the host (it syncs on a GPU).
        """
        moved = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (torch.Tensor, DocumentMetadata)):
                moved[f.name] = value.to(device, non_blocking=non_blocking)
        return dataclasses.replace(self, **moved)

    # -- the loss ------------------------------------------------------------------------------

    @property
    def num_target_tokens(self) -> int:
        """Positions with a target (``labels != -100``), a Python int (it syncs on a GPU: read
        it before moving the batch). Summed over a step's micro-batches and ranks it is
        transformers' ``num_items_in_batch`` (see docs/howto/loss.md)."""
        return int((self.labels != IGNORE_INDEX).sum())

    def document_target_tokens(self) -> torch.Tensor:
        """(D,) int64 targets of each document, in ``cu_seqlens`` order (0: none).

        Rows ``[a a a b b p]`` and ``[c c c c p p]`` with every token a target -> ``[2, 1, 3]``
        (a document's last token has no target).
        """
        slot = self._slot_of_position()
        target = (self.labels != IGNORE_INDEX).view(-1)
        return torch.bincount(slot[target], minlength=len(self.metadata.cu_seqlens) - 1)

    def loss_weights(self, per: str = "token") -> torch.Tensor:
        """(B, L) float32 weight of each position's loss term (0 where there is no target):
        ``per="token"`` 1.0 at every target; ``per="document"`` ``1 / (targets of its
        document)``, so each document's terms sum to 1 (see docs/howto/loss.md)."""
        target = self.labels != IGNORE_INDEX
        if per == "token":
            return target.to(torch.float32)
        if per != "document":
            raise ValueError(f"per={per!r}: choose 'token' or 'document'")
        per_doc = self.document_target_tokens().clamp(min=1).to(torch.float32)
        weights = (1.0 / per_doc)[self._slot_of_position()].view_as(self.labels)
        return torch.where(target, weights, torch.zeros_like(weights))

    def _slot_of_position(self) -> torch.Tensor:
        """(B * L,) int64 document slot of every position of the flattened batch."""
        bounds = self.metadata.cu_seqlens_padded[1:].to(torch.int64)
        positions = torch.arange(self.labels.numel(), device=bounds.device)
        return torch.bucketize(positions, bounds, right=True)

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def from_packs(
        cls,
        packs: Sequence[PackedTextSample],
        *,
        pad_to: int | None = None,
        pad_to_multiple_of: int | None = None,
        pad_token_id: int = 0,
    ) -> Self:
        """Stack packs of this type's ``pack_type`` into a batch (see the module docstring).

        Args:
            packs: the packs (one pack type).
            pad_to: row length ``L`` (the pack size); default: the longest pack.
            pad_to_multiple_of: round ``L`` up to a multiple of this (e.g. 128 for tensor cores).
            pad_token_id: token id of the tail padding.
        """
        _check_packs(cls, packs)
        length = _row_length(packs, pad_to, pad_to_multiple_of)
        arena = _text_arena(packs, length)
        tokens = _rows([p.tokens for p in packs], arena, length, pad_token_id)
        metadata = document_metadata(
            [p.doc_lengths for p in packs],
            length=length,
            doc_lengths_padded=[p.doc_lengths_padded for p in packs],
            empty=arena.empty,
        )
        labels = _label_rows(packs, tokens, arena, metadata)
        sources = [s for p in packs for s in (p.__sources__ or ())]
        offsets = [r * length for r in range(len(packs))]
        types = token_types(packs, offsets, labels.numel(), "pack", "batch")
        moe = token_types(packs, offsets, labels.numel(), "pack", "batch", "moe_mm_token_type_ids")
        return cls(
            __key__=[p.__key__ for p in packs],
            __restore_key__=(),
            __subflavors__=[p.__subflavors__ for p in packs],
            __sources__=tuple(sources) if sources else None,
            tokens=tokens,
            labels=labels,
            metadata=metadata,
            sample_keys=[list(p.sample_keys) for p in packs],
            counts=PackingCounts.total(p.counts for p in packs),
            token_type_ids=None if types is None else types.view(len(packs), length),
            moe_mm_token_type_ids=None if moe is None else moe.view(len(packs), length),
            **cls.modality_fields(packs, length),
        )

    @classmethod
    def modality_fields(cls, packs: Sequence[PackedTextSample], length: int) -> dict[str, Any]:
        """Hook: the fields a modality adds for rows of ``length`` tokens (text: none)."""
        return {}

    # -- kernel adapters (energon_pack.attention) ----------------------------------------------

    def flash_attn_kwargs(self, **options: Any) -> dict[str, Any]:
        """``flash_attn_varlen_func`` kwargs; see :func:`energon_pack.attention.flash_attn_kwargs`."""
        refuse_bidirectional(self, "flash_attn_kwargs()")
        return flash_attn_kwargs(self.metadata, **options)

    def packed_seq_params(self, **options: Any) -> Any:
        """Megatron-Core ``PackedSeqParams``; see :func:`energon_pack.attention.packed_seq_params`."""
        refuse_bidirectional(self, "packed_seq_params()")
        return packed_seq_params(self.metadata, **options)

    def hf_kwargs(
        self, attn_implementation: str | None = None, *, with_labels: bool = True, **options: Any
    ) -> dict[str, Any]:
        """Kwargs for ``model(**...)``; see :func:`energon_pack.attention.hf_kwargs`."""
        labels = self.labels if with_labels else None
        if options.get("config") is None:
            refuse_bidirectional(self, "hf_kwargs() without config=model")
        options.setdefault("token_type_ids", self.token_type_ids)
        options.setdefault("moe_mm_token_type_ids", self.moe_mm_token_type_ids)
        return hf_kwargs(self.metadata, self.tokens, labels, attn_implementation, **options)

    def block_mask(self, *, block_size: int = DEFAULT_BLOCK_SIZE) -> BlockMask:
        """FlexAttention ``BlockMask`` (B, 1, L, L); see :func:`energon_pack.attention.block_mask`."""
        refuse_bidirectional(self, "block_mask()")
        return block_mask(self.metadata, block_size=block_size)

    def dense_mask(self) -> torch.Tensor:
        """(B, 1, L, L) bool block-causal mask; see :func:`energon_pack.attention.dense_mask`."""
        refuse_bidirectional(self, "dense_mask()")
        return dense_mask(self.metadata)


def refuse_bidirectional(batch: PackedTextBatch, what: str) -> None:
    """Raise ValueError when ``batch`` has ``token_type_ids``: its model attends both ways
    inside documents (Gemma 3 images, PaliGemma's prefix), which a document-causal ``what``
    would change; ``hf_kwargs(impl, config=model)`` builds those masks."""
    if batch.token_type_ids is not None:
        raise ValueError(
            f"{what}: this batch's documents have token_type_ids, so their model attends both "
            "ways inside them (Gemma 3 image tokens, PaliGemma's prefix) and a document-causal "
            f"mask would change it; use batch.hf_kwargs(impl, config=model) (sdpa, eager, "
            "flex_attention), whose masks hold those bidirectional blocks."
        )


BATCH_TYPES.register(PackedTextSample, PackedTextBatch)


@edataclass
class PackedCaptioningBatch(PackedImageFields, PackedTextBatch):
    """A batch of captioning packs: images in row-major pack order, spans in the flattened
    ``(B * L,)`` batch, mRoPE ids ``(3, B, L)``."""

    pack_type: ClassVar[type[PackedTextSample]] = PackedCaptioningSample
    megatron_layout: ClassVar[str] = "vlm"

    @classmethod
    def modality_fields(  # type: ignore[override]
        cls, packs: Sequence[PackedCaptioningSample], length: int
    ) -> dict[str, Any]:
        """Images in row-major pack order, spans in batch coordinates, stacked mRoPE ids."""
        offsets = [r * length for r in range(len(packs))]
        fields = concat_media(packs, offsets, cls.image_fields)
        fields.update({n: cat_optional(packs, n) for n in ("image_sizes", "batch_num_images")})
        fields["family"] = one_family(packs, "packs")
        return {**fields, "mrope_position_ids": _stack_mrope(packs, length)}

    def hf_kwargs(self, attn_implementation: str | None = None, **options: Any) -> dict[str, Any]:
        """Text kwargs plus the images (:func:`image_kwargs`) and, when built, the mRoPE
        ``position_ids`` of shape (3, B, L) (hybrids such as Qwen3.5-VL: (4, 1, B*L), see
        :func:`energon_pack.attention.hf_kwargs`)."""
        # explicit base: zero-argument super() fails in slots dataclasses before Python 3.14
        options.setdefault("mrope_position_ids", self.mrope_position_ids)
        kwargs = PackedTextBatch.hf_kwargs(self, attn_implementation, **options)
        kwargs.update(image_kwargs(self.pixel_values, self.image_grid_thw))
        return kwargs


@edataclass
class PackedMultimodalBatch(VideoFields, PackedCaptioningBatch):
    """A batch of multimodal packs; ``hf_kwargs`` passes only the media the batch has."""

    pack_type: ClassVar[type[PackedTextSample]] = PackedMultimodalSample

    @classmethod
    def modality_fields(  # type: ignore[override]
        cls, packs: Sequence[PackedMultimodalSample], length: int
    ) -> dict[str, Any]:
        """Images and videos in row-major pack order, spans in batch coordinates, mRoPE ids."""
        fields = PackedCaptioningBatch.modality_fields(packs, length)
        offsets = [r * length for r in range(len(packs))]
        fields.update(concat_media(packs, offsets, cls.video_fields))
        fields["video_second_per_grid"] = torch.cat([p.video_second_per_grid for p in packs])
        return fields

    def hf_kwargs(self, attn_implementation: str | None = None, **options: Any) -> dict[str, Any]:
        """Text kwargs, the images when the batch has some (:func:`image_kwargs`),
        ``pixel_values_videos`` / ``video_grid_thw`` when it has videos, and the (3, B, L)
        mRoPE ``position_ids`` when built (hybrids: (4, 1, B*L))."""
        # explicit base: zero-argument super() fails in slots dataclasses before Python 3.14
        options.setdefault("mrope_position_ids", self.mrope_position_ids)
        kwargs = PackedTextBatch.hf_kwargs(self, attn_implementation, **options)
        if len(self.image_grid_thw):
            sizes, per_doc = self.image_sizes, self.batch_num_images
            kwargs.update(image_kwargs(self.pixel_values, self.image_grid_thw, sizes, per_doc))
        if len(self.video_grid_thw):
            kwargs["pixel_values_videos"] = self.pixel_values_videos
            kwargs["video_grid_thw"] = self.video_grid_thw
        return kwargs


def image_kwargs(
    pixel_values: torch.Tensor,
    grid: torch.Tensor,
    image_sizes: torch.Tensor | None = None,
    batch_num_images: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The model's image kwargs, by the layout of the family's pixels: patch rows
    ``(rows, dim)`` or whole patches ``(patches, 3, p, p)`` (PaddleOCR-VL) with
    ``image_grid_thw`` (patch grids: some row's ``h * w > 1``); tiles ``(tiles, 3, H, W)`` as they are
    (InternVL); split tiles ``(tiles, 1, 3, S, S)`` as ``(1, tiles, 3, S, S)`` (Idefics3); with
    ``image_sizes`` (LLaVA-NeXT, -OneVision) each image's patches padded to
    ``(images, max_patches, 3, S, S)`` as the processor gives them, the sizes and
    ``batch_num_images`` (images per document, OneVision)."""
    if pixel_values.dim() == 2 or (grid.view(-1, 3)[:, 1:].prod(dim=1) > 1).any():
        return {"pixel_values": pixel_values, "image_grid_thw": grid}
    if pixel_values.dim() == 5:
        return {"pixel_values": pixel_values.transpose(0, 1)}
    if image_sizes is None:
        return {"pixel_values": pixel_values}
    per_image = pixel_values.split(grid.view(-1, 3)[:, 0].tolist())
    out = {"pixel_values": pad_sequence(per_image, batch_first=True), "image_sizes": image_sizes}
    return out if batch_num_images is None else {**out, "batch_num_images": batch_num_images}


def _stack_mrope(packs: Sequence[PackedCaptioningSample], length: int) -> torch.Tensor | None:
    """(3, B, L) mRoPE ids ((4, B, L): HunYuan-VL's), tail padding continuing each row's count;
    None if no pack has them."""
    missing = [p.__key__ for p in packs if p.mrope_position_ids is None]
    if missing and len(missing) < len(packs):
        raise ValueError(
            f"pack {missing[0]!r} has no mrope_position_ids but other packs of the batch do; "
            "build every pack with the same mrope=True/False"
        )
    if missing:
        return None
    rows = packs[0].mrope_position_ids.shape[0]  # 3; HunYuan-VL's xdrope: 4
    if any(p.mrope_position_ids.shape[0] != rows for p in packs):
        raise ValueError("the packs of a batch have mRoPE positions of different layouts")
    mrope = torch.empty(rows, len(packs), length, dtype=torch.int64)
    for r, p in enumerate(packs):
        assert p.mrope_position_ids is not None
        n = p.length
        mrope[:, r, :n] = p.mrope_position_ids
        # padding continues the count after the row's largest position
        mrope[:, r, n:] = p.mrope_position_ids.max() + 1 + torch.arange(length - n)
    return mrope


def _text_arena(packs: Sequence[PackedTextSample], length: int) -> Arena:
    """One buffer for a batch's tokens, labels and ``cu_seqlens*`` (:meth:`Arena.for_item`: a
    loader worker sends it as it is, by value or, above ``BY_VALUE`` bytes, in shared memory)."""
    rows, slots = len(packs), sum(len(p.doc_lengths) for p in packs)
    nbytes = 2 * Arena.size((rows, length), torch.int64)  # tokens, labels
    nbytes += 2 * Arena.size((slots + 1,), torch.int32)  # cu_seqlens, cu_seqlens_padded
    return Arena.for_item(nbytes)


def _rows(values: Sequence[torch.Tensor], arena: Arena, length: int, fill: int) -> torch.Tensor:
    """``(len(values), length)`` int64 from ``arena``: each 1-D tensor at the start of its row,
    ``fill`` after it. CPU rows are copied through NumPy views (a torch slice assignment costs
    ~10 us)."""
    out = arena.empty((len(values), length), torch.int64)
    rows = out.numpy()
    for r, v in enumerate(values):
        n = v.shape[0]
        rows[r, :n] = v.numpy() if v.device.type == "cpu" else v.cpu().numpy()
        rows[r, n:] = fill
    return out


def _label_rows(
    packs: Sequence[PackedTextSample],
    tokens: torch.Tensor,
    arena: Arena,
    metadata: DocumentMetadata,
) -> torch.Tensor:
    """``(B, L)`` int64 labels from ``arena``: :func:`write_labels` over the flattened rows of
    ``tokens`` in one pass, by the batch's slots (``metadata``; a row's tail padding is its last
    slot's, so -100)."""
    out = arena.empty(tuple(tokens.shape), torch.int64)
    length = tokens.shape[1]
    masks = [
        (r * length, p.loss_mask.cpu().numpy(), list(itertools.accumulate(slots, initial=0))[:-1])
        for r, (p, slots) in enumerate(zip(packs, metadata.slot_lengths))
    ]
    write_labels(
        out.numpy().reshape(-1),
        tokens.numpy().reshape(-1),
        [n for row in metadata.slot_lengths for n in row],
        [n for row in metadata.doc_lengths for n in row],
        masks,
    )
    return out


def _check_packs(cls: type[PackedTextBatch], packs: Sequence[PackedTextSample]) -> None:
    if len(packs) == 0:
        raise ValueError("collate_packs got no packs; a batch needs at least one")
    for p in packs:
        if not isinstance(p, PackedTextSample):
            raise ValueError(
                f"collate_packs: {getattr(p, '__key__', p)!r} is a {type(p).__name__}, not a "
                "pack; build packs with pack_documents (with energon: set packing_buffer_size)"
            )
    BATCH_TYPES.check(cls, packs, cls.pack_type)


def _row_length(packs: Sequence[PackedTextSample], pad_to: int | None, multiple: int | None) -> int:
    longest = max(p.length for p in packs)
    length = longest if pad_to is None else pad_to
    if length < longest:
        worst = max(packs, key=lambda p: p.length)
        raise ValueError(
            f"pack {worst.__key__!r} has {longest} tokens, more than pad_to={pad_to}; "
            "raise pad_to to the pack size"
        )
    if multiple is not None:
        if multiple < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {multiple}")
        length = -(-length // multiple) * multiple
    return length


def collate_packs(
    packs: Sequence[PackedTextSample],
    *,
    pad_to: int | None = None,
    pad_to_multiple_of: int | None = None,
    pad_token_id: int = 0,
) -> PackedTextBatch:
    """Collate packs into the batch type registered for their type (see ``BATCH_TYPES``).

    Text packs give a :class:`PackedTextBatch`, captioning packs a
    :class:`PackedCaptioningBatch`. Arguments as in :meth:`PackedTextBatch.from_packs`.
    """
    if len(packs) == 0:
        raise ValueError("collate_packs got no packs; a batch needs at least one")
    batch_type = BATCH_TYPES.lookup(type(packs[0])) or PackedTextBatch
    return batch_type.from_packs(
        packs, pad_to=pad_to, pad_to_multiple_of=pad_to_multiple_of, pad_token_id=pad_token_id
    )
