# SPDX-License-Identifier: Apache-2.0
"""Light media buffers: exact placeholder counts from image headers, pixels decoded later.

The packer needs each document's length only, and that depends on an image only through its
grid, which the processor computes from the image size (its ``smart_resize`` rule).
:class:`MediaPlanner` reads the size from the header, applies the processor's own rule (checked
against the processor on probe images) and returns the grid; a planned document holds a row map
(the image of each future pixel row), and the pixels are processed for the members of a
selected pack only. Example, patch 14, merge 2, a 640x480 JPEG: grid ``(1, 6, 8)``, 48 rows, 12
placeholder tokens. A header is not trusted alone: the planner refuses, naming the sample, an
image whose data holds less than its header promises (:func:`check_image_data`), which energon's
handler then skips and the stats count. Docs: docs/howto/light-media.md.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import torch

from energon_pack.encoding._families import PatchGrids, SplitTiles, Tiles, vision_family
from energon_pack.encoding._image_data import check_image_data
from energon_pack.encoding._media_processor import ProcessedMedia, media_of

__all__ = [
    "MediaPlanner",
    "check_planned",
    "header_size",
    "high_bit_depth_modes",
    "kept_items",
    "resolve_light_media",
    "row_map",
]

#: PIL modes with more than 8 bits per value: ``convert("RGB")`` clips them to 255.
HIGH_BIT_DEPTH_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N", "I", "F"})
#: Image sizes (width, height) the planner is checked on against the processor.
PROBE_SIZES: tuple[tuple[int, int], ...] = ((37, 53), (211, 29), (90, 90), (5, 7))


def _header(item: Any) -> tuple[tuple[int, int] | None, str | None]:
    """``((width, height), PIL mode)`` of an image without decoding its pixels (None: unknown).

    Encoded bytes: from the header (``Image.open`` reads it lazily); a PIL image: its own; a
    ``(C, H, W)`` tensor: its shape (no PIL mode)."""
    from PIL import Image

    if isinstance(item, (bytes, bytearray, memoryview)):
        try:
            with Image.open(io.BytesIO(bytes(item))) as im:
                return (int(im.size[0]), int(im.size[1])), im.mode
        except Exception:
            return None, None
    if isinstance(item, Image.Image):
        return (int(item.size[0]), int(item.size[1])), item.mode
    if isinstance(item, torch.Tensor) and item.dim() == 3:
        return (int(item.shape[2]), int(item.shape[1])), None
    return None, None


def header_size(item: Any) -> tuple[int, int] | None:
    """``(width, height)`` of an image without decoding its pixels, or None if unknown.

    Encoded bytes: from the header (``Image.open`` reads it lazily); a PIL image: ``.size``;
    a ``(C, H, W)`` tensor: its shape. ``header_size(random_png_bytes(64, 48)) == (64, 48)``.
    """
    return _header(item)[0]


def high_bit_depth_modes(items: Sequence[Any]) -> list[str]:
    """The PIL modes of ``items`` (read from headers) with more than 8 bits per value, one per
    such image: ``["I;16"]`` for a 16-bit grayscale PNG. The processors' ``convert_to_rgb``
    (PIL) clips them to 8 bits, so a 16-bit scan becomes nearly all white (255)."""
    modes = (_header(item)[1] for item in items)
    return [m for m in modes if m is not None and m in HIGH_BIT_DEPTH_MODES]


def row_map(grids: torch.Tensor) -> torch.Tensor:
    """``(rows, 1)`` int32: per pixel row, the index of its item. ``[[1,1,2],[1,1,1]]`` ->
    ``[[0], [0], [1]]``."""
    rows = grids.view(-1, 3).prod(dim=1)
    return torch.repeat_interleave(torch.arange(len(rows), dtype=torch.int32), rows).view(-1, 1)


def kept_items(rows: torch.Tensor) -> list[int]:
    """The item indices a (possibly cut) row map still holds, in order: ``[[0],[0],[2]]`` ->
    ``[0, 2]``."""
    return torch.unique_consecutive(rows.view(-1)).tolist()


class MediaPlanner:
    """The grid of an image or a frame sequence from its size, by the processor family's rule.

    Build it with :meth:`for_processor` (None where the rule is not known to be exact).
    ``MediaPlanner.for_processor(make_image_processor()).image_grid(64, 48) == (1, 4, 4)``.
    """

    def __init__(self, family: PatchGrids | Tiles | SplitTiles) -> None:
        #: The processor family whose rule this is (:func:`vision_family`).
        self.family = family
        self.image_processor = family.image_processor

    @classmethod
    def for_processor(cls, image_processor: Any) -> MediaPlanner | None:
        """A planner whose grids equal the processor's on the probe images, or None."""
        try:
            family = vision_family(image_processor)
            if not family.can_plan:
                return None
            planner = cls(family)
            return planner if planner._matches_processor() else None
        except Exception:
            return None

    def _matches_processor(self) -> bool:
        from PIL import Image

        # one document of all probe sizes, and (families that look at the count) one each
        groups = [PROBE_SIZES] + [[s] for s in PROBE_SIZES] * getattr(
            self.family, "per_document", 0
        )
        for sizes in groups:
            images = [Image.new("RGB", size, (120, 60, 30)) for size in sizes]
            grids = torch.as_tensor(self.family.process(images)[1]).view(-1, 3).tolist()
            if grids != [list(g) for g in self.family.grids(sizes)]:
                return False
        return True

    def image_grid(self, width: int, height: int) -> tuple[int, int, int]:
        """The grid of a ``width x height`` image: ``(1, h, w)`` patches, ``(tiles, 1, 1)``."""
        return self.family.plan(width, height)

    def video_grid(self, frames: int, width: int, height: int) -> tuple[int, int, int]:
        """``(t, h, w)`` of ``frames`` frames through the image processor (odd frame padded)."""
        _, gh, gw = self.image_grid(width, height)
        return math.ceil(frames / self.family.temporal_patch_size), gh, gw

    def images(self, items: Sequence[Any], *, key: str) -> ProcessedMedia | None:
        """Planned media of some images: a row map and their grids; None if a size is unknown."""
        sizes = [header_size(item) for item in items]
        if any(s is None for s in sizes):
            return None
        for item in items:  # a header that promises more than the data holds is refused
            check_image_data(item, key=key)
        grids = self._grid(key, self.family.grids, sizes)
        grid = torch.tensor(grids, dtype=torch.int64).view(-1, 3)
        return media_of(self.family, row_map(grid), grid, sizes)

    def videos(self, videos: Sequence[Sequence[Any]], *, key: str) -> ProcessedMedia | None:
        """Planned media of videos (frame lists); None if a frame size is unknown or the family
        takes no videos (the encoder then decodes, and says why)."""
        if videos and not self.family.videos:
            return None
        grids = []
        for frames in videos:
            sizes = {header_size(f) for f in frames}
            if not frames or None in sizes:
                return None
            if len(sizes) != 1:
                raise ValueError(f"sample {key!r}: video frames differ in size ({sorted(sizes)})")
            ((w, h),) = sizes
            for frame in frames:
                check_image_data(frame, key=key)
            grids.append(self._grid(key, self.video_grid, len(frames), w, h))
        return self._planned(grids)

    @staticmethod
    def _grid(key: str, compute: Any, *size: Any) -> Any:
        try:
            return compute(*size)
        except Exception as e:  # e.g. smart_resize's aspect-ratio limit, as the processor
            raise ValueError(
                f"sample {key!r}: the media processor failed ({type(e).__name__}: {e})."
            ) from e

    def _planned(self, grids: list[tuple[int, int, int]]) -> ProcessedMedia:
        grid = torch.tensor(grids, dtype=torch.int64).view(-1, 3)
        return ProcessedMedia(row_map(grid), grid, self.family.tokens(grid))


def check_planned(planned: torch.Tensor, actual: torch.Tensor, *, key: str) -> None:
    """Raise ValueError naming ``key`` when the processed grids differ from the planned ones."""
    if not torch.equal(planned.flatten(), actual.flatten()):
        raise ValueError(
            f"sample {key!r}: the processed media grids (or sizes) {actual.tolist()} differ "
            f"from the planned {planned.tolist()}: an augmentation changed the "
            "image size, which light media buffers cannot plan; keep augmentations "
            "size-preserving or pass light_media=False."
        )


def resolve_light_media(
    requested: bool | None,
    image_processor: Any,
    *,
    augmented: bool = False,
    name: str,
) -> MediaPlanner | None:
    """The planner an encoder uses for light buffers, or None for stock (decoded) buffers.

    ``requested=None`` (the default): light where it is exact (the processor's rule is known,
    no ``augment_*`` override that might change sizes); ``True``: the same but augmentations
    are trusted to keep sizes, and raise ValueError naming what else prevents it; ``False``:
    stock. Carry-over does not change the answer: the carry-over dataset materializes the
    members of emitted packs and carries planned documents.
    """
    if requested is False:
        return None
    planner = MediaPlanner.for_processor(image_processor)
    if planner is None:
        if requested:
            raise ValueError(
                f"{name}: light_media=True, but the size rule of "
                f"{type(image_processor).__name__} is not known to be exact (a Qwen2-VL-style "
                "smart_resize with do_resize=True is, and InternVL's tiles); pass "
                "light_media=False."
            )
        return None
    if augmented and requested is None:
        return None  # an augmentation may change sizes: light only when asked for
    return planner
