# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset --task conversation``: LLaVA JSON(L) + media -> a crude energon
dataset for ``ConversationPackingTaskEncoder`` (:func:`energon_pack_tools.make_conversation_dataset`).
Media paths are relative to ``--media-root`` and may not leave it; every error names the record
and the fix, and the partial output is removed. See docs/howto/conversations.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from energon_pack_tools.cli._output import plural

__all__ = ["LLAVA_SUFFIXES", "llava_inputs", "write_conversations"]

#: Files ``--task conversation`` reads.
LLAVA_SUFFIXES = (".json", ".jsonl")


def llava_inputs(inputs: Sequence[Path], media_root: Path | None) -> tuple[list[Path], Path]:
    """The LLaVA files to read and the media root (``--media-root`` or the inputs' folder).

    Raises:
        click.UsageError: a directory or another file type, a file given twice, or inputs in
            different folders without ``--media-root``.
    """
    files: list[Path] = []
    for path in inputs:
        if path.is_dir() or path.suffix not in LLAVA_SUFFIXES:
            raise click.UsageError(
                f"{path}: --task conversation reads LLaVA .json (a list of records) or .jsonl "
                "(one record per line) files; name each file (media files are found through "
                "the records and --media-root)."
            )
        if path.resolve() in {f.resolve() for f in files}:
            raise click.UsageError(f"{path} is given twice; name each file once.")
        files.append(path)
    if media_root is None:
        folders = {f.resolve().parent for f in files}
        if len(folders) > 1:
            raise click.UsageError(
                "the inputs are in different folders: pass --media-root DIR, the folder the "
                "records' image and video paths are relative to."
            )
        media_root = files[0].parent
    return files, media_root


def _records(files: Sequence[Path]) -> Iterator[tuple[str, dict[str, Any]]]:
    from energon_pack_tools._vlm_datasets import iter_llava_records

    for file in files:
        yield from iter_llava_records(file)


def write_conversations(
    out: Path,
    inputs: Sequence[Path],
    media_root: Path | None,
    samples_per_shard: int,
    allow_absolute_media: bool = False,
) -> list[str]:
    """Write the records of ``inputs`` with their media to ``out``; the summary lines.

    Raises:
        click.UsageError: see :func:`llava_inputs`.
        ValueError: a bad record, named (the caller removes what was written).
    """
    files, root = llava_inputs(inputs, media_root)
    from energon_pack_tools._vlm_datasets import ConversationCounts, make_conversation_dataset

    counts = ConversationCounts()
    make_conversation_dataset(
        out,
        _records(files),
        media_root=root,
        samples_per_shard=samples_per_shard,
        counts=counts,
        allow_absolute_media=allow_absolute_media,
    )
    shards = -(-counts.records // samples_per_shard)
    return [
        f"wrote {plural(counts.records, 'conversation')} ({plural(counts.images, 'image')}, "
        f"{plural(counts.videos, 'video')} of {plural(counts.frames, 'frame')}, "
        f"{counts.text_only:,} text-only) in {plural(shards, 'shard')} to {out} "
        "(crude webdataset for ConversationPackingTaskEncoder)",
        f"next: energon-pack analyze {out} --task conversation --processor PROCESSOR_DIR "
        "--pack-size 4096 --buffer-size 64",
    ]
