# SPDX-License-Identifier: Apache-2.0
"""Nothing lost in silence: count what energon's error handler skips, stop on ``overlong="error"``.

energon runs every stage of the loader (decoding, ``encode_sample``, packing, batching) under
its error handler (``WorkerConfig.global_error_handler``, by default: print the traceback and
skip the sample). A sample skipped there never reaches the task encoder, so it would be missing
from every count. :class:`SkipCounter` sits in front of the user's handler: it counts the
sample in the encoder's :class:`~energon_pack.encoding.PackingStats` (``skipped``, with key and
reason in ``skipped_samples``), then calls the user's handler as before. The packing task
encoders install it while energon builds their datasets (:func:`counting_skips`), so every
stage's handler is the counter, in every worker.

The same handler turns an :class:`~energon_pack.algorithms.OverlongSampleError` under
``overlong="error"`` into :class:`FatalOverlongSampleError`, one of energon's fatal errors
(``FatalSampleError``, never swallowed): the run stops at the first over-long sample with the
sample's key, length, the pack size and the other policies in one line, at any number of
workers. Raised from the handler, the error keeps its type (``except OverlongSampleError``
catches it in the training loop; with workers torch re-raises it there under the same type).

Example: a corrupt PNG ``"000003"`` is decoded by energon before ``encode_sample``; the loader
goes on, and afterwards ``encoder.stats.skipped == 1`` and ``encoder.stats.skipped_samples ==
deque([("000003", "UnidentifiedImageError: cannot identify image file ...")])``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from megatron.energon.errors import FatalSampleError

from energon_pack.algorithms import OverlongPolicy, OverlongSampleError

__all__ = ["FatalOverlongSampleError", "SkipCounter", "counting_skips", "sample_keys"]

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
