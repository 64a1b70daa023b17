# SPDX-License-Identifier: Apache-2.0
"""Tiny, real energon datasets for tests and examples (tar shards + ``energon prepare``).

Every helper writes WebDataset tar shards (the files of one sample share a basename and are
adjacent: ``000001.png``, ``000001.txt``) or a JSONL file, then runs energon's own ``prepare``
command in-process, exactly as a user would on the command line::

    >>> texts = synthetic_texts(4, seed=0, min_words=1, max_words=3)  # doctest: +SKIP
    >>> make_text_dataset(tmp / "text", texts, samples_per_shard=2)    # doctest: +SKIP
    # tmp/text/shard_000000.tar: 000000.txt 000001.txt
    # tmp/text/shard_000001.tar: 000002.txt 000003.txt
    # tmp/text/.nv-meta/{dataset.yaml, split.yaml, .info.json, index.sqlite, index.uuid}

Sample keys are ``f"{i:06d}"`` so a test can check which source samples made it into a pack.
:func:`make_loader` builds the savable loader that the contract tests use (``repeat`` and
``num_workers`` explicit, checkpointing after every sample so save/restore is exact and fast).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "WORDS",
    "make_captioning_dataset",
    "make_jsonl_dataset",
    "make_loader",
    "make_text_dataset",
    "prepare_dataset",
    "sample_key",
    "synthetic_texts",
]

#: The vocabulary of :func:`synthetic_texts` (also what the test tokenizer is trained on).
WORDS: tuple[str, ...] = tuple(
    "the a of to and in is it that on for with as was by at from this be are or an which one "
    "packing energon token sample image caption model train buffer shard worker state restore "
    "loss label position document sequence attention kernel batch epoch seed random data".split()
)


def sample_key(index: int) -> str:
    """The ``__key__`` the helpers give sample ``index``: ``sample_key(7) == "000007"``."""
    return f"{index:06d}"


def synthetic_texts(
    n: int, *, seed: int = 0, min_words: int = 1, max_words: int = 40, words: Sequence[str] = WORDS
) -> list[str]:
    """``n`` deterministic sentences of ``min_words..max_words`` words drawn from ``words``."""
    if n < 0 or min_words < 0 or max_words < min_words:
        raise ValueError(
            f"need n >= 0 and 0 <= min_words <= max_words, got {n}, {min_words}, {max_words}"
        )
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(min_words, max_words)))
        for _ in range(n)
    ]


def _write_shards(path: Path, samples: Sequence[dict[str, bytes]], samples_per_shard: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for shard_start in range(0, len(samples), samples_per_shard):
        with tarfile.open(path / f"shard_{shard_start // samples_per_shard:06d}.tar", "w") as tar:
            for i in range(shard_start, min(shard_start + samples_per_shard, len(samples))):
                for ext, data in samples[i].items():
                    info = tarfile.TarInfo(f"{sample_key(i)}.{ext}")
                    info.size = len(data)
                    info.mtime = 0
                    tar.addfile(info, io.BytesIO(data))


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


def _prepare_webdataset(path: Path, sample_type: str, field_map: dict[str, str]) -> Path:
    return prepare_dataset(
        path,
        "--non-interactive",
        "--split-ratio",
        "1,0,0",
        "--sample-type",
        sample_type,
        "--field-map",
        json.dumps(field_map),
    )


def make_text_dataset(path: Path, texts: Sequence[str], *, samples_per_shard: int = 16) -> Path:
    """A ``TextSample`` dataset (``txt`` files) at ``path``, sample ``i`` has key ``"{i:06d}"``."""
    path = Path(path)
    _write_shards(path, [{"txt": t.encode()} for t in texts], samples_per_shard)
    return _prepare_webdataset(path, "TextSample", {"text": "txt"})


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


def make_loader(
    path: Path,
    task_encoder: Any,
    *,
    packing_buffer_size: int | None = 16,
    batch_size: int | None = None,
    num_workers: int = 0,
    repeat: bool = False,
    shuffle_buffer_size: int | None = None,
    seed_offset: int = 0,
    max_samples_per_sequence: int | None = None,
) -> Any:
    """A savable energon loader over ``path`` that checkpoints after every sample.

    ``repeat=False`` gives exactly one epoch; with workers, the state saved at any step restores
    exactly (``checkpoint_every_sec=0, checkpoint_every_min_n_samples=1``).
    """
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    worker_config = WorkerConfig(
        rank=0, world_size=1, num_workers=num_workers, seed_offset=seed_offset
    )
    dataset = get_train_dataset(
        str(path),
        worker_config=worker_config,
        batch_size=batch_size,
        packing_buffer_size=packing_buffer_size,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=max_samples_per_sequence,
        task_encoder=task_encoder,
        repeat=repeat,
    )
    return get_savable_loader(dataset, checkpoint_every_sec=0, checkpoint_every_min_n_samples=1)
