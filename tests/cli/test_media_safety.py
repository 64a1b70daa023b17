# SPDX-License-Identifier: Apache-2.0
"""``make-dataset --task conversation`` copies nothing from outside the media root and never
blocks on a special file: media are judged by their resolved target (file, folder and frame
symlinks), FIFOs and devices are refused from ``stat`` without being opened, and names that
energon could not store (a newline, bytes that are not UTF-8) are refused naming file:line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from llava_files import write_llava_media

from energon_pack_tools.cli import main

TURNS = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]


@pytest.fixture()
def media(tmp_path: Path) -> Path:
    """A media root with the LLaVA files, and ``outside/`` (a real image and a 2-frame video)
    next to it: everything a symlink might lead to."""
    root = tmp_path / "media"
    files = write_llava_media(root)
    outside = tmp_path / "outside"
    (outside / "clip").mkdir(parents=True)
    (outside / "secret.png").write_bytes(files["a.png"])
    for i in range(2):
        (outside / "clip" / f"{i:04d}.png").write_bytes(files["a.png"])
    return root


def _make(tmp_path: Path, media: Path, record: dict[str, Any], *options: str) -> Any:
    src = tmp_path / "llava.jsonl"
    src.write_text(json.dumps({"conversations": TURNS}) + "\n" + json.dumps(record) + "\n")
    out = tmp_path / "out"
    args = ["make-dataset", str(out), str(src), "--task", "conversation", "--media-root"]
    result = CliRunner().invoke(main, [*args, str(media), *options])
    assert result.exit_code != 0 or not result.exception, result.exception
    return result


@pytest.mark.parametrize(
    ("link", "target", "record"),
    [
        ("rel.png", "../outside/secret.png", {"image": "rel.png"}),
        ("abs.png", "{outside}/secret.png", {"image": "abs.png"}),
        ("dir", "{outside}", {"image": "dir/secret.png"}),
        ("vid", "{outside}/clip", {"video": "vid"}),
        ("clip/0003.png", "{outside}/secret.png", {"video": "clip"}),  # one symlinked frame
    ],
)
def test_a_symlink_leaving_the_media_root_is_refused_by_name(
    tmp_path: Path, media: Path, link: str, target: str, record: dict[str, Any]
) -> None:
    outside = tmp_path / "outside"
    (media / link).symlink_to(target.format(outside=outside))
    record = {"id": "r", **record, "conversations": TURNS}
    result = _make(tmp_path, media, record)
    assert result.exit_code == 1 and not (tmp_path / "out").exists(), result.output
    where = f"{tmp_path / 'llava.jsonl'}:2 (id 'r')"
    assert result.output.startswith(f"Error: {where}: "), result.output
    assert f"resolves to {outside}" in result.output
    assert f"outside the media root ({media})" in result.output
    assert "--allow-absolute-media" in result.output
    # the explicit opt-in follows the link (and copies the bytes it points to)
    assert _make(tmp_path, media, record, "--allow-absolute-media").exit_code == 0


def test_a_fifo_among_frames_is_refused_without_opening_it(tmp_path: Path, media: Path) -> None:
    """Under an alarm: before, make-dataset blocked forever opening the FIFO for reading."""
    fifo = media / "clip" / "0003.png"
    os.mkfifo(fifo)

    def hung(*_: Any) -> None:
        raise TimeoutError("make-dataset blocked on the FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        result = _make(tmp_path, media, {"id": "v", "video": "clip", "conversations": TURNS})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert result.exit_code == 1, result.output
    where = f"{tmp_path / 'llava.jsonl'}:2 (id 'v')"
    assert f"{where}: frame of video 'clip' {fifo} is a FIFO (named pipe)" in result.output


def test_a_device_file_is_refused_by_name(tmp_path: Path, media: Path) -> None:
    """``/dev/zero`` linked as a frame: outside the root, and, when opted in, a device (before,
    a bare MemoryError)."""
    (media / "clip" / "0003.png").symlink_to("/dev/zero")
    record = {"id": "z", "video": "clip", "conversations": TURNS}
    result = _make(tmp_path, media, record)
    assert "resolves to /dev/zero" in result.output
    result = _make(tmp_path, media, record, "--allow-absolute-media")
    assert result.exit_code == 1 and "MemoryError" not in result.output
    where = f"{tmp_path / 'llava.jsonl'}:2 (id 'z')"
    assert f"{where}: frame of video 'clip' {media / 'clip/0003.png'} is a character device" in (
        result.output
    )


@pytest.mark.parametrize(
    ("name", "problem"),
    [("a\n.png", "holds the control character '\\n'"), ("a.p\udcffng", "not UTF-8")],
)
def test_a_media_name_energon_cannot_store_names_file_line_and_record(
    tmp_path: Path, media: Path, name: str, problem: str
) -> None:
    """The file exists (a newline and a 0xff byte are legal on Linux): the name is refused."""
    (media / name).write_bytes((media / "a.png").read_bytes())
    result = _make(tmp_path, media, {"id": "n", "image": name, "conversations": TURNS})
    assert result.exit_code == 1 and not (tmp_path / "out").exists()
    where = f"{tmp_path / 'llava.jsonl'}:2 (id 'n')"
    assert f"Error: {where}: image {name!r} is {problem}" in result.output
