# SPDX-License-Identifier: Apache-2.0
"""What the encoders wrap around energon's dataset building and restoring, so nothing is lost in
silence and nothing is counted twice.

:func:`counting_skips` makes every stage's error handler a :class:`SkipCounter`: a sample energon
skips (a corrupt image, invalid UTF-8) is counted in ``stats.skipped`` before the user's handler
runs, and under ``overlong="error"`` an over-long sample becomes :class:`FatalOverlongSampleError`,
which energon never swallows. :func:`restoring_item` tells the encoders that energon is only
rebuilding an item (``restore_sample``, or re-encoding buffers inside :func:`rebuilding`), so they
count nothing. :func:`without_shard_print` drops energon's ``sample_range=`` lines from stdout.
Docs: docs/howto/loss.md (counts), docs/concepts/energon.md.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

from megatron.energon import WorkerConfig
from megatron.energon.errors import FatalSampleError

from energon_pack.algorithms import OverlongPolicy, OverlongSampleError

__all__ = [
    "FatalOverlongSampleError",
    "SkipCounter",
    "building_datasets",
    "counting_skips",
    "rebuilding",
    "restoring_item",
    "sample_keys",
    "without_shard_print",
]

#: Longest reason kept per skipped sample (the first line of the exception, cut here).
MAX_REASON = 300


class FatalOverlongSampleError(FatalSampleError, OverlongSampleError):
    """A sample is longer than the pack under ``overlong="error"``: the loader stops.

    Both an :class:`~energon_pack.algorithms.OverlongSampleError` and energon's
    ``FatalSampleError`` (which its error handler never swallows).
    """


def sample_keys(sample: Any) -> list[str]:
    """``__key__`` of what a handler got: a sample, a raw dict, energon's ``RawSampleData``
    (the decoder's input: its ``data`` holds one dict per joined part, same key), or a list of
    them (a buffer)."""
    if isinstance(sample, (list, tuple)):
        return [k for s in sample for k in sample_keys(s)]
    key = sample.get("__key__") if isinstance(sample, dict) else getattr(sample, "__key__", None)
    parts = getattr(sample, "data", None)
    if key is None and isinstance(parts, (list, tuple)) and parts:
        return sample_keys(parts[0])
    if key is None:
        return ["?"]
    return [",".join(map(str, key)) if isinstance(key, (list, tuple)) else str(key)]


def _reason(exc: BaseException) -> str:
    """``Type: first line``, then its cause's (energon's ``DecodingError`` has no message)."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 3:
        lines = str(seen).strip().splitlines()
        parts.append(f"{type(seen).__name__}: {lines[0] if lines else ''}".rstrip(": "))
        seen = seen.__cause__ or seen.__context__
    text = " <- ".join(parts)
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def _note(keys: list[str], reason: str, exc: BaseException) -> str:
    """``energon_pack: skipped sample '000004' (counted in stats.skipped): <reason>; <fix>``.

    Attached to the exception, so the last lines of the handler's traceback name the sample
    even where the exception has no message (webdataset's ``DecodingError``)."""
    fix = "fix or remove it"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, UnicodeDecodeError):
            fix = "a text field is not UTF-8: convert it (iconv -t utf-8) or remove the sample"
        cause = cause.__cause__ or cause.__context__
    field = getattr(exc, "k", None)  # DecodingError: the field that failed
    where = f" field {field!r}" if isinstance(field, str) else ""
    named = ", ".join(map(repr, keys))
    return (
        f"energon_pack: skipped sample {named}{where} (counted in stats.skipped): {reason}; {fix}"
    )


class SkipCounter:
    """An energon error handler that counts the skipped samples, then calls ``handler``.

    Args:
        encoder: The task encoder whose ``stats`` count the skips and whose
            ``config.overlong`` decides whether an over-long sample stops the run.
        handler: The handler it stands in front of (the worker config's, e.g. energon's
            ``log_exception``), called for every skipped sample.
    """

    def __init__(self, encoder: Any, handler: Any) -> None:
        self.encoder = encoder
        self.handler = handler

    def __call__(self, exc: Exception, sample: Any, sources: Any = None) -> None:
        policy = OverlongPolicy(self.encoder.config.overlong)
        if isinstance(exc, OverlongSampleError) and policy is OverlongPolicy.ERROR:
            raise FatalOverlongSampleError(str(exc)) from None
        reason, keys = _reason(exc), sample_keys(sample)
        for key in keys:
            self.encoder.stats.record_skip(key, reason)
        if hasattr(exc, "add_note"):  # Python 3.11+: the handler's traceback ends naming it
            exc.add_note(_note(keys, reason, exc))
        if self.handler is not None:
            self.handler(exc, sample, sources)


@contextlib.contextmanager
def counting_skips(encoder: Any, worker_config: Any) -> Iterator[None]:
    """While energon builds datasets, every stage's error handler is a :class:`SkipCounter`.

    energon's stages take ``worker_config.global_error_handler`` when they are constructed;
    the user's handler is put back afterwards, so the worker config is left as it was.
    """
    previous = worker_config.global_error_handler
    if not isinstance(previous, SkipCounter):
        worker_config.global_error_handler = SkipCounter(encoder, previous)
    try:
        yield
    finally:
        worker_config.global_error_handler = previous


def restoring_item() -> bool:
    """Whether energon is rebuilding an item with ``restore_sample``, or re-encoding buffered
    samples after a restore (:func:`rebuilding`), right now.

    energon activates the worker config with an ``override_global_rank`` only there (the
    loader's ``restore_sample``); the encoders then count nothing, since the item was counted
    when it was first made.
    """
    override = getattr(WorkerConfig, "_worker_override_global_rank", None) is not None
    return override or _rebuilding > 0


_rebuilding = 0


@contextlib.contextmanager
def rebuilding() -> Iterator[None]:
    """Mark re-encoding of samples that were already counted (energon refilling buffers after a
    restore): :func:`restoring_item` is True inside, so the encoders count nothing."""
    global _rebuilding
    _rebuilding += 1
    try:
        yield
    finally:
        _rebuilding -= 1


@contextlib.contextmanager
def without_shard_print() -> Iterator[None]:
    """Drop energon's ``rank=0, worker=0: sample_range=...`` lines from stdout while it builds
    datasets: for webdatasets energon prints them only with ``ENERGON_DEBUG_SHARD_PRINT=1``, for
    JSONL datasets always. Everything else printed there is passed on."""
    if os.environ.get("ENERGON_DEBUG_SHARD_PRINT") == "1":
        yield
        return
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            yield
    finally:
        lines = buffer.getvalue().splitlines(keepends=True)
        sys.stdout.write("".join(x for x in lines if not _SHARD_PRINT.match(x)))


_SHARD_PRINT = re.compile(r"rank=\d+, worker=\d+: sample_range=")


@contextlib.contextmanager
def building_datasets(encoder: Any, worker_config: Any) -> Iterator[None]:
    """While energon builds an encoder's datasets: skips counted (:func:`counting_skips`) and
    the shard print dropped (:func:`without_shard_print`)."""
    with counting_skips(encoder, worker_config), without_shard_print():
        yield
