# SPDX-License-Identifier: Apache-2.0
"""What packing will do to a real dataset, measured through the real loader (``analyze``).

:func:`analyze_dataset` streams one epoch (no shuffle, ``num_workers=0``) through the packing
encoder, records each document's length and each emitted pack, replays the lengths through
``simulate`` with the same spec (:mod:`energon_pack_tools._replay`: the fills must agree) and
sweeps buffer sizes for the smallest reaching the target fill. See docs/howto/buffer-size.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megatron.energon.errors import FatalSampleError

from energon_pack.algorithms import PackingSpec, as_spec
from energon_pack.encoding import PackingStats
from energon_pack.samples import EncodedSample
from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.training import pin_memory_for_device
from energon_pack_tools._analysis_result import FIRST_PACKS, AnalysisResult
from energon_pack_tools._replay import replay_and_sweep

__all__ = ["FirstSamplesFailed", "analyze_dataset"]

#: ``labels`` at positions without a target (the products' and PyTorch's ignore index).
IGNORE_INDEX = -100

#: Failed samples in a row, before any document was read, after which the analysis stops
#: (energon's own tolerance is 100 in a row, each printed with its traceback).
FIRST_FAILURES = 8


class FirstSamplesFailed(FatalSampleError):
    """The first :data:`FIRST_FAILURES` samples all failed (a wrong ``--task`` or encoder).

    Attributes:
        count: How many failed.
        key: The first failed sample's ``__key__``.
        reason: Its ``Type: message`` (first line).
        sample: What the failing stage got (energon's raw sample: a dict with ``json`` for a
            crude dataset), for naming the encoder that reads it.
    """

    def __init__(self, count: int, key: str, reason: str, sample: Any) -> None:
        super().__init__(f"the first {count} samples all failed, e.g. {key!r}: {reason}")
        self.count, self.key, self.reason, self.sample = count, key, reason, sample


class _Quiet:
    """The analysis' energon error handler: no traceback per sample (the report lists the
    skipped ones with their reasons, counted by the encoder's ``SkipCounter``), and a stop when
    the first :data:`FIRST_FAILURES` samples fail before any document was read."""

    def __init__(self, read: list[int], stats: PackingStats) -> None:
        self.read = read  #: the recorded document lengths (non-empty: something was read)
        self.stats = stats  #: the encoder's, where its ``SkipCounter`` just recorded the skip
        self.failures: list[tuple[str, str, Any]] = []

    def __call__(self, exc: Exception, sample: Any, sources: Any = None) -> None:
        if self.read:
            return
        key, reason = self.stats.skipped_samples[-1]
        self.failures.append((key, reason, sample))
        if len(self.failures) >= FIRST_FAILURES:
            key, reason, first = self.failures[0]
            raise FirstSamplesFailed(len(self.failures), key, reason, first)


class _DropErrorLines(io.TextIOBase):
    """stdout without energon's per-failure prints (``Except ... in ...``, ``ErrorContext ...
    failed n/100 times in a row``), which follow every skipped sample; the rest goes to
    ``out``."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.line = ""

    def write(self, text: str) -> int:
        self.line += text
        *done, self.line = self.line.split("\n")
        for line in done:
            if not line.startswith(("Except ", "ErrorContext ")):
                self.out.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self.line and not self.line.startswith(("Except ", "ErrorContext ")):
            self.out.write(self.line)
        self.line = ""
        self.out.flush()


@contextlib.contextmanager
def _recording_documents(
    encoder: Any,
) -> Iterator[tuple[list[int], list[tuple[int, int]], list[int], list[float]]]:
    """Within the block, ``encoder.encode_document`` also appends each non-empty document's
    length, media load (``EncodedSample.media_load``: media tokens, images + videos) and the
    bytes it holds while buffered (:func:`_held_bytes`), in read order, to the yielded lists,
    and adds its encode time to the last one (one float); any packing task encoder works."""
    lengths: list[int] = []
    loads: list[tuple[int, int]] = []
    held: list[int] = []
    seconds = [0.0]
    inner = encoder.encode_document

    def encode_document(sample: Any) -> list[EncodedSample]:
        start = time.perf_counter()
        result = inner(sample)
        seconds[0] += time.perf_counter() - start
        docs = [result] if isinstance(result, EncodedSample) else list(result)
        for d in docs:
            if len(d.tokens):
                lengths.append(len(d.tokens))
                loads.append(tuple(getattr(d, "media_load", (0, 0))))
                held.append(_held_bytes(d))
        return docs

    encoder.encode_document = encode_document
    try:
        yield lengths, loads, held, seconds
    finally:
        del encoder.encode_document


def _held_bytes(document: Any) -> int:
    """Bytes of the arrays (tokens, loss mask, pixels) and encoded media (``bytes``) an encoded
    document holds, its lists and tuples included: what it costs while it waits in the packing
    buffer. A 100-token text document with an int64 ``tokens`` and a bool ``loss_mask``: 900."""
    if dataclasses.is_dataclass(document):
        fields = [getattr(document, f.name, None) for f in dataclasses.fields(document)]
    else:
        fields = list(getattr(document, "__dict__", {}).values())
    total, todo = 0, fields
    while todo:
        value = todo.pop()
        if isinstance(value, (list, tuple)):
            todo.extend(value)
        elif hasattr(value, "element_size") and hasattr(value, "numel"):  # torch.Tensor
            total += int(value.element_size() * value.numel())
        elif hasattr(value, "nbytes"):  # numpy
            total += int(value.nbytes)
        elif isinstance(value, (bytes, bytearray)):
            total += len(value)
    return total


def _media_tokens(pack: Any) -> int | None:
    """Image and video placeholder tokens of a pack (``None``: its type carries no media)."""
    if hasattr(pack, "num_media_tokens"):
        return int(pack.num_media_tokens)
    spans = getattr(pack, "image_spans", None)
    if spans is None:
        return None
    spans = spans.view(-1, 2)
    return int((spans[:, 1] - spans[:, 0]).sum())


def _dataset_order_loader(
    path: Path, encoder: Any, buffer_size: int, limit: int | None, handler: Any = None
) -> Any:
    """One epoch in the dataset's own order: no shuffle buffer and, unlike energon's default
    for training, no shuffling of shard slices (``shuffle_over_epochs_multiplier=None``)
    and one shard read at a time (``parallel_shard_iters=1``). ``limit``: only the first
    ``limit`` samples (energon's ``DatasetSubset``; the rest is never read). ``handler``: the
    worker config's ``global_error_handler`` (default energon's, a traceback per sample)."""
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from megatron.energon.flavors.webdataset.structs import DatasetSubset

    handlers = {} if handler is None else {"global_error_handler": handler}

    def build(subset: Any) -> Any:
        return get_train_dataset(
            str(path),
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0, **handlers),
            batch_size=None,
            packing_buffer_size=buffer_size,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            shuffle_over_epochs_multiplier=None,
            parallel_shard_iters=1,
            task_encoder=encoder,
            repeat=False,
            subset=subset,
        )

    if limit is None:
        return pin_memory_for_device(get_loader(build(None)))
    try:
        return pin_memory_for_device(get_loader(build(DatasetSubset(absolute_range=(0, limit)))))
    except AssertionError as exc:  # energon: the limit is past the end of the dataset
        if "Subset samples" not in str(exc):
            raise
        return pin_memory_for_device(get_loader(build(None)))


@dataclass(frozen=True, kw_only=True)
class _Measured:
    """What the real loader did to one epoch (phase 1)."""

    lengths: list[int]  #: each non-empty document's length in reading order, before the policy
    media_loads: list[tuple[int, int]]  #: (media tokens, images + videos) of each, same order
    pack_fills: list[float]  #: real tokens / pack size, per emitted pack
    first_packs: list[list[int]]  #: document lengths of the first FIRST_PACKS packs
    held_bytes: list[int]  #: bytes each document holds while buffered, same order
    seconds: float  #: time spent in ``encode_document`` (tokenize, process media), all samples
    tokens: int  #: real tokens in packs
    loss_tokens: int  #: positions of the packs with a target (``labels != -100``)
    documents: int  #: documents (pieces) in packs
    stats: PackingStats  #: the encoder's counts (empty, truncated, split, dropped, skipped)
    media: list[int] | None  #: media tokens per emitted pack (``None``: no media)


def _measure(
    dataset: Path, encoder: Any, buffer_size: int, limit: int | None, progress: bool
) -> _Measured:
    """Phase 1: one epoch of ``dataset`` through ``encoder`` in a real energon loader, without
    a traceback per failed sample.

    Raises:
        FirstSamplesFailed: the first :data:`FIRST_FAILURES` samples failed, none was read.
    """
    with _recording_documents(encoder) as (lengths, loads, held, seconds):
        quiet = contextlib.redirect_stdout(_DropErrorLines(sys.stdout))
        try:
            with quiet:
                measured = _packs_of(
                    dataset, encoder, buffer_size, limit, progress, _Quiet(lengths, encoder.stats)
                )
        except FatalSampleError as exc:  # energon wraps it once per stage it passes
            cause: BaseException | None = exc
            while cause is not None and not isinstance(cause, FirstSamplesFailed):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            raise cause from None
    return dataclasses.replace(
        measured,
        lengths=list(lengths),
        media_loads=list(loads),
        held_bytes=list(held),
        seconds=seconds[0],
    )


def _packs_of(
    dataset: Path,
    encoder: Any,
    buffer_size: int,
    limit: int | None,
    progress: bool,
    handler: Any = None,
) -> _Measured:
    """The loader's packs: fills, documents, media tokens (``lengths``, loads left empty)."""
    from tqdm import tqdm

    loader = _dataset_order_loader(dataset, encoder, buffer_size, limit, handler)
    pack_fills: list[float] = []
    first_packs: list[list[int]] = []
    media: list[int | None] = []
    tokens = documents = loss_tokens = 0
    bar = tqdm(
        iter(loader),
        desc="packing",
        unit="pack",
        disable=not progress,
        file=sys.stderr,
        mininterval=0.5,
    )
    for pack in bar:
        n = int(sum(pack.doc_lengths))
        tokens += n
        documents += len(pack.doc_lengths)
        loss_tokens += int((pack.labels != IGNORE_INDEX).sum())
        pack_fills.append(n / encoder.config.pack_size)
        media.append(_media_tokens(pack))
        if len(first_packs) < FIRST_PACKS:
            first_packs.append([int(d) for d in pack.doc_lengths])
    return _Measured(
        lengths=[],
        media_loads=[],
        held_bytes=[],
        seconds=0.0,
        pack_fills=pack_fills,
        first_packs=first_packs,
        tokens=tokens,
        loss_tokens=loss_tokens,
        documents=documents,
        stats=encoder.stats,
        media=None if None in media else [int(m or 0) for m in media],
    )


def _report(
    dataset: Path | str,
    spec: PackingSpec,
    buffer_size: int,
    measured: _Measured,
    figures: dict[str, Any],
) -> AnalysisResult:
    """Phase 4: the loader's figures and the simulated ones in one result."""
    packs, stats, size = len(measured.pack_fills), measured.stats, spec.pack_size
    return AnalysisResult(
        dataset=str(dataset),
        pack_size=size,
        buffer_size=buffer_size,
        algorithm=spec.algorithm,
        overlong=spec.overlong.value,
        carry_over=spec.carry_over,
        samples_in=len(measured.lengths),
        samples_out=measured.documents,
        dropped_empty=stats.dropped_empty,
        packs=packs,
        tokens=measured.tokens,
        loss_tokens=measured.loss_tokens,
        bytes_per_document=sum(measured.held_bytes) / max(len(measured.held_bytes), 1),
        seconds_per_sample=measured.seconds / max(len(measured.lengths), 1),
        fill=measured.tokens / (packs * size) if packs else 0.0,
        documents_per_pack=measured.documents / packs if packs else 0.0,
        truncated_overlong=stats.truncated_overlong,
        split_overlong=stats.split_overlong,
        dropped_overlong=stats.dropped_overlong,
        dropped_over_budget=stats.dropped_over_budget,
        skipped=stats.skipped,
        skipped_samples=list(stats.skipped_samples),
        high_bit_depth_images=stats.high_bit_depth_images,
        high_bit_depth_samples=list(stats.high_bit_depth_samples),
        lengths=measured.lengths,
        media_loads=measured.media_loads if measured.media is not None else None,
        pack_fills=measured.pack_fills,
        first_packs=measured.first_packs,
        pack_media_tokens=measured.media,
        **figures,
    )


def analyze_dataset(
    dataset: Path | str,
    tokenizer: Any = None,
    spec: PackingSpec | int | None = None,
    *,
    buffer_size: int,
    encoder: Any = None,
    limit: int | None = None,
    target_fill: float = 0.99,
    progress: bool = False,
    **spec_fields: Any,
) -> AnalysisResult:
    """Measure one epoch of ``dataset`` through the LLM packing encoder (or ``encoder``),
    replay it through ``simulate``, sweep buffer sizes, report (see the module docstring).

    Args:
        dataset: An energon dataset (webdataset dir, or a prepared ``.jsonl`` with ``text``).
        tokenizer: A transformers tokenizer or a local tokenizer directory (without
            ``encoder``).
        spec: The :class:`~energon_pack.algorithms.PackingSpec` of the encoder, the loader and
            the simulation; or its fields as keywords (``pack_size=4096, overlong="split"``).
        buffer_size: energon's ``packing_buffer_size``.
        limit: Read only the first ``limit`` samples (the rest is never read).
        target_fill: Fill the recommended buffer must reach (capped at the bound).
        progress: Show a tqdm bar over packs on stderr.
        spec_fields: :class:`~energon_pack.algorithms.PackingSpec` fields replacing the spec's.
        encoder: A built packing task encoder for datasets the LLM encoder does not read
            (``VQAPackingTaskEncoder(tok, processor, pack_size=512)``); its config is the
            spec, so ``tokenizer``, ``spec`` and spec fields must not be given. Packs with
            images or videos add media and text tokens to the result (``media_figures``).
    """
    if encoder is not None:
        if tokenizer is not None or spec is not None or spec_fields:
            raise ValueError("analyze_dataset: give encoder=, or tokenizer and the spec; not both.")
        spec = encoder.config
    else:
        if tokenizer is None:
            raise ValueError("analyze_dataset: give a tokenizer (or a built encoder=).")
        spec = as_spec(spec, **spec_fields)
        encoder = LLMPackingTaskEncoder(tokenizer, config=spec, log_every=0)
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit} must be >= 1 (or None for the whole dataset).")
    measured = _measure(Path(dataset), encoder, buffer_size, limit, progress)
    figures = replay_and_sweep(
        measured.lengths,
        measured.media_loads,
        measured.tokens,
        spec,
        buffer_size=buffer_size,
        target_fill=target_fill,
    )
    return _report(dataset, spec, buffer_size, measured, figures)
