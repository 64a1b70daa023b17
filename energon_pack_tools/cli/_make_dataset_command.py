# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset``: text and JSONL files -> an energon ``TextSample`` dataset
(``--task sft``: :mod:`energon_pack_tools.cli._make_sft`; ``--task conversation``:
:mod:`energon_pack_tools.cli._make_conversations`).

Each ``.txt`` / ``.md`` file is one document, each JSONL line's ``--field`` one document; a
directory contributes its files recursively. Documents stream into tar shards and ``energon
prepare`` runs on them; a bad line or a full disk stops the run, names the file and line, and
removes what was written. See docs/quickstart.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from energon_pack_tools._datasets import JSON_TOO_DEEP
from energon_pack_tools.cli._make_conversations import write_conversations
from energon_pack_tools.cli._make_sft import write_sft
from energon_pack_tools.cli._output import plural, writing_dataset

__all__ = [
    "DocumentCounts",
    "InputFiles",
    "collect_inputs",
    "command",
    "iter_documents",
    "read_documents",
]

TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl",)
SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES


@dataclass(frozen=True)
class InputFiles:
    """The files :func:`collect_inputs` found: what will be read, and what was left out."""

    files: tuple[Path, ...]  #: supported files, in reading order
    skipped: tuple[Path, ...]  #: files of other types found inside directories (not read)

    def skipped_note(self, first: int = 5) -> str | None:
        """``"skipped 2 files of other types in directories: d/a.csv, d/b.png"`` (or None)."""
        if not self.skipped:
            return None
        names = ", ".join(str(p) for p in self.skipped[:first])
        more = f", ... ({len(self.skipped) - first} more)" if len(self.skipped) > first else ""
        return (
            f"skipped {plural(len(self.skipped), 'file')} of other types in directories "
            f"(only {'/'.join(SUFFIXES)} are read): {names}{more}"
        )


def collect_inputs(inputs: Iterable[Path]) -> InputFiles:
    """Expand directories (recursively, sorted) and check the inputs before anything is read.

    ``[d/, notes.txt]`` with ``d/a.jsonl``, ``d/b.csv`` -> files ``(d/a.jsonl, notes.txt)``,
    skipped ``(d/b.csv,)``.

    Raises:
        ValueError: a file of an unsupported type named directly, a directory with no supported
            file, or the same file reached twice (``a.txt a.txt``, or ``d/`` and ``d/a.txt``).
    """
    files: list[Path] = []
    skipped: list[Path] = []
    seen: dict[Path, Path] = {}
    for path in inputs:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file())
            chosen = [p for p in found if p.suffix in SUFFIXES]
            skipped.extend(p for p in found if p.suffix not in SUFFIXES)
            if not chosen:
                raise ValueError(f"{path}: directory holds no {'/'.join(SUFFIXES)} files.")
        elif path.suffix not in SUFFIXES:
            raise ValueError(
                f"{path}: unsupported file type {path.suffix!r}; use .txt/.md (one document "
                "per file) or .jsonl (one JSON object per line)."
            )
        else:
            chosen = [path]
        for file in chosen:
            first = seen.setdefault(file.resolve(), file)
            if first is not file:
                raise ValueError(
                    f"{file} is given twice (also as {first}): its documents would be written "
                    "twice; name each file or directory once."
                )
            files.append(file)
    return InputFiles(tuple(files), tuple(skipped))


def _jsonl_documents(path: Path, field: str) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg}).") from exc
            except RecursionError as exc:  # json.loads recurses once per nesting level
                raise ValueError(f"{path}:{lineno}: {JSON_TOO_DEEP}") from exc
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object per line, got "
                    f"{type(record).__name__}."
                )
            if field not in record:
                sft = {"prompt", "response"} <= set(record)
                raise ValueError(
                    f"{path}:{lineno}: no field {field!r} (fields: {', '.join(sorted(record))}); "
                    + (
                        "prompt/response pairs are SFT data: pass --task sft."
                        if sft
                        else "pass --field NAME to choose the text field."
                    )
                )
            value = record[field]
            if not isinstance(value, str):
                raise ValueError(
                    f"{path}:{lineno}: field {field!r} is {type(value).__name__}, not a string."
                )
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:  # JSON allows "\\ud800" alone; UTF-8 does not
                raise ValueError(
                    f"{path}:{lineno}: field {field!r} holds a lone surrogate "
                    f"({value[exc.start]!r} at character {exc.start}), which is not text; "
                    "fix or remove the line."
                ) from exc
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
        ValueError: naming the file (and line) of a bad input (see also :func:`collect_inputs`),
            or, at the end of the stream, when nothing is left.
    """
    inputs = tuple(inputs)
    counts = DocumentCounts() if counts is None else counts
    for path in collect_inputs(inputs).files:
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
            else:
                text = path.read_text(encoding="utf-8")
                if not text.strip():
                    raise ValueError(f"{path}: the file is empty (a .txt file is one document).")
                counts.documents += 1
                yield text
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); convert it to "
                "UTF-8 (e.g. iconv -t utf-8) or leave it out."
            ) from exc
        except OSError as exc:  # an input, not the output: say so
            raise ValueError(f"cannot read {path}: {exc.strerror or exc}.") from exc
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


#: What ``--task`` writes: the input kinds and the energon dataset type.
TASKS = ("text", "sft", "conversation")


@click.command(name="make-dataset")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--task",
    type=click.Choice(TASKS),
    default="text",
    show_default=True,
    help="text: .txt/.md/.jsonl documents -> TextSample. sft: prompt/response .jsonl -> a "
    "crude webdataset for SFTPackingTaskEncoder. conversation: LLaVA .json/.jsonl records with "
    "images and videos -> a crude webdataset for ConversationPackingTaskEncoder.",
)
@click.option("--field", default=None, help="--task text: JSONL field holding the text [text].")
@click.option(
    "--media-root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="--task conversation: the folder the records' image/video paths are relative to "
    "(default: the folder of the JSON(L) inputs).",
)
@click.option(
    "--allow-absolute-media",
    is_flag=True,
    help="--task conversation: also read absolute image/video paths and symlinks whose target "
    "leaves --media-root (by default a path is judged by its resolved target and only files "
    "under --media-root are read; a '../' path is always refused).",
)
@click.option("--samples-per-shard", type=click.IntRange(min=1), default=1000, show_default=True)
def command(
    out: Path,
    inputs: tuple[Path, ...],
    task: str,
    field: str | None,
    media_root: Path | None,
    allow_absolute_media: bool,
    samples_per_shard: int,
) -> None:
    """Write INPUTS as an energon dataset at OUT: text files and JSONL (--task text), or
    LLaVA conversations with their media (--task conversation --media-root DIR)."""
    with writing_dataset(out):
        if task == "conversation":
            if field is not None:
                raise click.UsageError(
                    "--field is for --task text; conversations are read from each record's "
                    "'conversations' (from/value) or 'messages' (role/content)."
                )
            lines = write_conversations(
                out, inputs, media_root, samples_per_shard, allow_absolute_media
            )
        else:
            if media_root is not None or allow_absolute_media:
                name = "--media-root" if media_root is not None else "--allow-absolute-media"
                raise click.UsageError(f"{name} is for --task conversation.")
            if task == "sft":
                if field is not None:
                    raise click.UsageError("--field is for --task text; sft reads prompt/response.")
                lines = write_sft(out, inputs, samples_per_shard)
            else:
                lines = _write_text(out, inputs, field or "text", samples_per_shard)
    for line in lines:
        click.echo(line)


def _write_text(
    out: Path, inputs: tuple[Path, ...], field: str, samples_per_shard: int
) -> list[str]:
    """Stream the documents of ``inputs`` into a ``TextSample`` dataset; the summary lines."""
    found = collect_inputs(inputs)
    from energon_pack_tools._datasets import make_text_dataset

    counts = DocumentCounts()
    # Streams: shards are written while the inputs are read, never all documents at once.
    make_text_dataset(
        out,
        iter_documents(found.files, field=field, counts=counts),
        samples_per_shard=samples_per_shard,
    )
    note = found.skipped_note()
    shards = -(-counts.documents // samples_per_shard)
    return [
        *([note] if note is not None else []),
        f"wrote {plural(counts.documents, 'document')} ({counts.empty} empty skipped) in "
        f"{plural(shards, 'shard')} to {out} (energon TextSample)",
        f"next: energon-pack analyze {out} --tokenizer TOKENIZER_DIR --pack-size 4096 "
        "--buffer-size 256",
    ]
