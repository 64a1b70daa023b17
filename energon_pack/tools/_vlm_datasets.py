# SPDX-License-Identifier: Apache-2.0
"""Write VQA and conversation (LLaVA-style) energon datasets from Python.

``make_vqa_dataset`` writes energon's own ``VQASample`` webdataset (``png`` image, ``txt``
question, ``json`` answers). ``make_conversation_dataset`` turns LLaVA records plus their media
files into a crude webdataset that :class:`~energon_pack.task_encoders.ConversationPackingTaskEncoder`
cooks. Sample ``i`` of a conversation dataset holds::

    000007.json            the record as given (``conversations`` / ``messages``, ``fps``...)
    000007.img0.png        the bytes of record["image"][0] (media_root / "a.png")
    000007.vid0.f0000.jpg  frame 0 of record["video"][0] (a directory of frame images, sorted)

Images are copied byte for byte (any format PIL reads); a video is a directory of frames (no
video decoder is needed: extract frames once with ``ffmpeg -i v.mp4 -vf fps=2 v/%04d.jpg``).
``read_llava_records`` reads a LLaVA ``.json`` (a list) or ``.jsonl`` file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from energon_pack.tools._datasets import _prepare_webdataset, _write_shards, prepare_dataset

__all__ = ["make_conversation_dataset", "make_vqa_dataset", "read_llava_records"]

#: Frame files a video directory may hold.
FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def make_vqa_dataset(
    path: Path | str,
    images: Sequence[bytes],
    questions: Sequence[str],
    answers: Sequence[Sequence[str]],
    *,
    samples_per_shard: int = 8,
) -> Path:
    """A ``VQASample`` dataset: sample ``i`` is PNG bytes ``images[i]``, ``questions[i]`` and
    the answer list ``answers[i]``."""
    if not len(images) == len(questions) == len(answers):
        raise ValueError(
            f"{len(images)} images, {len(questions)} questions and {len(answers)} answer lists: "
            "pass one of each per sample."
        )
    samples = (
        {"png": im, "txt": q.encode(), "json": json.dumps(list(a)).encode()}
        for im, q, a in zip(images, questions, answers)
    )
    path = Path(path)
    _write_shards(path, samples, samples_per_shard)
    fields = {"image": "png", "context": "txt", "answers": "json"}
    return _prepare_webdataset(path, "VQASample", fields)


def read_llava_records(path: Path | str) -> list[dict[str, Any]]:
    """The records of a LLaVA ``.json`` file (a list of objects) or ``.jsonl`` file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        records = json.loads(text)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path}: expected a list of JSON objects (LLaVA records).")
    return records


def _as_list(value: Any) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _media_files(record: dict[str, Any], root: Path, index: int) -> dict[str, bytes]:
    """The ``imgN.<ext>`` and ``vidN.fM.<ext>`` files of one record."""
    files: dict[str, bytes] = {}
    for n, name in enumerate(_as_list(record.get("image", record.get("images")))):
        file = root / name
        if not file.is_file():
            raise ValueError(f"record {index}: image {name!r} not found under {root}.")
        files[f"img{n}{file.suffix.lower() or '.png'}"] = file.read_bytes()
    for n, name in enumerate(_as_list(record.get("video", record.get("videos")))):
        folder = root / name
        frames = sorted(p for p in folder.glob("*") if p.suffix.lower() in FRAME_SUFFIXES)
        if not folder.is_dir() or not frames:
            raise ValueError(
                f"record {index}: video {name!r} must be a directory of frame images under "
                f"{root} (e.g. extracted with ffmpeg -vf fps=2 DIR/%04d.jpg)."
            )
        for m, frame in enumerate(frames):
            files[f"vid{n}.f{m:04d}{frame.suffix.lower()}"] = frame.read_bytes()
    return files


def _samples(records: Iterable[dict[str, Any]], root: Path) -> Iterator[dict[str, bytes]]:
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError(f"record {i}: expected a JSON object, got {type(record).__name__}.")
        yield {"json": json.dumps(record).encode(), **_media_files(record, root, i)}


def make_conversation_dataset(
    path: Path | str,
    records: Iterable[dict[str, Any]],
    *,
    media_root: Path | str = ".",
    samples_per_shard: int = 64,
) -> Path:
    """A crude webdataset of LLaVA ``records`` with their images and video frames.

    ``record["image"]`` (a name or a list) and ``record["video"]`` (frame directories) are
    resolved under ``media_root``. Load it with ``ConversationPackingTaskEncoder`` (its cooker).
    Text-only records (no image, no video) are fine: they become text-only conversations.
    """
    path = Path(path)
    _write_shards(path, _samples(records, Path(media_root)), samples_per_shard)
    return prepare_dataset(
        path, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset"
    )
