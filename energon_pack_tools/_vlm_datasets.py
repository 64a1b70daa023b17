# SPDX-License-Identifier: Apache-2.0
"""Write VQA and conversation (LLaVA-style) energon datasets from Python.

``make_vqa_dataset`` writes energon's ``VQASample`` webdataset (``png``, ``txt``, ``json``).
``make_conversation_dataset`` writes LLaVA records and their media as a crude webdataset that
``ConversationPackingTaskEncoder`` cooks (``000007.json``, ``000007.img0.png``,
``000007.vid0.f0000.jpg``: a video is a folder of frames). Records are checked as the encoder
reads them, and every error names the record and the fix. See docs/howto/conversations.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energon_pack.task_encoders import ConversationPackingTaskEncoder as Encoder
from energon_pack.task_encoders import normalize_conversation
from energon_pack_tools._datasets import (
    JSON_TOO_DEEP,
    _prepare_webdataset,
    _write_shards,
    prepare_dataset,
)
from energon_pack_tools._media_files import checked_image, inside_root, media_path

__all__ = [
    "ConversationCounts",
    "iter_llava_records",
    "make_conversation_dataset",
    "make_vqa_dataset",
    "read_llava_records",
]

#: Frame files a video directory may hold.
FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def make_vqa_dataset(
    path: Path | str,
    images: Sequence[bytes],
    questions: Sequence[str],
    answers: Sequence[Sequence[str]],
    *,
    answer_weights: Sequence[Sequence[float]] | None = None,
    samples_per_shard: int = 8,
) -> Path:
    """A ``VQASample`` dataset: sample ``i`` is PNG bytes ``images[i]``, ``questions[i]``, the
    answer list ``answers[i]`` and, if given, ``answer_weights[i]`` (a ``weights.json`` file)."""
    weights = [None] * len(images) if answer_weights is None else answer_weights
    if not len(images) == len(questions) == len(answers) == len(weights):
        raise ValueError(
            f"{len(images)} images, {len(questions)} questions, {len(answers)} answer lists "
            f"and {len(weights)} weight lists: pass one of each per sample."
        )
    samples = (
        {"png": im, "txt": q.encode(), "json": json.dumps(list(a)).encode()}
        | ({} if w is None else {"weights.json": json.dumps(list(w)).encode()})
        for im, q, a, w in zip(images, questions, answers, weights)
    )
    path = Path(path)
    _write_shards(path, samples, samples_per_shard)
    fields = {"image": "png", "context": "txt", "answers": "json"}
    if answer_weights is not None:
        fields["answer_weights"] = "weights.json"
    return _prepare_webdataset(path, "VQASample", fields)


def _where(path: Path, place: str, record: Any) -> str:
    """``"llava.jsonl:3"`` or ``"llava.json record 3"``, plus ``(id 'x')`` when it has one."""
    rid = record.get("id") if isinstance(record, dict) else None
    return f"{path}{place}" + (f" (id {rid!r})" if isinstance(rid, (str, int)) else "")


def iter_llava_records(path: Path | str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each record of a LLaVA ``.json`` (a list) or ``.jsonl`` file.

    ``where`` names the record for error messages: ``"llava.jsonl:3"`` (line 3) or
    ``"llava.json record 2 (id 'a7')"`` (0-based index in the list, and its ``id``).
    A ``.jsonl`` file is read one line at a time.

    Raises:
        ValueError: a line or file that is not valid JSON (naming line and column), or a
            record that is not a JSON object; an empty file.
    """
    path = Path(path)
    found = 0
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                        "fix or remove the line (one JSON object per line)."
                    ) from exc
                except RecursionError as exc:  # json.loads recurses once per nesting level
                    raise ValueError(f"{path}:{lineno}: {JSON_TOO_DEEP}") from exc
                found += 1
                yield _checked(_where(path, f":{lineno}", record), record)
    else:
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); fix the file (a "
                ".json input is one list of records; .jsonl holds one record per line)."
            ) from exc
        except RecursionError as exc:
            raise ValueError(f"{path}: {JSON_TOO_DEEP}") from exc
        if not isinstance(records, list):
            raise ValueError(
                f"{path}: expected a JSON list of records (LLaVA format), got "
                f"{type(records).__name__}; write [{{...}}, {{...}}] or one object per line "
                "in a .jsonl file."
            )
        for i, record in enumerate(records):
            found += 1
            yield _checked(_where(path, f" record {i}", record), record)
    if not found:
        raise ValueError(f"{path}: no records in this file; remove it or fill it.")


def _checked(where: str, record: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(record, dict):
        raise ValueError(
            f"{where}: expected a JSON object (a record), got {type(record).__name__}."
        )
    return where, record


def read_llava_records(path: Path | str) -> list[dict[str, Any]]:
    """The records of a LLaVA ``.json`` file (a list of objects) or ``.jsonl`` file.

    Raises:
        ValueError: as :func:`iter_llava_records` (naming the line or record).
    """
    return [record for _, record in iter_llava_records(path)]


@dataclass
class ConversationCounts:
    """What :func:`make_conversation_dataset` wrote so far (updated as records stream by).

    ``wrote {records} conversations ({images} images, {videos} videos of {frames} frames,
    {text_only} text-only)``.
    """

    records: int = 0  #: conversations written
    images: int = 0  #: image files copied
    videos: int = 0  #: videos (frame directories) copied
    frames: int = 0  #: frame files copied, all videos together
    text_only: int = 0  #: conversations without any image or video


def _as_list(value: Any, field: str, where: str) -> list[str]:
    """A record's media field as a list of names (``"a.png"`` -> ``["a.png"]``)."""
    names = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"{where}: {field!r} must be a file name or a list of file names, got {value!r:.80}."
        )
    return names


def _media_names(record: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """``(image names, video names)`` of a record (``image``/``images``, ``video``/``videos``)."""
    image_field = "image" if "image" in record else "images"
    video_field = "video" if "video" in record else "videos"
    return (
        _as_list(record.get(image_field), image_field, where),
        _as_list(record.get(video_field), video_field, where),
    )


def _check_tags(record: dict[str, Any], where: str, images: int, videos: int) -> None:
    """Tags and media must match as the encoders require: one tag per item, or no tag at all
    (then the items go before the first user turn, LLaVA's convention)."""
    try:
        messages = normalize_conversation(record, key=where)
    except ValueError as exc:  # "sample 'llava.jsonl:3': ..." -> "llava.jsonl:3: ..."
        raise ValueError(str(exc).replace(f"sample {where!r}: ", f"{where}: ", 1)) from exc
    bad = Encoder.tag_mismatch("".join(m["content"] for m in messages), images, videos)
    if bad is not None:
        tag, noun, found, n = bad
        raise ValueError(
            f"{where}: {found} {tag} tag(s) in the conversation but {n} {noun}(s) in the "
            f"record; give one {tag} per {noun} (or none: then all go before the first user "
            "turn)."
        )


def _media_files(
    names: tuple[list[str], list[str]],
    root: Path,
    where: str,
    counts: ConversationCounts,
    allow_absolute: bool,
) -> dict[str, bytes]:
    """The ``imgN.<ext>`` and ``vidN.fM.<ext>`` files of one record, each decoded once."""
    files: dict[str, bytes] = {}
    for n, name in enumerate(names[0]):
        file = media_path(root, name, "image", where, allow_absolute)
        if not file.exists():
            raise ValueError(
                f"{where}: image {name!r} not found (no file {file}); fix the path in the "
                "record, or choose the folder it is relative to (--media-root / media_root=)."
            )
        files[f"img{n}{file.suffix.lower() or '.png'}"] = checked_image(file, where, "image")
    for n, name in enumerate(names[1]):
        folder = media_path(root, name, "video", where, allow_absolute)
        frames = sorted(p for p in folder.glob("*") if p.suffix.lower() in FRAME_SUFFIXES)
        if not folder.is_dir() or not frames:
            what = "is a file" if folder.is_file() else "is not a folder of frame images"
            raise ValueError(
                f"{where}: video {name!r} ({folder}) {what}; a video is a folder of frames: "
                f"extract them once (ffmpeg -i {folder} -vf fps=2 FOLDER/%04d.jpg), name that "
                "folder in the record and give its frame rate as 'fps'."
            )
        for m, frame in enumerate(frames):
            what = f"frame of video {name!r}"
            inside_root(frame, root, what, where, allow_absolute)
            data = checked_image(frame, where, what)
            files[f"vid{n}.f{m:04d}{frame.suffix.lower()}"] = data
        counts.frames += len(frames)
    counts.images += len(names[0])
    counts.videos += len(names[1])
    counts.text_only += not (names[0] or names[1])
    return files


def _samples(
    records: Iterable[dict[str, Any] | tuple[str, dict[str, Any]]],
    root: Path,
    counts: ConversationCounts,
    allow_absolute: bool,
) -> Iterator[dict[str, bytes]]:
    for i, item in enumerate(records):
        where, record = item if isinstance(item, tuple) else (f"record {i}", item)
        _checked(where, record)
        names = _media_names(record, where)
        _check_tags(record, where, len(names[0]), len(names[1]))
        sample = {
            "json": json.dumps(record).encode(),
            **_media_files(names, root, where, counts, allow_absolute),
        }
        counts.records += 1
        yield sample


def make_conversation_dataset(
    path: Path | str,
    records: Iterable[dict[str, Any] | tuple[str, dict[str, Any]]],
    *,
    media_root: Path | str = ".",
    samples_per_shard: int = 64,
    counts: ConversationCounts | None = None,
    allow_absolute_media: bool = False,
) -> Path:
    """A crude webdataset of LLaVA ``records`` with their images and video frames.

    ``record["image"]`` (a name or a list) and ``record["video"]`` (frame directories) are
    resolved under ``media_root``: a path that leaves it (``../x.png``) is refused, and an
    absolute one or one whose symlink target (file, folder or frame) leaves it unless
    ``allow_absolute_media``; a FIFO, device or other special file is refused without being
    opened; every image and frame must decode. Load it
    with ``ConversationPackingTaskEncoder`` (its cooker). Text-only records (no image, no video) are fine: they become text-only conversations.
    ``records`` may be ``(where, record)`` pairs from :func:`iter_llava_records` (errors then
    name the file and line); pass ``counts`` to learn what was written. Records stream to the
    shards (one held at a time).

    Raises:
        ValueError: naming the record: not an object, no ``conversations`` / ``messages``, a
            missing image or video folder, or ``<image>`` / ``<video>`` tags that do not match
            the media, a media path outside ``media_root``, a file that is not an image.
            Shards written before it stay in ``path`` (no ``.nv-meta``).
    """
    path = Path(path)
    counts = ConversationCounts() if counts is None else counts
    samples = _samples(records, Path(media_root), counts, allow_absolute_media)
    _write_shards(path, samples, samples_per_shard)
    if not counts.records:
        raise ValueError("no records to write.")
    return prepare_dataset(
        path, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset"
    )
