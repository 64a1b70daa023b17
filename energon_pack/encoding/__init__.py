# SPDX-License-Identifier: Apache-2.0
"""Support the task encoders share: seeded stateless hooks, tokenization, the over-long
policy applied to documents, packing statistics and the small-buffer check.

Nothing here is an energon ``TaskEncoder``; the encoders in :mod:`energon_pack.task_encoders` are
built from these pieces.
"""

from energon_pack.encoding._buffer_size import (
    SmallPackingBufferWarning,
    small_buffer_message,
    warn_if_buffer_too_small,
)
from energon_pack.encoding._overlong import (
    OverlongSampleError,
    apply_overlong_policy,
    slice_document,
)
from energon_pack.encoding._stateless import (
    SeedSource,
    current_seed_args,
    seeded_stateless,
)
from energon_pack.encoding._stats import (
    PackingStats,
    logger,
)
from energon_pack.encoding._tokenization import (
    DocumentTokenizer,
    load_tokenizer,
    masked_document,
)

__all__ = [
    "apply_overlong_policy",
    "current_seed_args",
    "DocumentTokenizer",
    "load_tokenizer",
    "logger",
    "masked_document",
    "OverlongSampleError",
    "PackingStats",
    "seeded_stateless",
    "SeedSource",
    "slice_document",
    "small_buffer_message",
    "SmallPackingBufferWarning",
    "warn_if_buffer_too_small",
]
