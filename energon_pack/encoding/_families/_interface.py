# SPDX-License-Identifier: Apache-2.0
"""The declared interface of a VLM family: what the packer needs from one processor family.

A family is one module holding one class that satisfies :class:`VisionFamily`, plus one line in
``_registry.FAMILIES``. It declares the exact transformers classes it serves
(:attr:`~VisionFamily.processors`, :attr:`~VisionFamily.image_processors`, fast and slow
variants), how an image becomes pixels and tokens (counted by the processor's own rule), the
pixel layout, the positions and any extra model inputs. See docs/howto/add-a-family.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

__all__ = ["StackedItems", "VisionFamily", "size_value", "transformers_class"]


def size_value(size: Any, name: str) -> int | None:
    """``size[name]`` of a processor's ``size`` dict (or ``SizeDict``), None where absent."""
    value = size.get(name) if isinstance(size, dict) else getattr(size, name, None)
    return None if value is None else int(value)


def transformers_class(obj: Any) -> str | None:
    """The class name the registry looks up for ``obj``: the first class of its MRO defined in
    transformers (a user's subclass is served as its transformers base), or the first one loaded
    as remote code (``transformers_modules``: never registered, so refused by its own name);
    None when neither is there."""
    for cls in type(obj).__mro__:
        top = cls.__module__.split(".")[0]
        if top in ("transformers", "transformers_modules"):
            return cls.__name__
    return None


@runtime_checkable
class VisionFamily(Protocol):
    """What every registered family declares (class attributes) and does (methods).

    ``vision_family(processor)`` builds one with :meth:`from_processor`; the encoders, light
    buffers and batches read only these names.
    """

    #: Short name in messages and analysis (``"qwen2-vl"``).
    name: ClassVar[str]
    #: The transformers processor classes served (exact names, ``"Gemma3Processor"``).
    processors: ClassVar[tuple[str, ...]]
    #: The transformers image processor classes served (fast and slow: ``"...ImageProcessor"``,
    #: ``"...ImageProcessorPil"``).
    image_processors: ClassVar[tuple[str, ...]]
    #: Whether the whole processor is needed (its token rule lives there), not the image
    #: processor alone.
    needs_processor: ClassVar[bool]
    #: The multimodal encoders' token arguments for this family's tokenizers.
    default_tokens: ClassVar[dict[str, str | None]]
    #: Text around each placeholder run, put in after the chat template (None: the
    #: placeholder goes into the messages).
    text_layout: ClassVar[str | None]
    #: What the processor's chat template writes for one ``{"type": "image"}`` (or
    #: ``"video"``) item, the text its processor then expands, over the encoder's tokens:
    #: ``"{start}{token}{end}"`` (Qwen2-VL writes ``<|vision_start|><|image_pad|><|vision_end|>``),
    #: ``"{start}"`` (Gemma 3 writes ``<start_of_image>``), ``"{token}"`` (LLaVA's ``<image>``,
    #: the default where a family does not declare it). The multimodal encoders render typed
    #: content through the processor's own template and replace each of these by the family's
    #: placeholder; a template that writes another count of them for a conversation is refused.
    chat_media: ClassVar[str]
    #: ``token_type_ids`` the model reads: ``"image_tokens"`` (1 on them), ``"suffix"`` (1 on
    #: the answer); None: none.
    token_types: ClassVar[str | None]
    #: Documents are one prompt and one answer laid out as a prefix-LM processor does.
    prefix_lm: ClassVar[bool]
    #: The model's MoE layers read ``moe_mm_token_type_ids`` (1 on image tokens and the vision
    #: start/end around them), which each document then carries (Ernie-4.5-VL).
    moe_token_types: ClassVar[bool]
    #: Videos go through this family.
    videos: ClassVar[bool]
    #: The model takes mRoPE positions.
    mrope: ClassVar[bool]
    #: Their rule (``attention.MROPE_LAYOUTS``): ``"qwen"`` (3 rows: temporal, height, width;
    #: text after an image resumes past its largest position) or ``"xdrope"`` (HunYuan-VL: 4
    #: rows: the 1-D position, then width, height and image index inside each image's grid).
    mrope_layout: ClassVar[str]
    #: The model reads each image's original ``image_sizes``.
    image_sizes: ClassVar[bool]
    #: A document's images are laid out together (the model reads ``batch_num_images``).
    per_document: ClassVar[bool]
    #: The Megatron VLM micro-batch layout its batches take (a key of
    #: ``samples.MEGATRON_VLM_LAYOUTS``: ``"mrope_patch_rows"``), or None: ``megatron_batch``
    #: refuses its batches naming it. Declared by every family in its own class body (never
    #: inherited: a family built on another's pixels may not fit its Megatron layout); its
    #: documents carry it (``MediaFamily``).
    megatron_layout: ClassVar[str | None]

    #: The transformers image processor this family runs.
    image_processor: Any
    #: Spatial merge, patch side and temporal patch (1 where there are no patch grids).
    merge_size: int
    patch_size: int
    temporal_patch_size: int

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> VisionFamily:
        """The family of ``processor`` (the whole one, or ``image_processor`` itself)."""
        ...

    @property
    def item_shape(self) -> tuple[int, ...]:
        """Shape of one pixel item (row, tile, patch or image)."""
        ...

    @property
    def can_plan(self) -> bool:
        """Whether grids follow from image sizes alone (light buffers)."""
        ...

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Placeholder tokens per image of one document, by the processor's rule."""
        ...

    def timestamps_videos(self, video_processor: Any) -> bool:
        """Whether this video processor lays each temporal patch out as its own timestamped
        group (``video_timestamps``)."""
        ...

    def grids(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """The grids of one document's images of these ``(width, height)`` sizes."""
        ...

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        """``(pixel_values, grid)`` of one document's PIL images through the processor."""
        ...

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """The grid of one ``width x height`` image (needs :attr:`can_plan`)."""
        ...


class StackedItems:
    """Base of the families whose pixels are stacked items (tiles, images, patches): 1-D
    positions, no videos, ``(items, 1, 1)`` grid rows, ``items * tokens_per_item`` tokens.
    A subclass sets the class attributes of :class:`VisionFamily` it changes and its rule."""

    processors: ClassVar[tuple[str, ...]] = ()
    image_processors: ClassVar[tuple[str, ...]] = ()
    needs_processor: ClassVar[bool] = True
    text_layout: ClassVar[str | None] = None
    chat_media: ClassVar[str] = "{token}"
    token_types: ClassVar[str | None] = None
    prefix_lm: ClassVar[bool] = False
    moe_token_types: ClassVar[bool] = False
    videos: ClassVar[bool] = False
    mrope: ClassVar[bool] = False
    mrope_layout: ClassVar[str] = "qwen"
    image_sizes: ClassVar[bool] = False
    per_document: ClassVar[bool] = False
    can_plan = True
    merge_size = patch_size = temporal_patch_size = 1  # no patch grids

    def __init__(self, image_processor: Any, tokens_per_item: int, item_shape: tuple) -> None:
        self.image_processor = image_processor
        self.tokens_per_tile = int(tokens_per_item)
        self.item_shape = tuple(item_shape)

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """``items * tokens_per_tile`` per image."""
        return (grid.view(-1, 3)[:, 0] * self.tokens_per_tile).tolist()

    def grids(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """The grids of one document's images of these ``(width, height)`` sizes."""
        return [self.plan(w, h) for w, h in sizes]

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1, 1, 1)``: one item per image (subclasses with tiles override)."""
        return 1, 1, 1

    def timestamps_videos(self, video_processor: Any) -> bool:
        """No videos here: False."""
        return False
