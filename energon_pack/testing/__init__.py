# SPDX-License-Identifier: Apache-2.0
"""Contract checks to run against your own encoder (each sample once, resume identical,
``restore_sample``), and a ``torchrun`` harness for multi-rank checks. Depends on the product,
never the reverse; toy data and models live in ``energon_pack_tools``.
"""

from energon_pack.testing._contracts import (
    assert_each_sample_once,
    assert_restore_sample_reproduces,
    assert_resume_identical,
    assert_same_item,
    member_keys,
)
from energon_pack.testing._distributed import (
    TorchrunError,
    init_torchrun_process_group,
    item_record,
    run_torchrun,
    write_rank_result,
)

__all__ = [
    "assert_each_sample_once",
    "assert_restore_sample_reproduces",
    "assert_resume_identical",
    "assert_same_item",
    "init_torchrun_process_group",
    "item_record",
    "member_keys",
    "run_torchrun",
    "TorchrunError",
    "write_rank_result",
]
