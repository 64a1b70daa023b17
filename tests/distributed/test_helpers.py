# SPDX-License-Identifier: Apache-2.0
"""``energon_pack.testing._distributed`` without a launch: item records and error paths."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from energon_pack.samples import collate_packs, pack_documents
from energon_pack.testing import TorchrunError, item_record, run_torchrun, write_rank_result
from energon_pack.testing._distributed import item_digest, read_rank_results
from energon_pack_tools import make_document

doc = make_document


def test_digest_sees_every_field_but_the_restore_key() -> None:
    pack = pack_documents([doc("a", [2, 7, 3]), doc("b", [2, 9, 3])], alignment=2)
    same = pack_documents([doc("a", [2, 7, 3]), doc("b", [2, 9, 3])], alignment=2)
    assert item_digest(pack) == item_digest(same)
    # energon renumbers restore keys of interrupted generators on resume: not compared
    moved = dataclasses.replace(pack, __restore_key__=("Webdataset", 1))
    assert item_digest(moved) == item_digest(pack)
    mask = pack.loss_mask.clone()
    mask[1] = False  # the first document's first target
    assert item_digest(dataclasses.replace(pack, loss_mask=mask)) != item_digest(pack)
    assert item_digest(dataclasses.replace(pack, doc_lengths=[3, 2])) != item_digest(pack)
    # same values, other dtype: a different item
    wide = dataclasses.replace(pack, tokens=pack.tokens.to(torch.int32))
    assert item_digest(wide) != item_digest(pack)


def test_digest_descends_into_the_batch_metadata() -> None:
    batch = collate_packs([pack_documents([doc("a", [2, 7, 3])])], pad_to=4096)
    cu = batch.metadata.cu_seqlens.clone()
    cu[-1] = 4
    meta = dataclasses.replace(batch.metadata, cu_seqlens=cu)
    assert item_digest(dataclasses.replace(batch, metadata=meta)) != item_digest(batch)
    # the per-token fields a reader computed are derived, not part of the item
    computed = collate_packs([pack_documents([doc("a", [2, 7, 3])])], pad_to=4096)
    assert computed.position_ids[0, 2048] == 2048
    assert item_digest(computed) == item_digest(batch)


def test_item_record_of_a_pack_and_of_a_batch() -> None:
    packs = [
        pack_documents([doc("a", [2, 7, 3]), doc("b", [2, 9, 9, 3])], alignment=2),
        pack_documents([doc("c", [2, 5, 3])], alignment=2),
    ]
    assert item_record(packs[0])["keys"] == [["a", "b"]]
    batch = collate_packs(packs, pad_to=8)
    record = item_record(batch)
    # slots: a 3 -> 4, b 4; c 3 -> 4 plus the row's tail padding 4 -> 8
    assert record["keys"] == [["a", "b"], ["c"]]
    assert record["cu_seqlens"] == [0, 3, 7, 10]
    assert record["cu_seqlens_padded"] == [0, 4, 8, 16]
    assert record["doc_lengths_padded"] == [[4, 4], [4]] and record["length"] == 8


def test_results_round_trip_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    write_rank_result({"rank": 0, "keys": ["a"]}, tmp_path)
    assert read_rank_results(tmp_path, 1) == [{"keys": ["a"], "rank": 0}]
    with pytest.raises(TorchrunError, match="rank 1 wrote no result"):
        read_rank_results(tmp_path, 2)
    with pytest.raises(ValueError, match="does not exist"):
        run_torchrun(tmp_path / "missing.py", out_dir=tmp_path / "out")
    with pytest.raises(ValueError, match="nproc_per_node=0"):
        run_torchrun(Path(__file__), nproc_per_node=0, out_dir=tmp_path / "out")
