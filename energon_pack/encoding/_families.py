# SPDX-License-Identifier: Apache-2.0
"""VLM processor families: how a family's processor turns an image into pixels and tokens.

Per image the encoders, light buffers and media budgets need its pixel tensor, a ``(3,)`` grid
whose product is the number of pixel items (rows packs and cuts slice) and its placeholder
tokens; each family gives them from the processor, and from the image size alone where its rule
is known. :func:`vision_family` picks the family: patch grids (Qwen2/2.5/3-VL), tiles
(InternVL), images (Gemma 3, PaliGemma), split tiles (Idefics3, SmolVLM), anyres patches (LLaVA-NeXT,
-OneVision); any other processor is refused.
Layouts per family: docs/howto/conversations.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "Anyres",
    "Images",
    "PatchGrids",
    "PrefixImages",
    "SplitTiles",
    "Tiles",
    "check_mrope",
    "vision_family",
]


def _size_value(size: Any, name: str) -> int | None:
    value = size.get(name) if isinstance(size, dict) else getattr(size, name, None)
    return None if value is None else int(value)


class PatchGrids:
    """Qwen2-VL-style processors: patch rows, ``(t, h, w)`` grids, ``smart_resize`` sizes."""

    name = "qwen2-vl"
    #: The text around each placeholder run, put in after the chat template (None: the
    #: placeholder goes into the messages).
    text_layout: str | None = None
    #: The ``token_type_ids`` the model reads: ``"image_tokens"`` (1 on them, Gemma 3),
    #: ``"suffix"`` (1 on the answer, PaliGemma); None: none.
    token_types: str | None = None
    #: Documents are one prompt and one answer laid out as PaliGemma's processor does.
    prefix_lm = False
    #: Videos go through this family (frames, or a Qwen video processor).
    videos = True
    #: The model takes 3-row mRoPE positions.
    mrope = True
    #: The multimodal encoders' token arguments for this family's tokenizers.
    default_tokens = {
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_start_token": "<|vision_start|>",
        "vision_end_token": "<|vision_end|>",
    }

    def __init__(self, image_processor: Any) -> None:
        self.image_processor = image_processor
        p = image_processor
        self.merge_size = int(getattr(p, "merge_size", 2))
        self.patch_size = int(getattr(p, "patch_size", 14))
        self.temporal_patch_size = int(getattr(p, "temporal_patch_size", 2))
        #: ``smart_resize(height, width, factor, min_pixels, max_pixels)`` of its module, or None.
        self.rule = next(
            (
                getattr(sys.modules.get(c.__module__), "smart_resize", None)
                for c in type(p).__mro__
                if hasattr(sys.modules.get(c.__module__), "smart_resize")
            ),
            None,
        )
        size = getattr(p, "size", None) or {}
        self.min_pixels = _size_value(size, "shortest_edge")
        self.max_pixels = _size_value(size, "longest_edge")

    @property
    def item_shape(self) -> tuple[int, ...]:
        """One pixel row: ``(3 * temporal_patch_size * patch_size**2,)`` (1176)."""
        return (3 * self.temporal_patch_size * self.patch_size**2,)

    @property
    def can_plan(self) -> bool:
        """Whether grids follow from sizes (``smart_resize``, ``do_resize``, pixel bounds)."""
        known = self.min_pixels is not None and self.max_pixels is not None
        return (
            self.rule is not None and known and bool(getattr(self.image_processor, "do_resize", 0))
        )

    #: The model reads each image's original ``image_sizes`` (LLaVA-NeXT, -OneVision).
    image_sizes = False

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Placeholder tokens per grid row: ``t * h * w // merge**2``."""
        return (grid.view(-1, 3).prod(dim=1) // self.merge_size**2).tolist()

    def grids(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """The grids of one document's images of these ``(width, height)`` sizes."""
        return [self.plan(w, h) for w, h in sizes]

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        """``(pixel_values, grid)`` of PIL images through the processor."""
        out = self.image_processor(images=list(images), return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1, h, w)`` patch grid of a ``width x height`` image (needs :attr:`can_plan`)."""
        factor = self.patch_size * self.merge_size
        rh, rw = self.rule(  # type: ignore[misc]
            height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        return 1, rh // self.patch_size, rw // self.patch_size


class Tiles:
    """InternVL: each image cut into ``n`` square tiles (plus a thumbnail when ``n > 1``), each
    ``tokens_per_tile`` placeholder tokens; the model reads the stacked ``(tiles, 3, H, W)``
    pixel values and 1-D positions."""

    name = "internvl"
    videos = mrope = prefix_lm = False
    text_layout: str | None = None
    token_types: str | None = None
    default_tokens = {
        "image_token": "<IMG_CONTEXT>",
        "video_token": None,
        "vision_start_token": "<img>",
        "vision_end_token": "</img>",
    }
    can_plan = True
    image_sizes = False
    merge_size = patch_size = temporal_patch_size = 1  # no patch grids
    grids = PatchGrids.grids

    def __init__(self, image_processor: Any, tokens_per_tile: int) -> None:
        self.image_processor = image_processor
        self.tokens_per_tile = int(tokens_per_tile)
        size = image_processor.size
        self.item_shape = (3, _size_value(size, "height"), _size_value(size, "width"))

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """``tiles * tokens_per_tile`` per image."""
        return (grid.view(-1, 3)[:, 0] * self.tokens_per_tile).tolist()

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=list(images), return_tensors="pt")
        tiles = torch.as_tensor(out["num_patches"]).view(-1, 1)
        return out["pixel_values"], torch.cat([tiles, torch.ones_like(tiles).repeat(1, 2)], 1)

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(tiles, 1, 1)`` by the processor's own tile rule."""
        return int(self.image_processor.get_number_of_image_patches(height, width, {})), 1, 1


class Images(Tiles):
    """Gemma 3: one ``(3, S, S)`` image each, ``tokens_per_image`` soft tokens laid out as
    ``Gemma3Processor`` does (:attr:`text_layout`), ``token_type_ids`` 1 on them."""

    name = "gemma3"
    default_tokens = {
        "image_token": "<image_soft_token>",
        "video_token": None,
        "vision_start_token": "<start_of_image>",
        "vision_end_token": "<end_of_image>",
    }
    text_layout = "\n\n{}\n\n"
    token_types = "image_tokens"

    def __init__(self, image_processor: Any, tokens_per_image: int) -> None:
        if getattr(image_processor, "do_pan_and_scan", False):
            raise ValueError(
                f"{type(image_processor).__name__}: do_pan_and_scan=True is not supported (the "
                "number of crops and the text around them depend on each image); set "
                "do_pan_and_scan=False, Gemma3Processor's own default."
            )
        super().__init__(image_processor, tokens_per_image)

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=list(images), do_pan_and_scan=False, return_tensors="pt")
        return out["pixel_values"], torch.ones(len(images), 3, dtype=torch.int64)

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1, 1, 1)``: one resized image, whatever its size."""
        return 1, 1, 1


class PrefixImages(Images):
    """PaliGemma: ``image_seq_length`` ``<image>`` tokens per image, then BOS, the prompt and a
    newline (the bidirectional prefix, ``token_type_ids`` 0), then the answer and EOS (1)."""

    name = "paligemma"
    default_tokens = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": None,
        "vision_end_token": None,
    }
    text_layout = None
    token_types = "suffix"
    prefix_lm = True

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=list(images), return_tensors="pt")
        return out["pixel_values"], torch.ones(len(images), 3, dtype=torch.int64)


class SplitTiles(Tiles):
    """Idefics3: each image resized and split into ``rows x cols`` square tiles plus a global
    one (or the global one only), ``image_seq_len`` tokens a tile, laid out by the processor's
    own ``replace_image_token`` (``<fake_token_around_image><row_1_col_1><image>*n...``). Tiles
    are kept ``(tiles, 1, 3, S, S)``; batches give the model ``(1, tiles, 3, S, S)``."""

    name = "idefics3"
    default_tokens = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": None,
        "vision_end_token": None,
    }

    def __init__(self, processor: Any, name: str = "idefics3") -> None:
        self.name, self.processor = name, processor
        self.image_processor = processor.image_processor
        self.tokens_per_tile = int(processor.image_seq_len)
        side = _size_value(self.image_processor.max_image_size, "longest_edge")
        self.item_shape = (1, 3, side, side)

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=[list(images)], return_tensors="pt")
        if not bool(out["pixel_attention_mask"].all()):
            raise ValueError(
                f"{type(self.image_processor).__name__} padded some tiles (do_image_splitting="
                "False?); packs hold whole square tiles only: set do_image_splitting=True."
            )
        grid = torch.tensor([self.plan(*im.size) for im in images], dtype=torch.int64)
        return out["pixel_values"][0][:, None], grid

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        return int(self.image_processor.get_number_of_image_patches(height, width, {})[0]), 1, 1

    def expansion(self, width: int, height: int) -> list[int]:
        """The token ids one ``width x height`` image becomes (markers and ``<image>`` runs)."""
        _, rows, cols = self.image_processor.get_number_of_image_patches(height, width, {})
        text = self.processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)
        return list(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])


class Anyres(Tiles):
    """LLaVA-NeXT: each image as its resized base view plus the crop-size patches of its best
    pinpoint resolution, ``(patches, 3, S, S)``; its tokens by the processor's own rule
    (``replace_image_token``) from its size. LLaVA-OneVision (``per_document``): the images of
    a document with several are its base view only (padded square), ``num_image_tokens + 1``
    tokens each; the model reads ``batch_num_images`` to tell them apart."""

    name = "llava-next"
    image_sizes = True
    per_document = False
    default_tokens = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": None,
        "vision_end_token": None,
    }

    def __init__(self, processor: Any) -> None:
        from PIL import Image

        self.processor = processor
        ip = self.image_processor = processor.image_processor
        size, crop = ip.size, getattr(ip, "crop_size", None) or {}
        self.side = (  # the patch side, as the image processor's _preprocess picks it
            _size_value(crop, "height")
            or _size_value(size, "height")
            or _size_value(size, "shortest_edge")
        )
        probe = self._process([Image.new("RGB", (self.side, self.side))])["pixel_values"]
        self.item_shape = tuple(probe.shape[-3:])

    def _process(self, images: Sequence[Any]) -> Any:
        group = [list(images)] if self.per_document else list(images)
        return self.image_processor(images=group, return_tensors="pt")

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Per image of one document, the image tokens its processor puts in the text."""
        inputs = {
            "image_sizes": [[h, w] for w, h in sizes],
            "pixel_values": [[torch.empty(self.item_shape)]],
            "batch_num_images": [len(sizes)],
        }
        each = len(self.processor.image_token)
        return [
            len(self.processor.replace_image_token(inputs, i)) // each for i in range(len(sizes))
        ]

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        """The processor's ``(images, max_patches, 3, S, S)`` unpadded to rows per image."""
        pixels = self._process(images)["pixel_values"]
        grid = torch.tensor(self.grids([im.size for im in images]), dtype=torch.int64)
        if pixels.shape[1] != int(grid[:, 0].max()):  # the patch rule is not the processor's
            raise ValueError(f"{type(self.image_processor).__name__}: unexpected patch counts")
        return torch.cat([p[:n] for p, n in zip(pixels, grid[:, 0].tolist())]), grid

    def grids(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        if self.per_document and len(sizes) > 1:
            return [(1, 1, 1)] * len(sizes)
        return [self.plan(w, h) for w, h in sizes]

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1 + patches, 1, 1)``: the base view and the patches of the best resolution."""
        from transformers.image_processing_utils import select_best_resolution

        pinpoints = self.image_processor.image_grid_pinpoints
        h, w = select_best_resolution((height, width), pinpoints)
        return 1 + -(-h // self.side) * -(-w // self.side), 1, 1


class AnyresDocuments(Anyres):
    """LLaVA-OneVision (see :class:`Anyres`)."""

    name = "llava-onevision"
    per_document = True


def check_mrope(family: PatchGrids | Tiles, mrope: bool) -> None:
    """Raise ValueError when ``mrope=True`` is asked of a family whose model has 1-D positions."""
    if mrope and not family.mrope:
        raise ValueError(
            f"mrope=True, but {family.name} models take 1-D positions (restarting per "
            "document, as packs give them); pass mrope=False."
        )


def vision_family(processor: Any) -> PatchGrids | Tiles | SplitTiles:
    """The family of a transformers processor or image processor (see the module docstring).

    Raises:
        ValueError: a family packing cannot serve exactly yet (Gemma 3), or an unknown one.
    """
    # a processor, or what ``analyze`` loads from a directory: its image processor,
    # image_seq_length and processor_class
    name = getattr(processor, "processor_class", None) or type(processor).__name__
    image_processor = getattr(processor, "image_processor", processor)
    if name.startswith("PaliGemma"):
        return PrefixImages(image_processor, processor.image_seq_length)
    if type(image_processor).__name__.startswith("Gemma3"):
        seq = getattr(processor, "image_seq_length", None)
        if not isinstance(seq, int):
            raise ValueError(
                f"{name}: a Gemma 3 image processor alone does not say how many tokens an "
                "image is; pass the whole Gemma3Processor (AutoProcessor), whose "
                "image_seq_length is the model's mm_tokens_per_image."
            )
        return Images(image_processor, seq)
    if hasattr(image_processor, "merge_size"):
        return PatchGrids(image_processor)
    names = {c.__name__ for c in type(processor).__mro__} | {name}
    if names & {"LlavaNextProcessor", "LlavaOnevisionProcessor"}:
        return (AnyresDocuments if "LlavaOnevisionProcessor" in names else Anyres)(processor)
    if names & {"Idefics3Processor", "SmolVLMProcessor"}:
        return SplitTiles(processor, "smolvlm" if "SmolVLMProcessor" in names else "idefics3")
    if isinstance(getattr(processor, "image_seq_length", None), int) and hasattr(
        image_processor, "crop_to_patches"
    ):  # InternVLProcessor and its GotOcr2 image processor
        if not image_processor.crop_to_patches:
            image_processor = _with_crop(image_processor)
        return Tiles(image_processor, processor.image_seq_length)
    raise ValueError(
        f"{name}: not a supported VLM processor family; supported: Qwen2/2.5/3-VL image "
        "processors (patch grids), InternVL (tiles), Idefics3, SmolVLM (split tiles), Gemma 3 and "
        "PaliGemma processors (images), LLaVA-NeXT and LLaVA-OneVision (anyres). Pass the whole processor (AutoProcessor), not only its "
        "image processor, for all but Qwen-VL."
    )


def _with_crop(image_processor: Any) -> Any:
    """A copy of an InternVL image processor that crops to tiles, as InternVLProcessor asks."""
    import copy

    out = copy.copy(image_processor)
    out.crop_to_patches = True
    return out
