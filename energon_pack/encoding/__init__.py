# SPDX-License-Identifier: Apache-2.0
"""What the task encoders build documents from: tokenization, the over-long policy, packing
statistics and the small-buffer warning, and media (processor families, exact placeholder counts,
light buffers that plan from image headers, pixels written in place). Nothing here is an energon
``TaskEncoder``; energon's own hooks are in :mod:`energon_pack.energon`.
"""

from energon_pack.encoding._buffer_size import SmallPackingBufferWarning, warn_if_buffer_too_small
from energon_pack.encoding._chat_template import processor_bos
from energon_pack.encoding._families import (
    PatchGrids,
    VisionFamily,
    family_for,
    transformers_class,
    vision_family,
)
from energon_pack.encoding._light_media import (
    check_planned,
    high_bit_depth_modes,
    kept_items,
    resolve_light_media,
)
from energon_pack.encoding._media_processor import (
    MediaProcessor,
    ProcessedMedia,
    expand_placeholders,
    media_of,
    to_pil_image,
    video_frames,
)
from energon_pack.encoding._overlong_policy import apply_overlong_policy
from energon_pack.encoding._processors import (
    images_only_class,
    load_processor,
    processor_classes_of,
)
from energon_pack.encoding._remote_code import refuse_remote_code
from energon_pack.encoding._stats import PackingStats
from energon_pack.encoding._tokenization import DocumentTokenizer, load_tokenizer, masked_document
from energon_pack.encoding._video_layout import TimestampedVideos, VideoTiming

__all__ = [
    "apply_overlong_policy",
    "check_planned",
    "DocumentTokenizer",
    "expand_placeholders",
    "media_of",
    "family_for",
    "high_bit_depth_modes",
    "images_only_class",
    "kept_items",
    "load_processor",
    "load_tokenizer",
    "masked_document",
    "MediaProcessor",
    "PackingStats",
    "PatchGrids",
    "processor_bos",
    "ProcessedMedia",
    "processor_classes_of",
    "refuse_remote_code",
    "resolve_light_media",
    "SmallPackingBufferWarning",
    "TimestampedVideos",
    "transformers_class",
    "to_pil_image",
    "video_frames",
    "VideoTiming",
    "VisionFamily",
    "vision_family",
    "warn_if_buffer_too_small",
]
