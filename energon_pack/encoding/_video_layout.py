# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL's video layout: a timestamp and its own vision start/end per temporal patch.

As ``Qwen3VLProcessor.replace_video_token`` does on text, :class:`TimestampedVideos` replaces
each video placeholder of the token ids with, per temporal patch, ``<{t:.1f} seconds>
<|vision_start|><|video_pad|><|vision_end|>`` (the pad expanded later by
:func:`~energon_pack.encoding.expand_placeholders`), no loss on any of them; ``t`` is
:func:`frame_timestamps`'. A 3-frame video at 1 fps, grid ``(2, 4, 2)``::

    <vs> <vid> <ve>  ->  <vs> <0.5 seconds> <vs> <vid> <ve> <2.0 seconds> <vs> <vid> <ve> <ve>
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["TimestampedVideos", "VideoTiming", "frame_timestamps"]


def frame_timestamps(num_frames: int, fps: float, temporal_patch_size: int = 2) -> list[float]:
    """Seconds of each temporal patch of ``num_frames`` frames sampled at ``fps``, as Qwen3-VL's
    processor computes them (``Qwen3VLProcessor._calculate_timestamps`` with frame indices
    ``0..num_frames-1``): the frame count is padded with the last index to a multiple of
    ``temporal_patch_size``, and each patch gets the mean of its first and last frame's time.

    ``frame_timestamps(3, 1.0)`` -> indices ``[0, 1, 2, 2]`` -> ``[0.5, 2.0]``.
    """
    indices = list(range(num_frames))
    indices += [num_frames - 1] * (-num_frames % temporal_patch_size)
    times = [i / fps for i in indices]
    step = temporal_patch_size
    return [(times[i] + times[i + step - 1]) / 2 for i in range(0, len(times), step)]


@dataclass(frozen=True)
class VideoTiming:
    """The timing of a sample's videos."""

    #: (num_videos,) float32 seconds per temporal patch (``temporal_patch_size / fps``).
    second_per_grid: torch.Tensor
    #: Frames of each video as given (before padding to the temporal patch).
    frames: list[int]
    #: Frames per second of each video.
    fps: list[float]


class TimestampedVideos:
    """Qwen3-VL's per-temporal-patch groups on token ids (see the module docstring).

    Args:
        encode_text: Token ids of a text without special tokens.
        pad, start, end: The video placeholder and the vision start/end token ids.
        temporal_patch_size, merge_size: The processor's.
    """

    def __init__(
        self,
        encode_text: Callable[[str], list[int]],
        *,
        pad: int,
        start: int,
        end: int,
        temporal_patch_size: int,
        merge_size: int,
    ) -> None:
        self.encode_text = encode_text
        self.pad, self.start, self.end = pad, start, end
        self.temporal_patch_size = temporal_patch_size
        self.merge_size = merge_size
        self._stamps: dict[str, list[int]] = {}

    def frame_tokens(self, grid_thw: torch.Tensor) -> list[int]:
        """Placeholder tokens of each temporal patch of each video, in order:
        ``[[2, 4, 2]]`` (merge 2) -> ``[2, 2]``."""
        m2 = self.merge_size**2
        return [h * w // m2 for t, h, w in grid_thw.view(-1, 3).tolist() for _ in range(t)]

    def expand(
        self,
        key: str,
        tokens: Sequence[int],
        loss_mask: Sequence[bool],
        grid_thw: torch.Tensor,
        timing: VideoTiming,
    ) -> tuple[list[int], list[bool]]:
        """Each video placeholder of ``tokens`` replaced by its groups (one pad per patch)."""
        grids = grid_thw.view(-1, 3).tolist()
        found = sum(1 for t in tokens if t == self.pad)
        if found != len(grids):
            raise ValueError(
                f"sample {key!r}: {found} video placeholder(s) in the rendered text but "
                f"{len(grids)} video(s); give one tag per video."
            )
        out_tokens: list[int] = []
        out_mask: list[bool] = []
        videos = iter(zip(grids, timing.frames, timing.fps))
        for t, m in zip(tokens, loss_mask):
            if t != self.pad:
                out_tokens.append(t)
                out_mask.append(m)
                continue
            (gt, _, _), frames, fps = next(videos)
            times = frame_timestamps(frames, fps, self.temporal_patch_size)
            if len(times) != gt:
                raise ValueError(
                    f"sample {key!r}: {frames} frames make {len(times)} temporal patches but the "
                    f"processed grid has {gt}; frames are taken as sampled (no resampling)."
                )
            for seconds in times:
                group = [*self._stamp(f"<{seconds:.1f} seconds>"), self.start, self.pad, self.end]
                out_tokens.extend(group)
                out_mask.extend([False] * len(group))
        return out_tokens, out_mask

    @staticmethod
    def join_spans(
        frame_spans: Sequence[tuple[int, int]], grid_thw: torch.Tensor
    ) -> list[tuple[int, int]]:
        """Per-patch spans joined per video, first to last: ``[(2, 4), (9, 11)]`` with grid
        ``[[2, 4, 2]]`` -> ``[(2, 11)]``."""
        out, i = [], 0
        for n in grid_thw.view(-1, 3)[:, 0].tolist():
            out.append((frame_spans[i][0], frame_spans[i + n - 1][1]))
            i += n
        return out

    def _stamp(self, text: str) -> list[int]:
        """Token ids of a timestamp text (cached: videos repeat the same few)."""
        if text not in self._stamps:
            self._stamps[text] = self.encode_text(text)
        return self._stamps[text]
