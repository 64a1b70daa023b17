# SPDX-License-Identifier: Apache-2.0
"""Crash + resume == the uninterrupted run (issue 22): at every save point late in a
``repeat=False`` epoch (energon bug 5 replayed the whole share there), with restore keys equal
to the uninterrupted run's (bug 4) and summed counts equal (no re-encoding counted twice); a
changed configuration is refused; and a consumer killed with SIGKILL (mid-save too) resumes
exactly (tests/benchmarks/crash_resume.py, one trial)."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from energon_pack.algorithms import CarryOver
from energon_pack.energon import ResumeConfigError
from energon_pack.samples import PackingCounts
from energon_pack.task_encoders import CaptioningPackingTaskEncoder
from energon_pack.testing import assert_same_item, member_keys
from energon_pack.training import make_loader
from energon_pack_tools import LengthTextEncoder, make_text_dataset

BENCHMARK = Path(__file__).parents[1] / "benchmarks" / "crash_resume.py"


@pytest.fixture(scope="module")
def lengths_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 documents of 1..90 tokens: with pack size 64 about one in three is split."""
    rng = random.Random(11)
    texts = [str(rng.choice([rng.randint(1, 30), rng.randint(1, 90)])) for _ in range(90)]
    return make_text_dataset(tmp_path_factory.mktemp("lengths") / "ds", texts)


def _loader(
    path: Path, carry: bool, pack_size: int = 64, accept: frozenset[str] = frozenset()
) -> Any:
    encoder = LengthTextEncoder(
        pack_size=pack_size, overlong="split", carry_over=CarryOver() if carry else None
    )
    encoder.resume_accept_changes = accept
    return make_loader(
        path, encoder, packing_buffer_size=6, shuffle_buffer_size=8, batch_size=2, seed_offset=3
    )


def _check_every_save(make: Callable[[], Any], late: int) -> list[Any]:
    """Save after 1, half and each of the last ``late`` items, restore in a fresh loader: the
    items kept are the uninterrupted run's (every field, restore keys exactly), and so are the
    summed counts; the next loop over the restored loader is a whole new epoch."""
    reference = list(make())
    total = PackingCounts.total(b.counts for b in reference)
    n = len(reference)
    for save_after in sorted({1, n // 2, *range(max(1, n - late), n + 1)}):
        first = make()
        it = iter(first)
        consumed = [next(it) for _ in range(save_after)]
        state = first.save_state_rank()
        resumed_loader = make()
        resumed_loader.restore_state_rank(state)
        resumed = list(resumed_loader)
        assert len(consumed) + len(resumed) == n, f"save after {save_after}: replayed or lost"
        for i, (a, b) in enumerate(zip(reference, consumed + resumed)):
            assert_same_item(a, b, what=f"save after {save_after}: item {i}")
        summed = PackingCounts.total(b.counts for b in consumed + resumed)
        assert summed == total, f"save after {save_after}: counts {summed} != {total}"
        again = [k for b in resumed_loader for k in member_keys(b)]
        assert sorted(again) == sorted(k for b in reference for k in member_keys(b))
    return reference


@pytest.mark.slow  # a resume from every save
@pytest.mark.parametrize("carry", [True, False], ids=["carry_over", "stock"])
def test_every_late_save_resumes_to_the_uninterrupted_run(lengths_dataset: Path, carry) -> None:
    reference = _check_every_save(lambda: _loader(lengths_dataset, carry), late=6)
    total = PackingCounts.total(b.counts for b in reference)
    assert total.samples == 90 and total.split_overlong > 0  # splits: a save can interrupt one


@pytest.mark.slow  # a resume from every save
def test_a_blend_with_repetitions_resumes_at_every_save(tmp_path: Path) -> None:
    """A metadataset blend (``repetitions: 2`` wraps a reader in a finite ``RepeatDataset``,
    which, like ``BlendDataset``, resets itself at its end): no replay at late saves."""
    rng = random.Random(2)
    paths = [
        make_text_dataset(tmp_path / name, [str(rng.randint(1, 80)) for _ in range(n)])
        for name, n in (("a", 30), ("b", 20))
    ]
    meta = tmp_path / "blend.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    blend_epochized:\n"
        f"      - repetitions: 1\n        path: {paths[0]}\n"
        f"      - repetitions: 2\n        path: {paths[1]}\n"
    )

    def make() -> Any:
        encoder = LengthTextEncoder(pack_size=64, overlong="split", carry_over=CarryOver())
        return make_loader(
            meta, encoder, packing_buffer_size=6, shuffle_buffer_size=4, batch_size=2
        )

    reference = _check_every_save(make, late=5)
    assert PackingCounts.total(b.counts for b in reference).samples == 30 + 2 * 20


@pytest.mark.slow
@pytest.mark.parametrize(
    ("light", "carry"), [(True, True), (False, False)], ids=["light-carry", "stock-no_carry"]
)
def test_captioning_resumes_at_every_save(
    captioning_dataset, tokenizer_dir, image_processor, light: bool, carry: bool
) -> None:
    def make() -> Any:
        encoder = CaptioningPackingTaskEncoder(
            tokenizer_dir,
            image_processor,
            pack_size=48,
            light_media=light,
            carry_over=CarryOver() if carry else None,
        )
        assert encoder.light_media is light
        return make_loader(
            captioning_dataset.path, encoder, packing_buffer_size=4, shuffle_buffer_size=4
        )

    reference = _check_every_save(make, late=6)
    assert PackingCounts.total(b.counts for b in reference).skipped == 1  # the corrupt image


def test_a_save_after_the_epoch_restores_to_its_end(lengths_dataset: Path) -> None:
    """The first loop after the restore is the rest of the saved epoch: nothing."""
    loader = _loader(lengths_dataset, carry=True)
    everything = list(loader)
    state = loader.save_state_rank()
    restored = _loader(lengths_dataset, carry=True)
    restored.restore_state_rank(state)
    assert list(restored) == []
    assert len(list(restored)) == len(everything)


def test_a_changed_configuration_is_refused(lengths_dataset: Path) -> None:
    loader = _loader(lengths_dataset, carry=True)
    it = iter(loader)
    next(it)
    state = loader.save_state_rank()
    changed = _loader(lengths_dataset, carry=True, pack_size=48)
    with pytest.raises(ResumeConfigError, match="packing.pack_size: 64 -> 48") as error:
        changed.restore_state_rank(state)
    assert "resume_accept_changes = {'packing.pack_size'}" in str(error.value)
    no_carry = _loader(lengths_dataset, carry=False)
    with pytest.raises(ResumeConfigError, match=r"packing.carry_over: CarryOver -> None"):
        no_carry.restore_state_rank(state)
    # accepted on purpose: the state restores and the packs are the new configuration's
    accepted = _loader(lengths_dataset, True, pack_size=48, accept=frozenset({"packing"}))
    accepted.restore_state_rank(state)
    assert {len(row) for b in accepted for row in b.tokens} == {48}


def _close(loader: Any) -> None:
    """Stop a multi-worker loader's workers now (gc would wait ~5 s per worker)."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()


@pytest.mark.slow
def test_a_restore_skipping_to_the_end_of_a_share_replays_nothing(lengths_dataset: Path) -> None:
    """energon restores a worker from an older checkpoint and skips the items up to the save;
    when the skip reaches the end of the worker's share it starts the worker's dataset again.
    That state is what a save right after a worker's last item gives when the worker has not
    yet stored its final checkpoint (energon's default cadence checkpoints every 60 s)."""

    def make() -> Any:
        from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

        encoder = LengthTextEncoder(pack_size=64, overlong="split", carry_over=CarryOver())
        dataset = get_train_dataset(
            str(lengths_dataset),
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=1),
            batch_size=2,
            packing_buffer_size=6,
            shuffle_buffer_size=8,
            max_samples_per_sequence=None,
            task_encoder=encoder,
            repeat=False,
        )
        # checkpoints at the first two items only (and at the end of the share)
        return get_savable_loader(dataset, checkpoint_every_sec=1e9)

    loader = make()
    it = iter(loader)
    first = [next(it), next(it)]
    state = loader.save_state_rank()
    everything = first + list(it)
    _close(loader)
    checkpoint = state.worker_states[0]
    assert checkpoint.state.sample_index == 1 and checkpoint.offset == 1
    checkpoint.offset = len(everything) - 1  # the save after the last item, without its checkpoint
    restored = make()
    restored.restore_state_rank(state)
    assert list(restored) == []  # before: the whole share again
    again = list(restored)  # the next loop is a new epoch
    _close(restored)
    assert sorted(k for b in again for k in member_keys(b)) == sorted(
        k for b in everything for k in member_keys(b)
    )


@pytest.mark.slow
def test_a_placeholder_checkpoint_loses_no_item(lengths_dataset: Path) -> None:
    """energon bug 6: a save that reaches a worker before its first checkpoint stores the
    placeholder (no state, offset 1); the restored worker skipped its first item."""
    from megatron.energon.savable_loader import SavableDatasetCheckpoint

    def make() -> Any:
        encoder = LengthTextEncoder(pack_size=64, overlong="split", carry_over=CarryOver())
        return make_loader(
            lengths_dataset, encoder, num_workers=2, packing_buffer_size=6, batch_size=2
        )

    loader = make()
    it = iter(loader)
    next(it)  # worker 0's first batch
    state = loader.save_state_rank()
    reference = list(it)
    _close(loader)
    state.worker_states[1] = SavableDatasetCheckpoint(state=None, offset=1)  # the placeholder
    restored = make()
    restored.restore_state_rank(state)
    resumed = list(restored)
    _close(restored)
    assert len(resumed) == len(reference)  # before: one batch short
    for i, (a, b) in enumerate(zip(reference, resumed)):
        assert_same_item(a, b, what=f"item {i}")


@pytest.mark.slow
def test_sigkill_at_random_points_and_mid_save(tmp_path: Path) -> None:
    """One crash trial at 2 workers with carry-over: killed after a save, in the middle of a
    save and late in the epoch, restarted each time from the last state."""
    spec = importlib.util.spec_from_file_location("crash_resume", BENCHMARK)
    assert spec is not None and spec.loader is not None
    crash = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crash)
    paths = [crash.make_dataset(tmp_path, seed=0)]
    config = {"workers": 2, "carry_over": True, "checkpoint": "every_sample", "save_every": 3}
    moments = [("after_save", 6), ("mid_save", 20), ("item", -3)]
    record = crash.run_trial(0, paths, tmp_path / "out", moments=moments, config=config)
    assert record["error"] is None, record["error"]
    assert record["lives"] == 4, record  # three kills landed, the fourth life finished
