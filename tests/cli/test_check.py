# SPDX-License-Identifier: Apache-2.0
"""Damaged data is named: ``energon-pack check`` on real shards, and the loader's read errors
(a 0-byte shard, a tar cut at 60%) naming the shard and the fix, at 0 workers and inside a
DataLoader worker (2 workers, in a subprocess)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack_tools.cli._main import main

#: Documents of ~3 KB: a 10-sample shard is ~40 KB, so cutting it at 60% cuts real members.
TEXTS = [f"document {i} " + "word " * 600 for i in range(30)]


def _dataset(path: Path) -> Path:
    from energon_pack_tools import make_text_dataset

    return make_text_dataset(path, TEXTS, samples_per_shard=10)


def _damage(shard: Path, how: str) -> None:
    data = shard.read_bytes()
    shard.write_bytes(b"" if how == "empty" else data[: int(len(data) * 0.6)])


def _tar(path: Path, members: list[tuple[str | bytes, bytes]]) -> None:
    """A tar with these (name, data) members in order; a bytes name is written as is."""
    with tarfile.open(path, "w", encoding="utf-8", errors="surrogateescape") as tar:
        for name, data in members:
            if isinstance(name, bytes):
                name = name.decode("utf-8", "surrogateescape")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", str(path)])
    return result.exit_code, result.output


def test_check_passes_a_sound_dataset_and_counts_it(tmp_path: Path) -> None:
    code, out = _check(_dataset(tmp_path / "ok"))
    assert code == 0, out
    assert "ok (3 shards, 30 samples checked)" in out


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_check_names_a_damaged_shard_and_the_fix(tmp_path: Path, how: str) -> None:
    path = _dataset(tmp_path / how)
    _damage(path / "shard_000001.tar", how)
    code, out = _check(path)
    assert code == 1
    assert f"{path / 'shard_000001.tar'}: damaged" in out
    assert "energon-pack make-dataset" in out and "1 problem in 3 shards" in out
    assert "shard_000000.tar" not in out and "shard_000002.tar" not in out


def test_check_finds_bad_keys_in_unprepared_shards(tmp_path: Path) -> None:
    """What ``energon prepare`` dies on (a non-UTF-8 key) or loses silently (a member twice in
    one sample), and a key shared by two samples, each named with its shard."""
    path = tmp_path / "raw"
    path.mkdir()
    _tar(path / "a.tar", [("000001.txt", b"one"), (b"00\xff002.txt", b"two")])
    _tar(path / "b.tar", [("000003.txt", b"x"), ("000003.txt", b"y"), ("000004.txt", b"z")])
    _tar(path / "c.tar", [("000005.txt", b"p"), ("000006.txt", b"q"), ("000005.json", b"{}")])
    code, out = _check(path)
    assert code == 1
    assert f"{path / 'a.tar'}: member '00\\udcff002.txt': not UTF-8 (byte b'\\xff'" in out
    assert f"{path / 'b.tar'}: member '000003.txt' appears twice in sample '000003'" in out
    assert f"{path / 'c.tar'}: key '000005' is used by 2 samples" in out
    assert "3 problems in 3 shards" in out


def test_check_names_a_shard_changed_after_prepare(tmp_path: Path) -> None:
    path = _dataset(tmp_path / "changed")
    shard = path / "shard_000002.tar"
    _tar(shard, [(f"{i:06d}.txt", b"new") for i in range(4)])
    code, out = _check(path)
    assert code == 1
    assert f"{shard}: holds 4 samples but .nv-meta/.info.json says 10" in out


def test_check_refuses_what_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, out = _check(tmp_path)
    assert code == 1 and "is not an energon dataset" in out


_LOAD = """
import sys
from megatron.energon import WorkerConfig, get_loader, get_train_dataset
from energon_pack import LLMPackingTaskEncoder
encoder = LLMPackingTaskEncoder(sys.argv[2], pack_size=64)
ds = get_train_dataset(sys.argv[1], worker_config=WorkerConfig(rank=0, world_size=1,
    num_workers=int(sys.argv[3])), batch_size=None, shuffle_buffer_size=None,
    max_samples_per_sequence=None, packing_buffer_size=32, task_encoder=encoder)
try:
    for _, _ in zip(range(200), get_loader(ds)):
        pass
except Exception as exc:
    print("ERROR", type(exc).__name__, str(exc).splitlines()[-1] if "worker" in str(exc)
          else exc)
"""


def _load(path: Path, tokenizer_dir: Path, workers: int) -> str:
    run = subprocess.run(
        [sys.executable, "-c", _LOAD, str(path), str(tokenizer_dir), str(workers)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return run.stdout + run.stderr[-3000:]


def _load_here(path: Path, tokenizer_dir: Path) -> str:
    """Iterate a 0-worker packing loader over ``path``; the DamagedShardError's message."""
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset

    from energon_pack import LLMPackingTaskEncoder
    from energon_pack.energon import DamagedShardError

    ds = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        packing_buffer_size=32,
        task_encoder=LLMPackingTaskEncoder(tokenizer_dir, pack_size=64),
    )
    with pytest.raises(DamagedShardError) as err:
        for _ in zip(range(200), get_loader(ds)):
            pass
    return str(err.value)


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_loading_a_damaged_shard_names_it_and_the_fix(
    tmp_path: Path, tokenizer_dir: Path, how: str
) -> None:
    """At 0 workers, in this process: the error is a DamagedShardError naming the shard."""
    path = _dataset(tmp_path / how)
    _damage(path / "shard_000001.tar", how)
    message = _load_here(path, tokenizer_dir)
    problem = "empty file" if how == "empty" else "unexpected end of data"
    assert f"{path / 'shard_000001.tar'} is damaged (ReadError: {problem})" in message
    assert f"energon-pack check {path}" in message


@pytest.mark.slow
def test_a_damaged_shard_is_named_from_a_dataloader_worker(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    path = _dataset(tmp_path / "w2")
    _damage(path / "shard_000001.tar", "truncated")
    out = _load(path, tokenizer_dir, workers=2)
    line = next((x for x in out.splitlines() if x.startswith("ERROR")), out)
    assert line.startswith("ERROR DamagedShardError"), line
    assert f"{path / 'shard_000001.tar'} is damaged (ReadError: unexpected end" in line


def test_a_member_twice_in_one_sample_is_refused_at_load_not_merged(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    """energon prepare groups two adjacent ``000001.txt`` into one sample and the reader keeps
    the last: the load refuses it, naming shard and member, instead of losing a sample."""
    from energon_pack_tools import prepare_dataset

    path = tmp_path / "dup"
    path.mkdir()
    members = [(f"{i:06d}.txt", f"text {i}".encode()) for i in range(6)]
    _tar(path / "shard_000000.tar", [*members[:2], ("000001.txt", b"again"), *members[2:]])
    prepare_dataset(
        path,
        "--non-interactive",
        *("--split-ratio", "1,0,0", "--sample-type", "TextSample"),
        *("--field-map", json.dumps({"text": "txt"})),
    )
    message = _load_here(path, tokenizer_dir)
    assert f"{path / 'shard_000000.tar'}: member '000001.txt' appears twice" in message


def test_analyze_on_a_damaged_shard_is_one_line_naming_it(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    from energon_pack_tools.cli._analyze_command import command

    path = _dataset(tmp_path / "a")
    _damage(path / "shard_000002.tar", "empty")
    args = [str(path), "--tokenizer", str(tokenizer_dir), "--pack-size", "64"]
    res = CliRunner().invoke(command, [*args, "--buffer-size", "32", "--no-progress"])
    assert res.exit_code == 1, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert f"{path / 'shard_000002.tar'} is damaged (ReadError: empty file)" in errors[0]
