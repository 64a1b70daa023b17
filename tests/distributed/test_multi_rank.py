# SPDX-License-Identifier: Apache-2.0
"""Multi-rank contracts on real torchrun launches (gloo, CPU): coverage, resume, CP alignment.

Two launches of ``rank_worker.py`` serve every test here (each costs ~20 s on 2 cores):

* 2 ranks, data parallel, ``num_workers`` 0 and 2, one pack per loader item; the same launch
  also trains a token-weighted 1:1 blend of short and long documents (issue 33) over an
  epoch-sized run, saving with ``save_state_global`` mid-run and resuming fresh loaders;
* 4 ranks = 2 data-parallel x 2 context-parallel, batches of 2 packs, documents aligned to
  ``2 * CP = 4``; the loader's ``WorkerConfig`` uses a data-parallel process group.

Every rank records each item's member keys and a digest of all its fields; the tests compare.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from energon_pack.testing import run_torchrun
from energon_pack_tools import (
    WORDS,
    make_short_long_blend,
    make_text_dataset,
    make_tokenizer,
    sample_key,
    synthetic_texts,
)

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("rank_worker.py")
#: 96 documents of 1..30 words: with BOS and EOD at most 32 tokens, so at pack size 32 nothing
#: is truncated or split and every source key must appear in exactly one pack.
NUM_SAMPLES = 96
SAVE_AFTER = 3
#: The blend: packs until they hold this many tokens on each rank (both: 256k, over an epoch
#: of the long dataset's ~90k tokens at 1:1, and a margin); saved after BLEND_SAVE_AFTER packs.
BLEND_TOKENS = 128_000
BLEND_SAVE_AFTER = 80
BLEND_WORKERS = "0,2"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dist")
    texts = synthetic_texts(NUM_SAMPLES, seed=3, min_words=1, max_words=30)
    return {
        "tokenizer": make_tokenizer(root / "tok", [*texts, " ".join(WORDS)]),
        # 12 shards of 8: energon slices the samples between ranks, then between workers
        "dataset": make_text_dataset(root / "ds", texts, samples_per_shard=8),
        # 400 documents of 4..64 tokens and 100 of 300..1500, weight 1:1
        "blend": make_short_long_blend(root / "blend"),
    }


def launch(data: dict[str, Path], out: Path, nproc: int, *args: str) -> list[dict[str, Any]]:
    common = ["--dataset", str(data["dataset"]), "--tokenizer", str(data["tokenizer"])]
    return run_torchrun(
        WORKER,
        [*common, "--save-after", str(SAVE_AFTER), *args],
        nproc_per_node=nproc,
        out_dir=out,
    )


@pytest.fixture(scope="module")
def two_ranks(data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return launch(
        data, tmp_path_factory.mktemp("out2"), 2, "--num-workers", "0,2",
        "--blend", str(data["blend"]), "--blend-workers", BLEND_WORKERS,
        "--blend-tokens", str(BLEND_TOKENS), "--blend-save-after", str(BLEND_SAVE_AFTER),
    )  # fmt: skip


@pytest.fixture(scope="module")
def dp2_cp2(data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return launch(
        data, tmp_path_factory.mktemp("out4"), 4, "--num-workers", "0", "--cp", "2",
        "--batch-size", "2",
    )  # fmt: skip


def keys_of(records: list[dict[str, Any]]) -> list[str]:
    return [k for r in records for row in r["keys"] for k in row]


def assert_resumed_identically(result: dict[str, Any], num_workers: str) -> None:
    run = result["runs"][num_workers]
    reference, resumed = run["reference"], run["resumed"]
    assert run["save_after"] == SAVE_AFTER and len(resumed) > 0
    # every remaining item: same member keys and the same digest of all its fields
    assert resumed == reference[SAVE_AFTER:], (
        f"rank {result['rank']} (num_workers={num_workers}) diverged after resume"
    )


@pytest.mark.parametrize("num_workers", ["0", "2"])
def test_two_ranks_cover_the_dataset_once_disjointly(
    two_ranks: list[dict], num_workers: str
) -> None:
    per_rank = [keys_of(r["runs"][num_workers]["reference"]) for r in two_ranks]
    counts = Counter(itertools.chain(*per_rank))
    assert sorted(counts) == [sample_key(i) for i in range(NUM_SAMPLES)]
    assert set(counts.values()) == {1}, "a document was packed on both ranks or twice"
    # energon gives each rank a contiguous slice of NUM_SAMPLES / world_size = 48 samples
    assert set(per_rank[0]) == {sample_key(i) for i in range(48)}
    assert set(per_rank[1]) == {sample_key(i) for i in range(48, 96)}


def test_rank_shards_do_not_depend_on_num_workers(two_ranks: list[dict]) -> None:
    for result in two_ranks:
        runs = result["runs"]
        assert set(keys_of(runs["0"]["reference"])) == set(keys_of(runs["2"]["reference"]))


@pytest.mark.parametrize("num_workers", ["0", "2"])
def test_two_ranks_resume_identically(two_ranks: list[dict], num_workers: str) -> None:
    for result in two_ranks:
        assert_resumed_identically(result, num_workers)


def test_context_parallel_peers_get_identical_batches(dp2_cp2: list[dict]) -> None:
    assert [(r["dp_rank"], r["cp_rank"]) for r in dp2_cp2] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for dp_rank in (0, 1):
        a, b = dp2_cp2[2 * dp_rank], dp2_cp2[2 * dp_rank + 1]
        assert a["runs"]["0"] == b["runs"]["0"], f"CP peers of DP rank {dp_rank} differ"


def test_data_parallel_groups_cover_the_dataset_once(dp2_cp2: list[dict]) -> None:
    for cp_rank in (0, 1):
        ranks = [r for r in dp2_cp2 if r["cp_rank"] == cp_rank]
        counts = Counter(k for r in ranks for k in keys_of(r["runs"]["0"]["reference"]))
        assert sorted(counts) == [sample_key(i) for i in range(NUM_SAMPLES)]
        assert set(counts.values()) == {1}


def test_data_parallel_groups_resume_identically(dp2_cp2: list[dict]) -> None:
    for result in dp2_cp2:
        assert_resumed_identically(result, "0")


def test_context_parallel_alignment_in_batches(dp2_cp2: list[dict]) -> None:
    """Slots are multiples of 2 * CP = 4; cu_seqlens real, cu_seqlens_padded the slots."""
    alignment = 4
    batches = [b for r in dp2_cp2 for b in r["runs"]["0"]["reference"]]
    assert all(r["alignment"] == alignment for r in dp2_cp2)
    padded_somewhere = False
    for b in batches:
        real = [n for row in b["doc_lengths"] for n in row]
        padded = [n for row in b["doc_lengths_padded"] for n in row]
        assert all(p % alignment == 0 and 0 <= p - n < alignment for n, p in zip(real, padded))
        padded_somewhere |= real != padded
        cu, cu_padded = b["cu_seqlens"], b["cu_seqlens_padded"]
        assert cu == list(itertools.accumulate(real, initial=0))
        slots = [y - x for x, y in zip(cu_padded, cu_padded[1:])]
        assert all(s % alignment == 0 for s in slots) and all(s >= n for s, n in zip(slots, real))
        assert cu_padded[-1] == len(b["keys"]) * b["length"]  # rows * L (tail joins last slot)
    assert padded_somewhere  # the data really needed alignment padding


@pytest.mark.parametrize("num_workers", BLEND_WORKERS.split(","))
def test_two_ranks_train_a_token_weighted_blend_at_its_weights(
    two_ranks: list[dict], num_workers: str
) -> None:
    """Summed over both ranks (and on each), the 1:1 blend trains 1:1 in tokens within 1% over
    an epoch-sized run, while the short dataset has most documents (sample-weighted it would get
    ~3% of the tokens: docs/howto/blends.md); each rank's counts agree with its packs."""
    runs = [r["blend"][num_workers] for r in two_ranks]
    tokens = [sum(run["tokens"][i] for run in runs) for i in (0, 1)]
    documents = [sum(run["documents"][i] for run in runs) for i in (0, 1)]
    assert all(sum(run["tokens"]) >= BLEND_TOKENS for run in runs)
    assert abs(tokens[0] / sum(tokens) - 0.5) < 0.01, tokens
    # each rank's loader has its own blend state: each holds the weights too
    assert all(abs(run["tokens"][0] / sum(run["tokens"]) - 0.5) < 0.01 for run in runs), [
        run["tokens"] for run in runs
    ]
    assert documents[0] / sum(documents) > 0.9, documents
    assert documents[1] >= 100, documents  # an epoch of the long dataset
    assert all(run["dataset_tokens"] == run["tokens"] for run in runs)
    # the ranks read disjoint slices: their packs differ
    assert runs[0]["reference"][0]["keys"] != runs[1]["reference"][0]["keys"]


@pytest.mark.parametrize("num_workers", BLEND_WORKERS.split(","))
def test_two_ranks_resume_a_token_weighted_blend_identically(
    two_ranks: list[dict], num_workers: str
) -> None:
    """``save_state_global`` after BLEND_SAVE_AFTER packs, ``restore_state_global`` on fresh
    loaders: every rank continues with the uninterrupted run's packs (keys and all fields)."""
    for result in two_ranks:
        run = result["blend"][num_workers]
        assert run["save_after"] == BLEND_SAVE_AFTER and len(run["reference"]) >= 10
        assert run["resumed"] == run["reference"], (
            f"rank {result['rank']} (num_workers={num_workers}) left the blend's stream"
        )
