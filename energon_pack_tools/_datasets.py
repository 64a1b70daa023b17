# SPDX-License-Identifier: Apache-2.0
"""Write energon datasets from Python: WebDataset tar shards (or a JSONL file), then energon's
own ``prepare`` in-process. Sample ``i`` gets the key ``f"{i:06d}"`` (:func:`sample_key`);
shards are written as samples arrive, so a generator streams a corpus larger than memory::

    make_text_dataset(out, ["first document", "second document"], samples_per_shard=1)
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "check_dataset",
    "make_captioning_dataset",
    "make_jsonl_dataset",
    "make_text_dataset",
    "member_name_problem",
    "prepare_dataset",
    "sample_key",
]

#: The error for a JSON value nested deeper than Python's recursion limit (``json.loads``
#: recurses once per level): ``make-dataset`` prefixes it with ``file:line``.
JSON_TOO_DEEP = (
    "JSON nested too deeply to read (more than about 1000 levels of lists/objects); flatten "
    "or remove the record."
)


def sample_key(index: int) -> str:
    """The ``__key__`` the helpers give sample ``index``: ``sample_key(7) == "000007"``."""
    return f"{index:06d}"


def member_name_problem(name: str) -> str | None:
    """Why energon cannot take ``name`` as a tar member name, or None when it can.

    ``energon prepare`` stores keys as UTF-8 text: a name holding bytes that are not UTF-8 (read
    back as lone surrogates, ``"a.p\\udcffng"``) stops it with a ``UnicodeEncodeError``, and a
    newline or other control character breaks its index.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"not UTF-8 (byte {name[exc.start].encode('utf-8', 'surrogateescape')!r} at "
            f"character {exc.start}); rename the file (energon stores keys as UTF-8 text)"
        )
    bad = next((c for c in name if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return f"holds the control character {bad!r}; rename the file"
    return None


def _write_shards(path: Path, samples: Iterable[dict[str, bytes]], samples_per_shard: int) -> None:
    """Write ``samples`` as they arrive, ``samples_per_shard`` per tar.

    Only one sample is held at a time, so ``samples`` may be a generator over a corpus larger
    than memory. A shard is opened when its first sample arrives: no empty trailing shard.
    Keys are numbered (never duplicated); a member name energon could not index (not UTF-8, a
    control character: :func:`member_name_problem`) is refused before it is written.
    """
    path.mkdir(parents=True, exist_ok=True)
    tar: tarfile.TarFile | None = None
    try:
        for i, sample in enumerate(samples):
            if i % samples_per_shard == 0:
                if tar is not None:
                    tar.close()
                tar = tarfile.open(path / f"shard_{i // samples_per_shard:06d}.tar", "w")
            assert tar is not None
            for ext, data in sample.items():
                name = f"{sample_key(i)}.{ext}"
                problem = member_name_problem(name)
                if problem is not None:  # caught before energon prepare dies on it
                    raise ValueError(f"sample {i}: member name {name!r} is {problem}.")
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
    finally:
        if tar is not None:
            tar.close()


def check_dataset(path: Path | str) -> Path:
    """Refuse, with the fix, a path energon cannot load as a dataset; return it as a ``Path``.

    Checks what energon's own ``get_dataset_type`` sees (``.nv-meta`` of a webdataset, a prepared
    ``.jsonl``, a metadataset ``.yaml``) and that every shard ``.nv-meta/.info.json`` lists is on
    disk: ``data/`` whose ``shard_000001.tar`` was deleted fails here, before the loader starts,
    with ``data: shard shard_000001.tar is missing (listed in .nv-meta/.info.json); ...``.

    Raises:
        ValueError: not a dataset (suggests ``energon-pack make-dataset``), an unprepared JSONL,
            or missing shards.
    """
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.metadata import EnergonDatasetType, get_dataset_type

    path = Path(path)
    kind = get_dataset_type(EPath(str(path)))
    if kind is EnergonDatasetType.JSONL and not Path(f"{path}.idx").is_file():
        raise ValueError(
            f"{path} is not prepared (no {path.name}.idx): run `energon prepare {path}`, or make "
            f"a TextSample dataset from it with `energon-pack make-dataset OUT {path}`."
        )
    if kind in (EnergonDatasetType.INVALID, EnergonDatasetType.FILESYSTEM):
        raise ValueError(
            f"{path} is not an energon dataset (no .nv-meta/dataset.yaml): make one from .txt, "
            f".md or .jsonl files with `energon-pack make-dataset OUT {path}`, or run "
            f"`energon prepare {path}` on a directory of WebDataset tar shards."
        )
    if kind is EnergonDatasetType.WEBDATASET and (path / ".nv-meta" / ".info.json").is_file():
        info = json.loads((path / ".nv-meta" / ".info.json").read_text())
        missing = [name for name in info.get("shard_counts", {}) if not (path / name).is_file()]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ValueError(
                f"{path}: shard {missing[0]}{more} is missing (listed in .nv-meta/.info.json); "
                f"restore it, or rebuild the dataset (`energon prepare {path}` on the shards "
                "left, or `energon-pack make-dataset` from the source files)."
            )
    return path


def prepare_dataset(path: Path, *args: str) -> Path:
    """Run ``energon prepare ARGS PATH`` in-process (no interactive questions); return ``path``."""
    from megatron.energon.tools.prepare import command

    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            command.main(args=[*args, str(path)], standalone_mode=False)
    except SystemExit as e:  # click may still exit on success
        if e.code not in (0, None):
            raise RuntimeError(
                f"energon prepare {' '.join(args)} {path} failed ({e}):\n{log.getvalue()}"
            ) from e
    return path


def _prepare_webdataset(
    path: Path, sample_type: str, field_map: dict[str, str], split_ratio: str = "1,0,0"
) -> Path:
    return prepare_dataset(
        path,
        "--non-interactive",
        "--split-ratio",
        split_ratio,
        "--sample-type",
        sample_type,
        "--field-map",
        json.dumps(field_map),
    )


def make_text_dataset(
    path: Path, texts: Iterable[str], *, samples_per_shard: int = 16, split_ratio: str = "1,0,0"
) -> Path:
    """A ``TextSample`` dataset (``txt`` files) at ``path``, sample ``i`` has key ``"{i:06d}"``.

    ``split_ratio`` is energon's train,val,test (``"0,1,0"``: every shard in the val split).

    ``texts`` may be a list or a generator: it is consumed once, shard by shard, and never held
    in memory as a whole (``energon-pack make-dataset`` streams a JSONL of any size this way).
    If ``texts`` raises midway, the shards written so far stay in ``path`` (no ``.nv-meta``, so
    energon will not load them): write into a new directory and remove it on failure, as the
    CLI does.
    """
    path = Path(path)
    _write_shards(path, ({"txt": t.encode()} for t in texts), samples_per_shard)
    return _prepare_webdataset(path, "TextSample", {"text": "txt"}, split_ratio)


def make_captioning_dataset(
    path: Path,
    images: Sequence[bytes],
    captions: Sequence[str],
    *,
    samples_per_shard: int = 8,
    image_ext: str = "png",
) -> Path:
    """A ``CaptioningSample`` dataset: sample ``i`` is ``images[i]`` (encoded bytes) + caption."""
    if len(images) != len(captions):
        raise ValueError(f"{len(images)} images but {len(captions)} captions: pass one of each.")
    path = Path(path)
    samples = [{image_ext: im, "txt": c.encode()} for im, c in zip(images, captions)]
    _write_shards(path, samples, samples_per_shard)
    return _prepare_webdataset(path, "CaptioningSample", {"image": image_ext, "caption": "txt"})


def make_jsonl_dataset(path: Path, records: Sequence[dict[str, Any]]) -> Path:
    """A crude JSONL dataset (one ``json.dumps(record)`` per line) prepared with energon.

    ``path`` is the ``.jsonl`` file; load it with a task encoder that has a ``Cooker``.
    """
    path = Path(path)
    if path.suffix != ".jsonl":
        raise ValueError(f"{path} must end in .jsonl (energon recognises JSONL by the suffix).")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return prepare_dataset(path)
