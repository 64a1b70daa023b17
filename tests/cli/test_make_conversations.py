# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset --task conversation``: LLaVA JSON(L) + media files -> an energon
dataset read back by energon, and every bad record as one line naming it and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from llava_files import LLAVA_RECORDS, write_llava_media
from megatron.energon import Cooker, DefaultTaskEncoder
from read_back import read_back

from energon_pack.task_encoders import cook_conversation
from energon_pack_tools.cli import main


class CookOnly(DefaultTaskEncoder):
    """energon's default encoder with the conversation cooker: yields ConversationSamples with
    the media files' bytes (no decoder)."""

    decoder = None
    cookers = (Cooker(cook_conversation),)


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, ["make-dataset", *args])


def test_llava_json_and_jsonl_become_conversation_samples(tmp_path: Path) -> None:
    media = tmp_path / "media"
    files = write_llava_media(media)
    (tmp_path / "part1.json").write_text(json.dumps(LLAVA_RECORDS[:2]))  # a list
    (tmp_path / "part2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LLAVA_RECORDS[2:]))
    out = tmp_path / "data"
    res = _run(
        str(out),
        str(tmp_path / "part1.json"),
        str(tmp_path / "part2.jsonl"),
        "--task",
        "conversation",
        "--media-root",
        str(media),
        "--samples-per-shard",
        "3",
    )
    assert res.exit_code == 0, res.output
    # 3 images (2 + the untagged one), 1 video of 3 frames, 1 text-only; ceil(4 / 3) = 2 shards.
    assert (
        "wrote 4 conversations (3 images, 1 video of 3 frames, 1 text-only) in 2 shards"
        in res.output
    )
    assert "--task conversation --processor" in res.output  # the next command
    samples = read_back(out, CookOnly())
    assert [s.__key__ for s in samples] == ["000000", "000001", "000002", "000003"]
    t, i2, v, u = samples
    assert t.conversation == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "a"},
    ]
    assert (t.images, t.videos) == ([], [])
    assert i2.images == [files["a.png"], files["sub/b.png"]]
    assert i2.conversation[0]["content"] == "<image> <image> which"
    assert v.videos == [[files[f"clip/{i:04d}.png"] for i in range(3)]] and v.video_fps == [2.0]
    assert v.conversation[1] == {"role": "assistant", "content": "a cat"}
    assert u.images == [files["a.png"]]  # no tag: the encoder puts it before the first user turn


def test_media_root_defaults_to_the_inputs_folder(tmp_path: Path) -> None:
    write_llava_media(tmp_path)
    (tmp_path / "llava.jsonl").write_text(json.dumps(LLAVA_RECORDS[1]) + "\n")
    res = _run(str(tmp_path / "data"), str(tmp_path / "llava.jsonl"), "--task", "conversation")
    assert res.exit_code == 0, res.output
    assert "wrote 1 conversation (2 images, 0 videos of 0 frames, 0 text-only)" in res.output
    assert len(read_back(tmp_path / "data", CookOnly())[0].images) == 2


def _turns(text: str) -> list[dict[str, str]]:
    return [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}]


@pytest.mark.parametrize(
    ("jsonl", "message"),
    [
        (
            '\n{"id": 7, "conversations": [\n',  # line 2 blank (skipped); 28 characters
            "llava.jsonl:3: not valid JSON (Expecting value at column 29); fix or remove the line",
        ),
        (
            json.dumps({"id": "x", "image": "nope.png", "conversations": _turns("<image> q")}),
            "llava.jsonl:2 (id 'x'): image 'nope.png' not found (no file MEDIA/nope.png); fix the "
            "path in the record, or choose the folder it is relative to (--media-root",
        ),
        (
            json.dumps({"image": "a.png", "conversations": _turns("<image> <image> q")}),
            "llava.jsonl:2: 2 <image> tag(s) in the conversation but 1 image(s) in the record; "
            "give one <image> per image (or none",
        ),
        (
            json.dumps({"conversations": _turns("<video> q")}),
            "llava.jsonl:2: 1 <video> tag(s) in the conversation but 0 video(s)",
        ),
        (
            json.dumps({"video": "a.png", "conversations": _turns("<video> q")}),
            "llava.jsonl:2: video 'a.png' (MEDIA/a.png) is a file; a video is a folder of frames: "
            "extract them once (ffmpeg -i MEDIA/a.png -vf fps=2 FOLDER/%04d.jpg)",
        ),
        (
            json.dumps({"image": 3, "conversations": _turns("q")}),
            "llava.jsonl:2: 'image' must be a file name or a list of file names, got 3",
        ),
        (
            json.dumps({"id": "n", "turns": []}),
            "llava.jsonl:2 (id 'n'): needs a non-empty list 'conversations' (LLaVA: from/value) "
            "or 'messages' (role/content); got fields ['id', 'turns']",
        ),
        ("[1, 2]\n", "llava.jsonl:2: expected a JSON object (a record), got list"),
    ],
)
def test_bad_records_are_one_line_naming_the_record(
    tmp_path: Path, jsonl: str, message: str
) -> None:
    media = tmp_path / "media"
    write_llava_media(media)
    src = tmp_path / "llava.jsonl"
    # a good record on line 1: the failure comes after a shard was started, and is cleaned up
    src.write_text(json.dumps(LLAVA_RECORDS[0]) + "\n" + jsonl + "\n")
    out = tmp_path / "out"
    res = _run(str(out), str(src), "--task", "conversation", "--media-root", str(media))
    assert res.exit_code != 0
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output
    expected = message.replace("MEDIA", str(media)).replace("llava.jsonl", str(src))
    assert expected in lines[0]
    assert not out.exists()  # nothing half-written


def test_a_bad_json_file_names_line_and_column(tmp_path: Path) -> None:
    src = tmp_path / "llava.json"
    src.write_text('[{"conversations": []},\n {"id": 1,,}]')
    res = _run(str(tmp_path / "o1"), str(src), "--task", "conversation")
    assert res.exit_code == 1
    assert f"{src}:2:11: not valid JSON (Expecting property name" in res.output
    src.write_text('{"conversations": []}')
    res = _run(str(tmp_path / "o2"), str(src), "--task", "conversation")
    assert f"{src}: expected a JSON list of records (LLaVA format), got dict" in res.output


def test_option_and_input_mistakes(tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    a, b = tmp_path / "d1" / "a.jsonl", tmp_path / "d2" / "b.jsonl"
    for f in (a, b):
        f.write_text(json.dumps(LLAVA_RECORDS[0]) + "\n")
    conv = ["--task", "conversation"]
    res = _run(str(tmp_path / "o"), str(a), str(b), *conv)
    assert res.exit_code == 2 and "in different folders: pass --media-root DIR" in res.output
    res = _run(str(tmp_path / "o"), str(tmp_path / "d1"), *conv)
    assert res.exit_code == 2 and "reads LLaVA .json (a list of records) or .jsonl" in res.output
    res = _run(str(tmp_path / "o"), str(a), *conv, "--field", "text")
    assert res.exit_code == 2 and "--field is for --task text" in res.output
    res = _run(str(tmp_path / "o"), str(a), "--media-root", str(tmp_path))
    assert res.exit_code == 2 and "--media-root is for --task conversation" in res.output
    res = _run(str(tmp_path / "o"), str(a), str(a), *conv)
    assert res.exit_code == 2 and "is given twice" in res.output
    assert not (tmp_path / "o").exists()


def test_media_paths_outside_the_media_root_are_refused(tmp_path: Path) -> None:
    """A downloaded record must not copy other local files into a dataset: ``../`` and absolute
    paths are refused naming file:line and the record (absolute ones are read only with
    --allow-absolute-media), a file that is not an image is refused before anything is written,
    and a symlink whose target stays inside the media root is still followed (one leaving it:
    tests/cli/test_media_safety.py)."""
    media = tmp_path / "media"
    files = write_llava_media(media)
    (tmp_path / "secret.png").write_bytes(files["a.png"])  # a real image, outside the root
    (media / "x.png").write_text("not an image")
    (media / "frames").mkdir()
    (media / "frames" / "0000.png").write_bytes(files["a.png"])
    (media / "frames" / "0001.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (media / "linked.png").symlink_to(media / "a.png")  # target inside the root: allowed
    (media / "linked_dir").symlink_to(media / "sub", target_is_directory=True)
    (media / "linked_out.png").symlink_to(tmp_path / "secret.png")
    src = tmp_path / "llava.jsonl"
    out = tmp_path / "out"

    def run(*images: str, options: tuple[str, ...] = (), key: str = "image") -> Any:
        """A text record, then one record per image (ids r, r1, r2, ...)."""
        records = [
            {"id": f"r{i or ''}", key: image, "conversations": _turns("q")}
            for i, image in enumerate(images)
        ]
        src.write_text("".join(json.dumps(r) + "\n" for r in [LLAVA_RECORDS[0], *records]))
        args = [str(out), str(src), "--task", "conversation", "--media-root", str(media)]
        return _run(*args, *options)

    where = f"{src}:2 (id 'r')"
    for name in ("../secret.png", "sub/../../secret.png", ".."):
        res = run(name)
        assert res.exit_code == 1 and not out.exists(), res.output
        assert f"{where}: image {name!r} leaves the media root ({media})" in res.output
    res = run("../media", key="video")
    assert f"{where}: video '../media' leaves the media root" in res.output
    absolute = str(tmp_path / "secret.png")
    res = run(absolute)
    assert res.exit_code == 1 and not out.exists()
    assert f"{where}: image {absolute!r} is an absolute path" in res.output
    assert "--allow-absolute-media" in res.output
    res = run("x.png")
    assert res.exit_code == 1 and not out.exists()
    assert f"{where}: image {media / 'x.png'} is not an image PIL can decode" in res.output
    res = run("frames", key="video")
    frame = media / "frames" / "0001.png"
    assert f"{where}: frame of video 'frames' {frame} is not an image" in res.output
    assert res.exit_code == 1 and not out.exists()

    # accepted, each record its own image (one dataset per option set)
    for names, options in [
        # sub/./x/../b.png: normalised as written (sub/b.png)
        (["linked.png", "linked_dir/b.png", "sub/./x/../b.png"], ()),
        # a symlink whose target is outside, and an absolute path: only when opted in
        (["linked_out.png", absolute], ("--allow-absolute-media",)),
    ]:
        shutil.rmtree(out, ignore_errors=True)
        res = run(*names, options=options)
        assert res.exit_code == 0, (names, res.output)
        expected = [[files["sub/b.png"] if "b.png" in n else files["a.png"]] for n in names]
        assert [s.images for s in read_back(out, CookOnly())[1:]] == expected
