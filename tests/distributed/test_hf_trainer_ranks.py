# SPDX-License-Identifier: Apache-2.0
"""PackedTrainer on 2 data-parallel ranks (torchrun, gloo, CPU, DDP): num_items_in_batch is the
step's target count over both ranks, and each rank resumes with identical batches and losses."""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_pack.testing import run_torchrun
from energon_pack_tools import WORDS, make_text_dataset, make_tokenizer, synthetic_texts

pytestmark = pytest.mark.slow
pytest.importorskip("accelerate")

WORKER = Path(__file__).with_name("hf_trainer_worker.py")
STEPS, SAVE_AT, ACCUMULATION = 4, 2, 2


def test_two_ranks_count_targets_together_and_resume_identically(tmp_path: Path) -> None:
    texts = synthetic_texts(64, seed=5, min_words=1, max_words=40)
    args = [
        "--dataset", str(make_text_dataset(tmp_path / "ds", texts, samples_per_shard=8)),
        "--tokenizer", str(make_tokenizer(tmp_path / "tok", [*texts, " ".join(WORDS)])),
        "--steps", str(STEPS), "--save-at", str(SAVE_AT),
    ]  # fmt: skip
    results = run_torchrun(WORKER, args, nproc_per_node=2, out_dir=tmp_path / "out", timeout=400)
    assert [r["rank"] for r in results] == [0, 1]
    full = [r["full"] for r in results]
    assert full[0]["items"] != full[1]["items"]  # each rank reads its own share
    for step in range(STEPS):
        window = slice(step * ACCUMULATION, (step + 1) * ACCUMULATION)
        both = sum(sum(f["counts"][window]) for f in full)
        assert [f["num_items"][step] for f in full] == [both, both]
    done = SAVE_AT * ACCUMULATION
    for r in results:
        assert r["resumed"]["items"] == r["full"]["items"][done:], f"rank {r['rank']}"
        assert r["resumed"]["losses"] == r["full"]["losses"][done:], f"rank {r['rank']}"
