# SPDX-License-Identifier: Apache-2.0
"""Everything energon-pack does inside megatron-energon, in one place: the packing datasets the
encoders insert in ``build_batch`` (carry-over, restorable post-encode), the wrappers that make a
resume exact, seeded stateless hooks, the size-weighted blend (``_size_blend``), per-group
packing pipelines (``_grouped_build``), skip counting,
read errors that name the damaged shard (``_shard_errors``) and the version check. Verified with
megatron-energon 7.4.1 (``_version.VERIFIED_ENERGON``); an energon upgrade is checked here.
What each workaround avoids: docs/concepts/energon.md.
"""

from energon_pack.energon._build_hooks import (
    FatalOverlongSampleError,
    building_datasets,
    rebuilding,
    restoring_item,
)
from energon_pack.energon._carry_over_dataset import build_carry_over_dataset
from energon_pack.energon._grouped_build import (
    GROUP_SUBFLAVOR,
    PackingGroupError,
    build_grouped_train_datasets,
    group_of,
    leaf_groups,
)
from energon_pack.energon._postencode_dataset import build_postencode_packing_dataset
from energon_pack.energon._resume_guards import (
    ResumeConfigError,
    encode_map_dataset,
    guard_reader,
    resumable,
)
from energon_pack.energon._shard_errors import DamagedShardError, install_shard_errors
from energon_pack.energon._size_blend import SizeBlendDataset, blend_index, size_blending
from energon_pack.energon._stateless import SeedSource, seeded_stateless
from energon_pack.energon._version import check_energon_version

__all__ = [
    "blend_index",
    "build_carry_over_dataset",
    "build_grouped_train_datasets",
    "build_postencode_packing_dataset",
    "building_datasets",
    "check_energon_version",
    "DamagedShardError",
    "encode_map_dataset",
    "FatalOverlongSampleError",
    "GROUP_SUBFLAVOR",
    "group_of",
    "guard_reader",
    "leaf_groups",
    "PackingGroupError",
    "rebuilding",
    "restoring_item",
    "resumable",
    "ResumeConfigError",
    "seeded_stateless",
    "SeedSource",
    "SizeBlendDataset",
    "size_blending",
]

#: energon's tar reader names the shard (and the fix) when one is damaged.
install_shard_errors()
