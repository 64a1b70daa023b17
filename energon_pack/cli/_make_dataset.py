# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset``: text and JSONL files -> an energon ``TextSample`` dataset.

The first thing a new user needs: their documents as an energon dataset ready for packing.
Each ``.txt`` / ``.md`` file is one document; each line of a ``.jsonl`` file is one JSON object
whose ``--field`` (default ``text``) is one document; a directory contributes its ``.txt``,
``.md`` and ``.jsonl`` files (recursively, sorted). Documents are written in input order to
WebDataset tar shards (``000000.txt``, ``000001.txt``, ...) and ``energon prepare`` is run on
them (``TextSample``, field map ``{"text": "txt"}``, split 1,0,0)::

    $ energon-pack make-dataset data/ corpus.jsonl notes/readme.txt --samples-per-shard 1000
    wrote 12,345 documents (0 empty skipped) in 13 shards to data/ (energon TextSample)

A JSONL line that is not a JSON object, lacks the field, or holds a non-string names the file
and the line; empty strings are skipped and counted (the encoders would drop them anyway).

Documents stream from the inputs into the shards (:func:`iter_documents` feeds
:func:`energon_pack.tools._datasets.make_text_dataset` a generator), so a multi-GB JSONL needs no more
memory than one document and one shard's tar header. A bad line found midway stops the run and
removes what it wrote (``OUT`` is deleted, or emptied if it existed empty), so a failed run never
leaves something that looks like a dataset.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click

__all__ = ["DocumentCounts", "command", "iter_documents", "read_documents"]

TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl",)


def _expand(inputs: Iterable[Path]) -> Iterator[Path]:
    for path in inputs:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES + JSONL_SUFFIXES)
            if not found:
                raise ValueError(
                    f"{path}: directory holds no {'/'.join(TEXT_SUFFIXES + JSONL_SUFFIXES)} files."
                )
            yield from found
        else:
            yield path


def _jsonl_documents(path: Path, field: str) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg}).") from exc
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object per line, got "
                    f"{type(record).__name__}."
                )
            if field not in record:
                raise ValueError(
                    f"{path}:{lineno}: no field {field!r} (fields: {', '.join(sorted(record))}); "
                    "pass --field NAME to choose the text field."
                )
            value = record[field]
            if not isinstance(value, str):
                raise ValueError(
                    f"{path}:{lineno}: field {field!r} is {type(value).__name__}, not a string."
                )
            yield value


@dataclass
class DocumentCounts:
    """What :func:`iter_documents` has seen so far: documents yielded and empty ones skipped.

    Mutable on purpose: the generator updates it as it goes, so after the stream is exhausted it
    holds the totals (``wrote {documents} documents ({empty} empty skipped)``).
    """

    documents: int = 0  #: non-empty documents yielded
    empty: int = 0  #: empty or whitespace-only JSONL strings skipped


def iter_documents(
    inputs: Iterable[Path], *, field: str = "text", counts: DocumentCounts | None = None
) -> Iterator[str]:
    """The documents of ``inputs`` in order, read lazily: one file, one JSONL line at a time.

    Pass ``counts`` to learn how many documents were yielded and how many empty ones skipped.
    Validation is the same as :func:`read_documents`, but an error surfaces when the stream
    reaches the bad file or line, after the documents before it were yielded.

    Raises:
        ValueError: naming the file (and line) of a bad input, or, at the end of the stream,
            when nothing is left.
    """
    inputs = tuple(inputs)
    counts = DocumentCounts() if counts is None else counts
    for path in _expand(inputs):
        try:
            if path.suffix in JSONL_SUFFIXES:
                lines = 0
                for text in _jsonl_documents(path, field):
                    lines += 1
                    if text.strip():
                        counts.documents += 1
                        yield text
                    else:
                        counts.empty += 1
                if not lines:
                    raise ValueError(f"{path}: no JSON lines in this file; remove it or fill it.")
            elif path.suffix in TEXT_SUFFIXES:
                text = path.read_text(encoding="utf-8")
                if not text.strip():
                    raise ValueError(f"{path}: the file is empty (a .txt file is one document).")
                counts.documents += 1
                yield text
            else:
                raise ValueError(
                    f"{path}: unsupported file type {path.suffix!r}; use .txt/.md (one document "
                    "per file) or .jsonl (one JSON object per line)."
                )
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); convert it to "
                "UTF-8 (e.g. iconv -t utf-8) or leave it out."
            ) from exc
    if not counts.documents:
        raise ValueError(f"no non-empty documents in {', '.join(map(str, inputs))}.")


def read_documents(inputs: Iterable[Path], *, field: str = "text") -> tuple[list[str], int]:
    """All documents of ``inputs`` in order (a list), and how many empty ones were skipped.

    Holds every document in memory; :func:`iter_documents` is the streaming form.

    Raises:
        ValueError: naming the file (and line) of a bad input, or when nothing is left.
    """
    counts = DocumentCounts()
    docs = list(iter_documents(inputs, field=field, counts=counts))
    return docs, counts.empty


def _first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet (None if it exists)."""
    if path.exists():
        return None
    missing = path
    for parent in path.absolute().parents:
        if parent.exists():
            break
        missing = parent
    return missing


def _remove_created(out: Path, created: Path | None) -> None:
    """Undo a failed run: remove the directories it created, or empty ``out`` if it existed."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
    elif out.is_dir():
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


@click.command(name="make-dataset")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--field", default="text", show_default=True, help="JSONL field holding the text.")
@click.option("--samples-per-shard", type=click.IntRange(min=1), default=1000, show_default=True)
def command(out: Path, inputs: tuple[Path, ...], field: str, samples_per_shard: int) -> None:
    """Write INPUTS (.txt/.md files, .jsonl files, directories) as an energon dataset at OUT."""
    if out.exists() and any(out.iterdir()):
        raise click.ClickException(f"{out} exists and is not empty; choose a new directory.")
    from energon_pack.tools import make_text_dataset

    created = _first_missing(out)
    counts = DocumentCounts()
    try:
        # Streams: shards are written while the inputs are read, never all documents at once.
        make_text_dataset(
            out,
            iter_documents(inputs, field=field, counts=counts),
            samples_per_shard=samples_per_shard,
        )
    except BaseException as exc:
        # A bad line deep in a big file must not leave half a dataset behind.
        _remove_created(out, created)
        if isinstance(exc, ValueError):
            raise click.ClickException(str(exc)) from exc
        raise
    shards = -(-counts.documents // samples_per_shard)
    click.echo(
        f"wrote {counts.documents:,} documents ({counts.empty} empty skipped) in {shards} shards "
        f"to {out} (energon TextSample)"
    )
    click.echo(
        f"next: energon-pack analyze {out} --tokenizer TOKENIZER_DIR --pack-size 4096 "
        "--buffer-size 256"
    )
