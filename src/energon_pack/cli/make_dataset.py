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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import click

__all__ = ["command", "read_documents"]

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


def read_documents(inputs: Iterable[Path], *, field: str = "text") -> tuple[list[str], int]:
    """All documents of ``inputs`` in order, and how many empty ones were skipped.

    Raises:
        ValueError: naming the file (and line) of a bad input, or when nothing is left.
    """
    docs: list[str] = []
    empty = 0
    for path in _expand(inputs):
        try:
            if path.suffix in JSONL_SUFFIXES:
                before = len(docs) + empty
                for text in _jsonl_documents(path, field):
                    if text.strip():
                        docs.append(text)
                    else:
                        empty += 1
                if len(docs) + empty == before:
                    raise ValueError(f"{path}: no JSON lines in this file; remove it or fill it.")
            elif path.suffix in TEXT_SUFFIXES:
                text = path.read_text(encoding="utf-8")
                if not text.strip():
                    raise ValueError(f"{path}: the file is empty (a .txt file is one document).")
                docs.append(text)
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
    if not docs:
        raise ValueError(f"no non-empty documents in {', '.join(map(str, inputs))}.")
    return docs, empty


@click.command(name="make-dataset")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--field", default="text", show_default=True, help="JSONL field holding the text.")
@click.option("--samples-per-shard", type=click.IntRange(min=1), default=1000, show_default=True)
def command(out: Path, inputs: tuple[Path, ...], field: str, samples_per_shard: int) -> None:
    """Write INPUTS (.txt/.md files, .jsonl files, directories) as an energon dataset at OUT."""
    if out.exists() and any(out.iterdir()):
        raise click.ClickException(f"{out} exists and is not empty; choose a new directory.")
    try:
        docs, empty = read_documents(inputs, field=field)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    from energon_pack.datasets import make_text_dataset

    make_text_dataset(out, docs, samples_per_shard=samples_per_shard)
    shards = -(-len(docs) // samples_per_shard)
    click.echo(
        f"wrote {len(docs):,} documents ({empty} empty skipped) in {shards} shards to {out} "
        "(energon TextSample)"
    )
    click.echo(
        f"next: energon-pack analyze {out} --tokenizer TOKENIZER_DIR --pack-size 4096 "
        "--buffer-size 256"
    )
