# SPDX-License-Identifier: Apache-2.0
"""Media for the multimodal encoders: images and video frames through a VLM processor, and
placeholder tokens expanded to the exact count the vision tower produces.

:class:`MediaProcessor` returns pixel rows and grids (through ``FastPixels`` where it is
bit-identical); :func:`expand_placeholders` replaces each placeholder token with that many
copies (no loss on them) and records the spans. One 64x48 image, grid ``(1, 4, 4)``, merge 2::

    ids   <s> <user> <img> what ?      ->   <s> <user> <img> <img> <img> <img> what ?
    spans                                    [[2, 6]]

Videos without a transformers video processor go frame by frame through the image processor
into the video processor's patch layout. Docs: docs/howto/light-media.md, docs/howto/vqa.md.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from energon_pack.encoding._families import (
    PatchGrids,
    check_mrope,
    video_families,
    vision_family,
)
from energon_pack.encoding._pixels import FastPixels, PendingPixels, to_rgb
from energon_pack.samples import RowSource

__all__ = [
    "MediaProcessor",
    "ProcessedMedia",
    "media_of",
    "expand_placeholders",
    "to_pil_image",
    "video_frames",
]


def to_pil_image(image: Any, *, key: str) -> Any:
    """``image`` (encoded bytes, PIL image, or ``(C, H, W)`` tensor) as an RGB PIL image,
    converted as the processor converts it (``to_rgb``: any PIL mode,
    transparency onto white)."""
    from PIL import Image

    if isinstance(image, (bytes, bytearray, memoryview)):
        try:
            pil = Image.open(io.BytesIO(bytes(image)))
            pil.load()
        except Exception as e:
            raise ValueError(
                f"sample {key!r}: the image bytes cannot be decoded ({type(e).__name__}: {e}); "
                "re-encode or remove this image from the dataset."
            ) from e
        return to_rgb(pil)
    if isinstance(image, Image.Image):
        return to_rgb(image)
    if isinstance(image, torch.Tensor) and image.dim() == 3:
        if image.is_floating_point():
            image = (image * 255).round().clamp(0, 255)
        array = image.to(torch.uint8).permute(1, 2, 0).cpu().numpy()
        return to_rgb(Image.fromarray(array if array.shape[2] != 1 else array[:, :, 0]))
    raise ValueError(
        f"sample {key!r}: unsupported image {type(image).__name__}; expected encoded bytes, "
        "a PIL image or a (C, H, W) tensor."
    )


def video_frames(video: Any, *, key: str) -> tuple[list[Any], float | None]:
    """``(frames, fps or None)`` of a video as a sample holds it.

    A list of frames (images in any form :func:`to_pil_image` takes): as is, fps unknown. A
    ``(T, C, H, W)`` tensor: its T frames. Encoded video bytes (what a webdataset read without
    a decoder gives) or energon's ``AVDecoder`` (its default decoder's): every frame, decoded by
    energon (``AVDecoder.get_video()``, needs ``pip install megatron-energon[av_decode]``), at
    the video's own fps; sample the frames when writing the dataset. A 3-frame 2 fps clip ->
    ``([frame0, frame1, frame2], 2.0)``.
    """
    from megatron.energon.av import AVDecoder

    if isinstance(video, (list, tuple)):
        return list(video), None
    if isinstance(video, torch.Tensor) and video.dim() == 4:
        return list(video.unbind(0)), None
    if isinstance(video, (bytes, bytearray, memoryview)):
        video = AVDecoder(io.BytesIO(bytes(video)))  # ImportError without PyAV: stops the run
    if not isinstance(video, AVDecoder):
        raise ValueError(
            f"sample {key!r}: unsupported video {type(video).__name__}; expected a list of "
            "frames, a (T, C, H, W) tensor, encoded video bytes or energon's AVDecoder."
        )
    try:
        clips = video.get_video().video_clips
        fps = float(video.get_video_fps())
    except Exception as e:
        raise ValueError(
            f"sample {key!r}: the video cannot be decoded ({type(e).__name__}: {e})."
        ) from e
    if not clips or clips[0].shape[0] == 0:
        raise ValueError(f"sample {key!r}: the video has no frames.")
    return list(clips[0].unbind(0)), fps


@dataclass(frozen=True)
class ProcessedMedia:
    """Pixel rows and patch grids of some images, or of some videos."""

    #: (rows, patch_dim) float32; rows = sum of t*h*w over the items (rows not written yet,
    #: ``PendingPixels``, from ``MediaProcessor.images(..., pending=True)``).
    pixel_values: torch.Tensor | RowSource
    #: (items, 3) int64 (t, h, w) patch grid per item, before the spatial merge.
    grid_thw: torch.Tensor
    #: Placeholder tokens per item: t*h*w // merge**2.
    num_tokens: list[int]
    #: Per item, the token ids its placeholder becomes, where the family lays out more than
    #: ``num_tokens`` copies of it (Idefics3's tile markers); None: the copies.
    expansions: list[list[int]] | None = None
    #: (items, 2) int64 original (height, width) per image, for families whose model reads
    #: them (LLaVA-NeXT, -OneVision); None for the others.
    sizes: torch.Tensor | None = None


class MediaProcessor:
    """Images and videos through the processor of a registered family
    (:func:`~energon_pack.encoding.vision_family`), and optionally a video processor.

    ``MediaProcessor(make_image_processor()).images([pil])`` -> pixel rows ``(16, 1176)``, grid
    ``[[1, 4, 4]]``, ``num_tokens == [4]`` for a 64x48 image.
    """

    def __init__(self, image_processor: Any, video_processor: Any = None) -> None:
        #: How this processor's family makes pixels, grids and token counts.
        self.family = vision_family(image_processor)
        #: The transformers image processor (of the processor, when given a whole one).
        self.image_processor = self.family.image_processor
        #: A transformers video processor, or None: frames go through the image processor.
        self.video_processor = video_processor
        self.merge_size = self.family.merge_size
        self.patch_size = self.family.patch_size
        self.temporal_patch_size = self.family.temporal_patch_size
        #: Writes image rows in place, bit-identical to the processor (None: the processor's).
        self.fast = (
            FastPixels.for_processor(self.image_processor)
            if isinstance(self.family, PatchGrids)
            else None
        )

    def check_mrope(self, mrope: bool) -> None:
        """Raise ValueError when ``mrope=True`` is asked of a family with 1-D positions."""
        check_mrope(self.family, mrope)

    @property
    def patch_dim(self) -> int:
        """Floats per pixel row: ``3 * temporal_patch_size * patch_size**2`` (1176)."""
        return int(math.prod(self.family.item_shape))

    def tokens(self, grid_thw: torch.Tensor) -> list[int]:
        """Placeholder tokens per grid row (``t * h * w // merge**2`` for patch grids)."""
        return self.family.tokens(grid_thw)

    def empty(self) -> ProcessedMedia:
        """No items: ``(0, *item_shape)`` pixels and a ``(0, 3)`` grid."""
        pixels = torch.zeros(0, *self.family.item_shape)
        return media_of(self.family, pixels, torch.zeros(0, 3, dtype=torch.int64), [])

    def _result(self, pixel_values: Any, grid: Any, sizes: Any = ()) -> ProcessedMedia:
        pixels = torch.as_tensor(pixel_values).to(torch.float32)
        grid = torch.as_tensor(grid).to(torch.int64).reshape(-1, 3)
        return media_of(self.family, pixels, grid, sizes)

    def images(self, images: Sequence[Any], *, pending: bool = False) -> ProcessedMedia:
        """Process PIL images (in order); no images gives :meth:`empty`.

        With :attr:`fast`, the rows are its (the processor's, bit for bit); ``pending=True``
        then gives them as ``PendingPixels`` (resized, not written: a pack writes them into
        its own array, ``concat_rows``). Without it, the processor's tensor in both cases.
        """
        if not images:
            return self.empty()
        if self.fast is not None:
            rows = PendingPixels(self.fast, [self.fast.resize(im) for im in images])
            grid = rows.grid_thw
            return ProcessedMedia(rows if pending else rows.tensor(), grid, self.tokens(grid))
        return self._result(*self.family.process(images), [im.size for im in images])

    def videos(self, videos: Sequence[Sequence[Any]]) -> ProcessedMedia:
        """Process videos, each a list of PIL frames of one size (in order)."""
        if not videos:
            return self.empty()
        if not self.family.videos:
            raise ValueError(
                f"videos are not supported for the {self.family.name} processor family here "
                f"(registered families with videos: {', '.join(video_families())}); remove "
                "the videos or use a processor of one of those."
            )
        if self.video_processor is not None:
            out = self.video_processor(videos=[list(v) for v in videos], return_tensors="pt")
            return self._result(out["pixel_values_videos"], out["video_grid_thw"])
        parts = [self._frames(list(v)) for v in videos]
        return self._result(torch.cat([p for p, _ in parts]), [g for _, g in parts])

    def _frames(self, frames: list[Any]) -> tuple[torch.Tensor, list[int]]:
        """One video's rows from per-frame image processing, ``temporal_patch_size`` frames each."""
        if not frames:
            raise ValueError("a video needs at least one frame")
        if len({f.size for f in frames}) != 1:
            raise ValueError(f"video frames differ in size ({sorted({f.size for f in frames})})")
        step = self.temporal_patch_size
        frames = frames + [frames[-1]] * (-len(frames) % step)  # as the video processor pads
        out = self.image_processor(images=frames, return_tensors="pt")
        grid = torch.as_tensor(out["image_grid_thw"]).reshape(-1, 3)
        _, gh, gw = (int(x) for x in grid[0])
        pp = self.patch_size**2
        # per frame: (gh*gw, C, T, p*p) with the frame repeated T times; keep one copy
        rows = torch.as_tensor(out["pixel_values"]).to(torch.float32)
        per_frame = rows.view(len(frames), gh * gw, 3, step, pp)[:, :, :, 0]
        gt = len(frames) // step
        video = per_frame.view(gt, step, gh * gw, 3, pp).permute(0, 2, 3, 1, 4)
        return video.reshape(gt * gh * gw, 3 * step * pp), [gt, gh, gw]


def media_of(family: Any, pixels: Any, grid: torch.Tensor, sizes: Sequence[Any]) -> ProcessedMedia:
    """Pixels (or a row map) and grids of one document's images of these ``(width, height)``
    sizes, with the family's tokens, token layout (Idefics3) and sizes (LLaVA) of them."""
    expand = getattr(family, "expansion", None)
    return ProcessedMedia(
        pixels,
        grid,
        family.tokens(grid, sizes),
        None if expand is None else [expand(w, h) for w, h in sizes],
        torch.tensor([(h, w) for w, h in sizes], dtype=torch.int64).view(-1, 2)
        if family.image_sizes
        else None,
    )


def expand_placeholders(
    tokens: Sequence[int],
    loss_mask: Sequence[bool],
    counts: Mapping[int, Sequence[int | Sequence[int]]],
    *,
    key: str,
) -> tuple[list[int], list[bool], dict[int, list[tuple[int, int]]]]:
    """Replace the i-th occurrence of each placeholder id by ``counts[id][i]`` copies (or, for
    a list, by those token ids: a family's layout with markers, its span then the whole list,
    markers included, so that no cut splits them from the image).

    Returns the new tokens, the loss mask (``False`` on every inserted token) and, per
    placeholder id, the ``[start, end)`` span of each item. ``([2, 4, 9], [F, F, T], {4: [3]})``
    -> ``[2, 4, 4, 4, 9]``, ``[F, F, F, F, T]``, ``{4: [(1, 4)]}``.

    Raises:
        ValueError: naming ``key`` when the number of placeholders of an id differs from the
            number of items (a tag the template dropped, or a stray placeholder in the text).
    """
    found = {tid: sum(1 for t in tokens if t == tid) for tid in counts}
    for tid, items in counts.items():
        if found[tid] != len(items):
            raise ValueError(
                f"sample {key!r}: {found[tid]} placeholder token(s) id {tid} in the rendered "
                f"text but {len(items)} media item(s); give one tag per image/video."
            )
    out_tokens: list[int] = []
    out_mask: list[bool] = []
    spans: dict[int, list[tuple[int, int]]] = {tid: [] for tid in counts}
    seen = dict.fromkeys(counts, 0)
    for t, m in zip(tokens, loss_mask):
        if t in counts:
            item = counts[t][seen[t]]
            seen[t] += 1
            ids = [t] * item if isinstance(item, int) else list(item)
            spans[t].append((len(out_tokens), len(out_tokens) + len(ids)))
            out_tokens.extend(ids)
            out_mask.extend([False] * len(ids))
        else:
            out_tokens.append(t)
            out_mask.append(bool(m))
    return out_tokens, out_mask, spans
