# SPDX-License-Identifier: Apache-2.0
"""Everything energon-pack does inside megatron-energon, in one place: the packing datasets the
encoders insert in ``build_batch`` (carry-over, restorable post-encode), the wrappers that make a
resume exact, seeded stateless hooks, skip counting and the version check. Verified with
megatron-energon 7.4.1 (:data:`VERIFIED_ENERGON`); an energon upgrade is checked here.
What each workaround avoids: docs/concepts/energon.md.
"""

from energon_pack.energon._build_hooks import (
    FatalOverlongSampleError,
    counting_skips,
    restoring_item,
    without_shard_print,
)
from energon_pack.energon._carry_over_dataset import (
    CarryOverPackingDataset,
    build_carry_over_dataset,
)
from energon_pack.energon._fingerprint import fingerprint
from energon_pack.energon._postencode_dataset import (
    PostencodePackingDataset,
    build_postencode_packing_dataset,
)
from energon_pack.energon._resume_guards import (
    EncodeMapDataset,
    ResumeClock,
    ResumeConfigError,
    ResumeGuard,
    SourceEndGuard,
)
from energon_pack.energon._stateless import SeedSource, seeded_stateless
from energon_pack.energon._version import VERIFIED_ENERGON, check_energon_version

__all__ = [
    "build_carry_over_dataset",
    "build_postencode_packing_dataset",
    "CarryOverPackingDataset",
    "check_energon_version",
    "counting_skips",
    "EncodeMapDataset",
    "FatalOverlongSampleError",
    "fingerprint",
    "PostencodePackingDataset",
    "restoring_item",
    "ResumeClock",
    "ResumeConfigError",
    "ResumeGuard",
    "seeded_stateless",
    "SeedSource",
    "SourceEndGuard",
    "VERIFIED_ENERGON",
    "without_shard_print",
]
