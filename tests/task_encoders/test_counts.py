# SPDX-License-Identifier: Apache-2.0
"""Nothing silent: ``overlong="error"`` stops the run, skipped samples are counted by key, and
the counts every batch carries add up to a 0-worker run's totals at 2 workers (real loaders)."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from energon_pack.algorithms import OverlongSampleError
from energon_pack.encoding import PackingStats
from energon_pack.energon import FatalOverlongSampleError
from energon_pack.samples import PackingCounts
from energon_pack.task_encoders import CaptioningPackingTaskEncoder
from energon_pack.testing import assert_restore_sample_reproduces
from energon_pack.training import make_loader
from energon_pack_tools import (
    LengthTextEncoder,
    corrupt_png_bytes,
    make_text_dataset,
    prepare_dataset,
    random_png_bytes,
    synthetic_texts,
)
from energon_pack_tools._datasets import _write_shards
from energon_pack_tools.cli import main

#: The samples of the 500-sample captioning set that energon's handler must skip.
CORRUPT_IMAGE, BAD_UTF8 = "000123", "000321"


@pytest.fixture(scope="module")
def flawed_captioning(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """500 captioning samples (12..40 px images): one corrupt PNG, one caption not UTF-8."""
    rng = random.Random(3)
    captions = synthetic_texts(500, seed=4, min_words=1, max_words=12)
    samples = []
    for i, caption in enumerate(captions):
        png = random_png_bytes(rng.randint(12, 40), rng.randint(12, 40), seed=i)
        samples.append({"png": png, "txt": caption.encode()})
    samples[int(CORRUPT_IMAGE)]["png"] = corrupt_png_bytes()
    samples[int(BAD_UTF8)]["txt"] = b"caption \xff\xfe not utf-8"
    path = tmp_path_factory.mktemp("flawed") / "ds"
    _write_shards(path, samples, samples_per_shard=100)
    field_map = json.dumps({"image": "png", "caption": "txt"})
    return prepare_dataset(
        path, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "CaptioningSample",
        "--field-map", field_map,
    )  # fmt: skip


def _epoch(path: Path, encoder: Any, num_workers: int) -> list[Any]:
    loader = make_loader(
        path, encoder, num_workers=num_workers, packing_buffer_size=16, batch_size=4
    )
    return list(loader)


@pytest.mark.slow  # 2 workers
def test_skipped_samples_are_counted_by_key_and_totals_agree_across_workers(
    flawed_captioning: Path, tokenizer_dir: Path, image_processor: Any, capfd: Any
) -> None:
    encoder = CaptioningPackingTaskEncoder(tokenizer_dir, image_processor, pack_size=64)
    batches = _epoch(flawed_captioning, encoder, 0)
    skipped = dict(encoder.stats.skipped_samples)
    assert encoder.stats.skipped == 2 and set(skipped) == {CORRUPT_IMAGE, BAD_UTF8}
    assert "UnicodeDecodeError" in skipped[BAD_UTF8]
    keys = {k for b in batches for row in b.sample_keys for k in row}
    assert len(keys) == 498 and not keys & {CORRUPT_IMAGE, BAD_UTF8}
    zero = PackingCounts.total(b.counts for b in batches)
    assert zero == encoder.stats.counts()  # the batches carry everything this process counted
    assert zero.skipped == 2 and zero.packs == sum(len(b.sample_keys) for b in batches)

    # 2 workers: the main process's stats stay empty, the batches carry the workers' counts
    encoder2 = CaptioningPackingTaskEncoder(tokenizer_dir, image_processor, pack_size=64)
    capfd.readouterr()
    batches2 = _epoch(flawed_captioning, encoder2, 2)
    if sys.version_info >= (3, 11):  # energon's handler prints it in the worker, named and fixed
        assert (
            f"energon_pack: skipped sample '{BAD_UTF8}' (counted in stats.skipped): "
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 8: invalid "
            "start byte; a text field is not UTF-8: convert it (iconv -t utf-8)"
        ) in capfd.readouterr().err
    assert encoder2.stats.counts() == PackingCounts()
    two = PackingCounts.total(b.counts for b in batches2)
    assert two.packs == sum(len(b.sample_keys) for b in batches2)
    # every per-sample count is the same; each worker packs its own share, so packs may differ
    per_pack = {"packs", "pack_slots", "fill", "documents_per_pack"}
    same = [k for k in zero.as_dict() if k not in per_pack]
    assert {k: two.as_dict()[k] for k in same} == {k: zero.as_dict()[k] for k in same}
    assert (two.samples, two.documents, two.skipped) == (zero.samples, zero.documents, 2)
    assert (two.pack_tokens, two.pack_documents) == (zero.pack_tokens, zero.pack_documents)


def test_restore_sample_counts_nothing(text_dataset: Any, tokenizer_dir: Path) -> None:
    encoder = LengthTextEncoder(pack_size=64, overlong="split")
    path = make_text_dataset(
        Path(str(text_dataset.path) + "_lengths"), [str(n) for n in range(1, 60)]
    )

    def mk() -> Any:
        return make_loader(path, encoder, packing_buffer_size=8, batch_size=2)

    items = list(mk())
    assert all(b.counts.packs == len(b.sample_keys) for b in items)
    before = encoder.stats.counts()
    assert_restore_sample_reproduces(mk, items[:3])  # equal except counts (RUN_RECORD_FIELDS)
    restored = mk().restore_sample(items[0].__restore_key__)
    assert restored.counts == PackingCounts()
    assert encoder.stats.counts() == before


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_overlong_error_stops_the_run_with_one_message(tmp_path: Path, num_workers: int) -> None:
    path = make_text_dataset(tmp_path / "ds", [str(n) for n in [5, 9, 3, 7, 70, 12] * 8])
    encoder = LengthTextEncoder(pack_size=32, overlong="error")
    with pytest.raises(OverlongSampleError) as info:
        _epoch(path, encoder, num_workers)
    assert isinstance(info.value, FatalOverlongSampleError)
    last = str(info.value).strip().splitlines()[-1]
    assert "has 70 tokens > pack_size=32" in last
    assert "'truncate', 'split' or 'drop'" in last
    if num_workers == 0:  # without torch's worker wrapping: exactly one line
        assert str(info.value).count("\n") == 0


@pytest.mark.slow  # two analyze runs; skip counts stay fast in test_captioning
def test_analyze_reports_skipped_samples_by_key(tmp_path: Path, tokenizer_dir: Path) -> None:
    texts = [t.encode() for t in synthetic_texts(40, seed=2, min_words=1, max_words=20)]
    texts[7] = b"bad \xff utf-8"
    path = tmp_path / "ds"
    _write_shards(path, ({"txt": t} for t in texts), samples_per_shard=20)
    prepare_dataset(
        path, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "TextSample",
        "--field-map", json.dumps({"text": "txt"}),
    )  # fmt: skip
    args = ["analyze", str(path), "--tokenizer", str(tokenizer_dir), "--pack-size", "32"]
    result = CliRunner().invoke(main, [*args, "--buffer-size", "8", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["skipped"] == 1
    assert [s["key"] for s in out["skipped_samples"]] == ["000007"]
    assert "UnicodeDecodeError" in out["skipped_samples"][0]["reason"]
    assert "Traceback" not in result.stderr  # listed with its reason, not a traceback each
    report = CliRunner().invoke(main, [*args, "--buffer-size", "8"])
    assert "skipped" in report.stdout and "000007 (" in report.stdout


def test_overlong_error_in_analyze_is_one_line(tmp_path: Path, tokenizer_dir: Path) -> None:
    path = make_text_dataset(tmp_path / "ds", synthetic_texts(20, seed=1, max_words=40))
    args = ["analyze", str(path), "--tokenizer", str(tokenizer_dir), "--pack-size", "16"]
    result = CliRunner().invoke(main, [*args, "--buffer-size", "8", "--overlong", "error"])
    assert result.exit_code == 1
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert "> pack_size=16" in line and "'truncate', 'split' or 'drop'" in line


def test_stats_as_dict_has_every_counter() -> None:
    # The metrics-logger dict is derived from PackingCounts, so a new counter (e.g.
    # dropped_over_budget) cannot be left out of it.
    stats = PackingStats(log_every=0)
    stats.record_drop("k", "media over budget", kind="over_budget")
    stats.record_pack(doc_lengths=[5, 3], pack_size=8)
    d = stats.as_dict()
    assert {f.name for f in dataclasses.fields(PackingCounts)} <= set(d)
    assert (d["dropped_over_budget"], d["dropped"], d["packs"], d["fill"]) == (1, 1, 1, 1.0)
    assert (d["last_fill"], d["last_documents"]) == (1.0, 2)
