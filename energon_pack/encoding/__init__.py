# SPDX-License-Identifier: Apache-2.0
"""Support the task encoders share: seeded stateless hooks, tokenization, the over-long
policy applied to documents, packing statistics, the small-buffer check, and media (images
and video frames through a processor, placeholder tokens expanded to exact counts).

Nothing here is an energon ``TaskEncoder``; the encoders in :mod:`energon_pack.task_encoders` are
built from these pieces.
"""

from energon_pack.encoding._buffer_size import (
    SmallPackingBufferWarning,
    small_buffer_message,
    warn_if_buffer_too_small,
)
from energon_pack.encoding._families import (
    Images,
    PatchGrids,
    PrefixImages,
    SplitTiles,
    Tiles,
    check_mrope,
    vision_family,
)
from energon_pack.encoding._light_media import (
    MediaPlanner,
    check_planned,
    header_size,
    high_bit_depth_modes,
    kept_items,
    resolve_light_media,
    row_map,
)
from energon_pack.encoding._media import (
    MediaProcessor,
    ProcessedMedia,
    expand_placeholders,
    to_pil_image,
    video_frames,
)
from energon_pack.encoding._overlong import (
    apply_overlong_policy,
    slice_document,
)
from energon_pack.encoding._pixels import FastPixels, PendingPixels, to_rgb
from energon_pack.encoding._stats import PackingStats, logger
from energon_pack.encoding._tokenization import (
    DocumentTokenizer,
    load_tokenizer,
    masked_document,
)
from energon_pack.encoding._video_layout import (
    TimestampedVideos,
    VideoTiming,
    frame_timestamps,
)

__all__ = [
    "apply_overlong_policy",
    "check_mrope",
    "check_planned",
    "DocumentTokenizer",
    "expand_placeholders",
    "FastPixels",
    "frame_timestamps",
    "header_size",
    "high_bit_depth_modes",
    "Images",
    "kept_items",
    "load_tokenizer",
    "logger",
    "masked_document",
    "MediaPlanner",
    "MediaProcessor",
    "PackingStats",
    "PatchGrids",
    "PendingPixels",
    "PrefixImages",
    "ProcessedMedia",
    "resolve_light_media",
    "row_map",
    "slice_document",
    "small_buffer_message",
    "SmallPackingBufferWarning",
    "SplitTiles",
    "Tiles",
    "TimestampedVideos",
    "to_pil_image",
    "to_rgb",
    "video_frames",
    "VideoTiming",
    "vision_family",
    "warn_if_buffer_too_small",
]
