# SPDX-License-Identifier: Apache-2.0
"""``energon_pack_tools._datasets``: the text writer streams any iterable into the same shards as a list."""

from __future__ import annotations

import random
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from energon_pack_tools import make_text_dataset


def _members(tar_path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(tar_path) as tar:
        out = []
        for info in tar.getmembers():
            f = tar.extractfile(info)
            assert f is not None
            out.append((info.name, f.read()))
        return out


def _shards(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.tar"))}


def test_generator_input_gives_literal_shards(tmp_path: Path) -> None:
    # 3 texts, 2 per shard -> shard 0 holds samples 0 and 1, shard 1 holds sample 2; keys are the
    # global sample index, not the index inside the shard.
    out = make_text_dataset(tmp_path / "ds", (t for t in ["a", "bb", "ccc"]), samples_per_shard=2)
    assert sorted(p.name for p in out.glob("*.tar")) == ["shard_000000.tar", "shard_000001.tar"]
    assert _members(out / "shard_000000.tar") == [("000000.txt", b"a"), ("000001.txt", b"bb")]
    assert _members(out / "shard_000001.tar") == [("000002.txt", b"ccc")]
    assert (out / ".nv-meta" / "dataset.yaml").exists()


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_generator_and_list_write_byte_identical_shards(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    texts = ["".join(rng.choices("ab \u00e9\n", k=rng.randint(1, 300))) for _ in range(23)]
    per_shard = rng.randint(1, 7)
    from_list = make_text_dataset(tmp_path / "list", texts, samples_per_shard=per_shard)
    from_gen = make_text_dataset(tmp_path / "gen", iter(texts), samples_per_shard=per_shard)
    shards = _shards(from_list)
    assert len(shards) == -(-23 // per_shard)  # ceil: no empty trailing shard
    assert _shards(from_gen) == shards


def test_shards_are_written_while_the_input_is_consumed(tmp_path: Path) -> None:
    # A generator that fails at its 6th item: if the writer materialised the input first, nothing
    # would be on disk. Streaming, shards 0 and 1 (2 samples each) are complete and the open
    # shard 2 is closed cleanly with sample 4.
    seen: list[int] = []

    def texts() -> Iterator[str]:
        for i in range(5):
            seen.append(i)
            yield f"doc {i}"
        raise ValueError("bad input at item 5")

    with pytest.raises(ValueError, match="item 5"):
        make_text_dataset(tmp_path / "ds", texts(), samples_per_shard=2)
    out = tmp_path / "ds"
    assert seen == [0, 1, 2, 3, 4]
    assert _members(out / "shard_000000.tar") == [
        ("000000.txt", b"doc 0"),
        ("000001.txt", b"doc 1"),
    ]
    assert _members(out / "shard_000001.tar") == [
        ("000002.txt", b"doc 2"),
        ("000003.txt", b"doc 3"),
    ]
    assert _members(out / "shard_000002.tar") == [("000004.txt", b"doc 4")]
    assert not (out / ".nv-meta").exists()  # energon prepare never ran
