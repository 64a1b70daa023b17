# SPDX-License-Identifier: Apache-2.0
"""Size-weighted blends (issue 33): a metadataset's ``blend:`` weights hold in tokens over an
epoch-sized run (the sample-weighted blend's skew beside it), a save/restore mid-run gives the
uninterrupted stream, and a changed weight or blend size is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blend_helpers import PACK, blend_encoder, blend_loader, take, take_tokens
from megatron.energon import TextSample

from energon_pack.energon import ResumeConfigError, blend_index
from energon_pack.samples import PackingCounts
from energon_pack.testing import assert_restore_sample_reproduces, assert_same_item
from energon_pack_tools import (
    LengthTextEncoder,
    make_blend_metadataset,
    make_short_long_blend,
    make_text_dataset,
    trained_shares,
)

#: The short documents need a larger packing buffer to fill packs; these runs measure shares.
pytestmark = pytest.mark.filterwarnings("ignore::energon_pack.encoding.SmallPackingBufferWarning")

#: Tokens of an epoch-sized run: the long dataset's (100 documents of 300..1500 tokens, ~90k
#: tokens) once, as many short ones, and a margin.
EPOCH_TOKENS = 200_000


def _loader(meta: Path, size: Any = "tokens", encoder: Any = None) -> Any:
    return blend_loader(meta, blend_encoder(size, encoder=encoder))


class CharCountEncoder(LengthTextEncoder):
    """Sizes a raw sample by the length field it carries (its text), without encoding it."""

    def blend_sample_size(self, raw_sample: TextSample) -> int:
        return int(raw_sample.text)


def test_a_one_to_one_blend_trains_half_the_tokens_on_each_dataset(short_long_blend: Path) -> None:
    weighted = trained_shares(take_tokens(_loader(short_long_blend), EPOCH_TOKENS))
    stock = trained_shares(take_tokens(_loader(short_long_blend, None), EPOCH_TOKENS // 4))
    # In tokens 1:1 within 1% (of all tokens), although short documents are ~28x more numerous.
    assert abs(weighted.token_share(0) - 0.5) < 0.01, weighted
    assert weighted.document_share(0) > 0.9, weighted
    # Sample-weighted: 1:1 in documents, so the long dataset takes almost every token.
    assert abs(stock.document_share(0) - 0.5) < 0.1, stock
    assert stock.token_share(0) < 0.1, stock
    assert weighted.documents[1] >= 100  # an epoch of the long dataset


def test_an_overridden_hook_weighs_unequal_weights_in_its_size(tmp_path: Path) -> None:
    meta = make_short_long_blend(tmp_path, weights=(3.0, 1.0))
    encoder = CharCountEncoder(pack_size=PACK, overlong="split")
    shares = trained_shares(take_tokens(_loader(meta, None, encoder), EPOCH_TOKENS // 2))
    assert abs(shares.token_share(0) - 0.75) < 0.01, shares


def test_save_restore_mid_run_gives_the_uninterrupted_stream(short_long_blend: Path) -> None:
    """Saved at several points (before a pack, in the first buffer, mid-run), restored in a
    fresh loader: the uninterrupted stream (every field, restore keys, counts); each pack is
    rebuilt by ``restore_sample``."""
    n = 16
    reference = take(_loader(short_long_blend), n)
    for save_after in (1, 6, 11):
        first = _loader(short_long_blend)
        it = iter(first)
        consumed = [next(it) for _ in range(save_after)]
        state = first.save_state_rank()
        next(it)  # the saved loader goes on: its state is a copy
        resumed = _loader(short_long_blend)
        resumed.restore_state_rank(state)
        stream = consumed + take(resumed, n - save_after)
        for i, (a, b) in enumerate(zip(reference, stream, strict=True)):
            assert_same_item(a, b, what=f"save after {save_after}: item {i}")
    assert_restore_sample_reproduces(lambda: _loader(short_long_blend), reference[::4])


def test_a_changed_weight_or_size_is_refused_by_name(
    short_long_blend: Path, tmp_path: Path
) -> None:
    first = _loader(short_long_blend)
    take(first, 3)
    state = first.save_state_rank()
    datasets = [short_long_blend.parent / "short", short_long_blend.parent / "long"]
    heavier = make_blend_metadataset(tmp_path / "b.yaml", list(zip(datasets, (1.0, 2.0))))
    with pytest.raises(ResumeConfigError, match=r"dataset\.1\.weight: 0\.5 -> 0\.666"):
        _loader(heavier).restore_state_rank(state)
    with pytest.raises(ResumeConfigError, match=r"blend_size: tokens -> \(absent\)"):
        _loader(short_long_blend, None).restore_state_rank(state)


def test_blend_epochized_is_refused_with_the_fix(tmp_path: Path) -> None:
    paths = [make_text_dataset(tmp_path / n, ["5", "9"]) for n in ("a", "b")]
    meta = tmp_path / "epochized.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    blend_epochized:\n"
        + "".join(f"      - repetitions: 1\n        path: {p}\n" for p in paths)
    )
    with pytest.raises(ValueError, match="write the blend as `blend:`"):
        _loader(meta)


def test_a_bad_size_names_the_sample(short_long_blend: Path) -> None:
    loader = _loader(short_long_blend, lambda raw: -1)
    with pytest.raises(Exception, match=r"blend_sample_size\('.*'\) returned -1"):
        take(loader, 1)


BENCHMARK = Path(__file__).parents[1] / "benchmarks" / "blend_shares.py"

#: At 2 workers, in a subprocess (a dropped multi-worker loader stalls the next gc): save after
#: 7 packs, restore, and compare with the uninterrupted run (the saved loader's own next 9);
#: one short_long_blend, then packing groups.
TWO_WORKER_RESUME = """
import itertools, sys
from pathlib import Path
from energon_pack.task_encoders import PackingPolicy
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader
from energon_pack_tools import LengthTextEncoder, make_short_long_blend

GROUPS = {"chat": PackingPolicy(buffer_size=64), "docs": PackingPolicy(buffer_size=4)}

def loader(meta, groups):
    encoder = LengthTextEncoder(pack_size=2048, overlong="split")
    encoder.blend_size = "tokens"
    encoder.packing_groups = GROUPS if groups else None
    return make_loader(meta, encoder, packing_buffer_size=32, repeat=True, num_workers=2)

for groups in (False, True):
    root = Path(sys.argv[1]) / str(groups)
    meta = make_short_long_blend(root, groups=("chat", "docs") if groups else None)
    first = loader(meta, groups)
    it = iter(first)
    reference = [next(it) for _ in range(7)]
    state = first.save_state_rank()
    reference += [next(it) for _ in range(9)]  # the saved loader goes on: its state is a copy
    consumed = reference[:7]
    resumed = loader(meta, groups)
    resumed.restore_state_rank(state)
    stream = consumed + list(itertools.islice(iter(resumed), 9))
    for i, (a, b) in enumerate(zip(reference, stream, strict=True)):
        assert_same_item(a, b, what=f"groups={groups}: item {i}")
    print(f"RESUMED-EQUAL groups={groups}")
"""


def _run(args: list[str]) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow  # 2 workers, in subprocesses
def test_two_workers_hold_the_weights_and_resume_exactly(tmp_path: Path) -> None:
    """At 2 workers the token-weighted blend (and the blend of packing groups) holds 1:1 in
    tokens within 1% over 150k tokens, and a save/restore gives the uninterrupted stream."""
    table = _run([str(BENCHMARK), "--workers", "2", "--tokens", "150000"])
    lines = [[c.strip() for c in r.split("|")] for r in table.splitlines() if r.startswith("|")]
    column = lines[0].index("token error")
    errors = {r[1]: float(r[column].strip("%")) / 100 for r in lines if r[2] == "2"}
    assert abs(errors["tokens"]) < 0.01 and abs(errors["samples"]) > 0.3, table
    assert abs(errors["tokens, groups"]) < 0.01, table
    resumed = _run(["-c", TWO_WORKER_RESUME, str(tmp_path)])
    assert "RESUMED-EQUAL groups=False" in resumed and "RESUMED-EQUAL groups=True" in resumed


def test_the_counts_report_each_datasets_tokens_documents_and_loss_tokens(
    short_long_blend: Path,
) -> None:
    """``PackingCounts.dataset_*`` (from each member's restore key) agree with the shares read
    from the packs' document lengths, under both blends."""
    for size in (None, "tokens"):
        packs = take_tokens(_loader(short_long_blend, size), 40_000)
        counts = PackingCounts.total(p.counts for p in packs)
        shares = trained_shares(packs)
        assert counts.dataset_tokens == shares.tokens
        assert counts.dataset_documents == shares.documents
        # LengthTextEncoder: every token is a target but each document's last
        assert counts.dataset_loss_tokens == tuple(
            t - d for t, d in zip(shares.tokens, shares.documents)
        )
        assert counts.dataset_shares()[0] == pytest.approx(shares.token_share(0))


def test_per_dataset_counts_add_and_subtract_by_dataset() -> None:
    a = PackingCounts(packs=1, dataset_tokens=(5, 2), dataset_documents=(1, 1))
    b = PackingCounts(packs=1, dataset_tokens=(3,), dataset_documents=(1,))
    assert (a + b).dataset_tokens == (8, 2) and (a + b).packs == 2
    assert (a - a) == PackingCounts()  # no trailing zeros: all zeros is the empty tuple
    assert (a - PackingCounts(dataset_tokens=(0, 2))).dataset_tokens == (5,)
    assert a.dataset_shares() == (5 / 7, 2 / 7) and PackingCounts().dataset_shares() == ()


def test_blend_index_reads_the_blend_place_from_a_restore_key() -> None:
    key = ("MapDataset", 7, "SizeBlendDataset", 1, "Webdataset", 40)
    assert blend_index(key) == 1
    assert blend_index(("MapDataset", 3, ("BlendDataset", 0, "Webdataset", 2))) == 0
    assert blend_index(("MapDataset", 3, "Webdataset", 2)) is None


@pytest.mark.slow  # two ranks' loaders
def test_each_of_two_ranks_holds_the_weights_with_packing_groups(
    short_long_blend: Path, tmp_path: Path
) -> None:
    """energon gives each rank its own slice and each rank's loader its own blend state: both
    ranks of a world of 2 train 1:1 in tokens with packing groups (docs/howto/blends.md). One
    buffer on 2 ranks runs in the real torchrun launch of tests/distributed/test_multi_rank.py
    (per rank and summed, at 0 and 2 workers, with save_state_global)."""
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    from energon_pack.task_encoders import PackingPolicy

    datasets = [(short_long_blend.parent / "short", 1.0), (short_long_blend.parent / "long", 1.0)]
    grouped = make_blend_metadataset(tmp_path / "groups.yaml", datasets, ["chat", "docs"])
    policies = {"chat": PackingPolicy(buffer_size=128), "docs": PackingPolicy(buffer_size=4)}
    for rank in (0, 1):
        encoder = blend_encoder(groups=policies)
        dataset = get_train_dataset(
            str(grouped),
            worker_config=WorkerConfig(rank=rank, world_size=2, num_workers=0),
            batch_size=None,
            packing_buffer_size=32,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=encoder,
            repeat=True,
        )
        packs = take_tokens(get_savable_loader(dataset), EPOCH_TOKENS // 2)
        shares = trained_shares(packs)
        assert abs(shares.token_share(0) - 0.5) < 0.01, (rank, shares)
        assert PackingCounts.total(p.counts for p in packs).dataset_tokens == shares.tokens
