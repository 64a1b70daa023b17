# SPDX-License-Identifier: Apache-2.0
"""``make-dataset`` failures a user meets: real filesystem errors, odd inputs. One line each.

The filesystem errors are real: a tmpfs mounted small or read-only (root can mount one; a
non-root run uses a directory without write permission instead), a per-process file-size limit
(``RLIMIT_FSIZE``: the kernel fails the write), a parent that is a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack_tools.cli._make_dataset_command import collect_inputs, command


def _corpus(path: Path, n: int = 300) -> Path:
    """``n`` JSONL documents of 12..600 characters (about 95 KB for 300)."""
    path.write_text(
        "".join(json.dumps({"text": "hello world " * (i % 50 + 1)}) + "\n" for i in range(n))
    )
    return path


@contextlib.contextmanager
def _tmpfs(where: Path, *options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``where`` (needs root; the test is skipped where mount is refused)."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    opts = ",".join(options)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        # lazy: energon prepare may still hold its failed sqlite index open in this process
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.parametrize("size", ["16k", "400k"])
def test_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path, size: str) -> None:
    # 16k: the first shard does not fit (tar write fails, ENOSPC); 400k: the shard fits but
    # energon prepare's sqlite index does not ("database or disk is full").
    src = _corpus(tmp_path / "c.jsonl")
    with _tmpfs(tmp_path / "disk", f"size={size}") as disk:
        res = CliRunner().invoke(command, [str(disk / "out"), str(src)])
        assert res.exit_code == 1
        line = _one_line_error(res.output)
        assert str(disk / "out") in line and "free space" in line
        assert "full" in line or "No space left" in line
        assert not any(disk.iterdir())  # the partial output is removed


def test_read_only_file_system(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "c.jsonl", 3)
    with _tmpfs(tmp_path / "ro", "size=64k", "ro") as ro:
        res = CliRunner().invoke(command, [str(ro / "out"), str(src)])
        line = _one_line_error(res.output)
        assert res.exit_code == 1
        assert str(ro / "out") in line and "read-only" in line and "writable" in line


def test_unwritable_parent(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "c.jsonl", 3)
    parent = tmp_path / "locked"
    if os.geteuid() == 0:  # root writes anywhere: a read-only mount is what refuses it
        ctx = _tmpfs(parent, "size=64k", "ro")
    else:
        parent.mkdir()
        parent.chmod(0o555)
        ctx = contextlib.nullcontext(parent)
    with ctx:
        res = CliRunner().invoke(command, [str(parent / "new" / "out"), str(src)])
        line = _one_line_error(res.output)
        assert res.exit_code == 1
        assert str(parent / "new") in line and "choose a directory" in line
    parent.chmod(0o755)


def test_parent_is_a_file(tmp_path: Path) -> None:
    src = _corpus(tmp_path / "c.jsonl", 3)
    (tmp_path / "afile").write_text("x")
    res = CliRunner().invoke(command, [str(tmp_path / "afile" / "out"), str(src)])
    line = _one_line_error(res.output)
    assert res.exit_code == 1
    assert str(tmp_path / "afile") in line and "is a file, not a directory" in line
    assert (tmp_path / "afile").read_text() == "x"


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then write() fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


def test_kernel_refused_write_in_a_real_process(tmp_path: Path) -> None:
    # Any user can set RLIMIT_FSIZE: the kernel then fails the shard's write (EFBIG), the same
    # OSError path a full disk takes, in a real ``energon-pack`` process.
    src = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "energon_pack_tools.cli", "make-dataset", str(out), str(src)],
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size,
    )
    assert done.returncode == 1
    line = _one_line_error(done.stderr)
    assert f"cannot write {out}" in line and "File too large" in line
    assert "--samples-per-shard" in line
    assert not out.exists()


def test_skipped_files_are_reported(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_text("a")
    for i in range(7):
        (d / f"img{i}.png").write_bytes(b"\x89PNG")
    res = CliRunner().invoke(command, [str(tmp_path / "out"), str(d)])
    assert res.exit_code == 0, res.output
    # 7 skipped, the first 5 named (sorted), the rest counted.
    assert "skipped 7 files of other types in directories" in res.output
    assert f"{d / 'img0.png'}, " in res.output and f"{d / 'img4.png'}, ... (2 more)" in res.output
    assert "wrote 1 document (0 empty skipped) in 1 shard to" in res.output


@pytest.mark.parametrize("twice", ["same file", "file inside a directory", "directory"])
def test_duplicate_inputs_are_refused(tmp_path: Path, twice: str) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_text("a")
    inputs = {
        "same file": [d / "a.txt", d / ".." / "d" / "a.txt"],
        "file inside a directory": [d, d / "a.txt"],
        "directory": [d, d],
    }[twice]
    with pytest.raises(ValueError, match=r"a\.txt is given twice \(also as .*a\.txt\)"):
        collect_inputs(inputs)
    res = CliRunner().invoke(command, [str(tmp_path / "out"), *map(str, inputs)])
    assert res.exit_code == 1 and "given twice" in res.output
    assert not (tmp_path / "out").exists()


def test_lone_surrogate_names_file_and_line(tmp_path: Path) -> None:
    # Valid JSON (json.loads accepts "\ud800"), but not text: UTF-8 cannot encode it.
    src = tmp_path / "s.jsonl"
    src.write_text('{"text": "fine"}\n{"text": "bad \\ud800 here"}\n')
    res = CliRunner().invoke(command, [str(tmp_path / "out"), str(src)])
    line = _one_line_error(res.output)
    assert res.exit_code == 1
    assert f"{src}:2: field 'text' holds a lone surrogate ('\\ud800' at character 4)" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("task", "suffix", "record"),
    [
        ("text", ".jsonl", '{"text": "x", "n": %s}'),
        ("sft", ".jsonl", '{"prompt": "p", "response": "r", "n": %s}'),
        ("conversation", ".jsonl", '{"messages": [{"role": "user", "content": "q"}], "n": %s}'),
        ("conversation", ".json", '[{"conversations": [], "n": %s}]'),
    ],
)
def test_json_nested_10k_deep_names_file_and_line(
    tmp_path: Path, task: str, suffix: str, record: str
) -> None:
    """Valid JSON that ``json.loads`` cannot read (RecursionError): one line naming the place."""
    src = tmp_path / f"deep{suffix}"
    deep = record % ("[" * 10_000 + "]" * 10_000)
    fine = record % "1"  # the same record, not nested: line 1 is read before line 2 fails
    src.write_text(deep if suffix == ".json" else fine + "\n" + deep + "\n")
    res = CliRunner().invoke(command, [str(tmp_path / "out"), str(src), "--task", task])
    line = _one_line_error(res.output)
    where = f"{src}" if suffix == ".json" else f"{src}:2"
    assert line == (
        f"Error: {where}: JSON nested too deeply to read (more than about 1000 levels of "
        "lists/objects); flatten or remove the record."
    )
    assert res.exit_code == 1 and not (tmp_path / "out").exists()
