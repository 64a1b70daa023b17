# SPDX-License-Identifier: Apache-2.0
"""energon dataset wrappers: the carry-over packing dataset that the task encoders insert in
``build_batch`` when ``carry_over=CarryOver(...)`` is set, and the wrappers that make a resume
exact (no replay at the end of an epoch, same restore keys, exact counts, configuration check).
"""

from energon_pack.wrappers._carry_over import (
    VERIFIED_ENERGON_VERSIONS,
    CarryOverPackingDataset,
    CarryOverPlanner,
    build_packing_dataset,
    check_energon_version,
)
from energon_pack.wrappers._fingerprint import fingerprint
from energon_pack.wrappers._postencode import (
    PostencodePackingDataset,
    build_postencode_packing_dataset,
)
from energon_pack.wrappers._resume import (
    EncodeMapDataset,
    ResumeClock,
    ResumeConfigError,
    ResumeGuard,
    SourceEndGuard,
)

__all__ = [
    "build_packing_dataset",
    "build_postencode_packing_dataset",
    "CarryOverPackingDataset",
    "EncodeMapDataset",
    "fingerprint",
    "CarryOverPlanner",
    "check_energon_version",
    "PostencodePackingDataset",
    "ResumeClock",
    "ResumeConfigError",
    "ResumeGuard",
    "SourceEndGuard",
    "VERIFIED_ENERGON_VERSIONS",
]
