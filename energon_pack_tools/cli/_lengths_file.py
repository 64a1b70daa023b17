# SPDX-License-Identifier: Apache-2.0
"""Read a lengths file for ``energon-pack simulate``: a text file or a 1-D integer ``.npy``.

A text file holds one token count per line, or ``length media_tokens media_items`` per line
(``512 256 1`` for an image document, ``90 0 0`` for text); blank lines and ``#`` comments are
skipped, and a bad line is named by its 1-based number with the fix.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
import numpy as np

from energon_pack.algorithms import MediaLoad

__all__ = ["load_lengths"]

_HINT = "LENGTHS_FILE"
#: What each column of a text line counts, in order.
_COLUMNS = ("token count", "media token count", "count of images and videos")
#: The fix named in a message about a line, by the file's number of columns.
_FIX = {
    1: "write one whole number per line",
    3: "write three whole numbers per line: length media_tokens media_items",
}

#: Why a zero length is refused, and the fix.
_ZERO = (
    "a document has at least one token (the encoders drop empty ones before packing); leave it out."
)


def _bad(message: str) -> click.BadParameter:
    return click.BadParameter(message, param_hint=_HINT)


def _whole(text: str, where: str, column: str, fix: str) -> int:
    """``text`` as a whole number >= 0, or a message naming ``where`` and what it is instead."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is not None and value >= 0:
        return value
    try:
        number = float(text)
    except ValueError:
        number = None
    if value is not None:
        what = "is negative"
    elif number is not None and math.isnan(number):
        what = "is nan (not a number)"
    elif number is not None and math.isinf(number):
        what = "is infinite"
    elif number is not None:
        what = "is not a whole number"
    else:
        what = "is not a number"
    raise _bad(f"{where}: {text!r} {what}, not a {column}; {fix}.")


def _check_columns(fields: list[str], where: str, first: tuple[str, int] | None) -> None:
    """One or three columns, as many as the first line (``first``: where it is, its count)."""
    n = len(fields)
    if n not in _FIX:
        raise _bad(
            f"{where}: {n} columns ({' '.join(fields)!r}); write `length` or "
            "`length media_tokens media_items` per line."
        )
    if first is not None and n != first[1]:
        raise _bad(
            f"{where}: {n} column{'s' if n > 1 else ''}, but {first[0]} has {first[1]}; give "
            "every line the same columns: `length`, or `length media_tokens media_items` "
            "(`length 0 0` for a text document)."
        )


def _text_rows(path: Path) -> np.ndarray:
    """``(n, 1)`` or ``(n, 3)`` int64 rows (line numbers from 1 in every message)."""
    rows: list[list[int]] = []
    first: tuple[str, int] | None = None
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            where = f"{path}:{lineno}"
            _check_columns(fields, where, first)
            first = first or (where, len(fields))
            fix = _FIX[len(fields)]
            row = [_whole(t, where, c, fix) for t, c in zip(fields, _COLUMNS, strict=False)]
            if row[0] == 0:
                raise _bad(f"{where}: length 0; {_ZERO}")
            if len(row) == 3 and row[1] > row[0]:
                raise _bad(
                    f"{where}: {row[1]} media tokens > length {row[0]}; the length counts the "
                    "media placeholder tokens too (length = text tokens + media tokens)."
                )
            rows.append(row)
    return np.asarray(rows, dtype=np.int64).reshape(-1, first[1] if first else 1)


def _npy_lengths(path: Path) -> np.ndarray:
    """A 1-D integer array saved with ``np.save``."""
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as exc:  # "Object arrays cannot be loaded when allow_pickle=False"
        raise _bad(
            f"{path} holds Python objects (dtype object), not numbers; save an integer array: "
            "np.save(path, np.asarray(lengths, dtype=np.int64))."
        ) from exc
    if not isinstance(arr, np.ndarray):
        raise _bad(f"{path} holds several arrays (.npz?); save one 1-D array with np.save.")
    if arr.ndim != 1:
        raise _bad(
            f"{path} is {arr.ndim}-D (shape {arr.shape}); save a 1-D array of token counts, "
            "one per document (e.g. arr.reshape(-1) if every entry is a document)."
        )
    if arr.dtype.kind == "f":
        for name, mask in (("nan (not a number)", np.isnan(arr)), ("infinite", np.isinf(arr))):
            if mask.any():
                index = int(np.flatnonzero(mask)[0])
                raise _bad(f"{path}: index {index} is {name}, not a token count.")
    if arr.dtype.kind not in "iu":
        raise _bad(f"{path}: lengths must be integers, got dtype {arr.dtype}.")
    negative = np.flatnonzero(arr < 0)
    if negative.size:
        raise _bad(f"{path}: index {negative[0]} is {arr[negative[0]]}, a negative token count.")
    zero = np.flatnonzero(arr == 0)
    if zero.size:
        raise _bad(f"{path}: index {zero[0]} (0-based) is 0; {_ZERO}")
    return arr.astype(np.int64)


def load_lengths(path: Path) -> tuple[np.ndarray, MediaLoad | None]:
    """Token counts from ``path`` (``.npy`` or text, see the module docstring), at least one,
    and the documents' media loads when the text file has three columns (else ``None``).

    Raises:
        click.BadParameter: naming the file, and the line (text) or index (``.npy``) at fault.
    """
    if path.suffix == ".npy":
        lengths, media = _npy_lengths(path), None
    else:
        rows = _text_rows(path)
        lengths = rows[:, 0]
        media = MediaLoad(rows[:, 1], rows[:, 2]) if rows.shape[1] == 3 else None
    if lengths.size == 0:
        raise _bad(
            f"{path}: no lengths in this file; write one token count per line (or a 1-D .npy)."
        )
    return lengths, media
