# SPDX-License-Identifier: Apache-2.0
"""Read a lengths file for ``energon-pack simulate``: a text file or a 1-D ``.npy`` of tokens.

A text file holds one token count per line; blank lines and ``#`` comments are ignored, and a
bad line is named by its number counted from 1, as an editor shows it::

    lengths.txt          load_lengths(Path("lengths.txt"))
    -----------          -> click.BadParameter: lengths.txt:3: 'inf' is infinite, not a token
    512                     count; write one whole number per line.
    # long ones
    inf

A ``.npy`` must be a 1-D integer array (a 2-D or object array is refused with the fix); a float
array is refused too, naming ``nan`` / ``inf`` entries by index. Imports NumPy and click only.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
import numpy as np

__all__ = ["load_lengths"]

_HINT = "LENGTHS_FILE"


def _bad(message: str) -> click.BadParameter:
    return click.BadParameter(message, param_hint=_HINT)


def _text_lengths(path: Path) -> np.ndarray:
    """One whole number per line (line numbers from 1 in every message)."""
    values: list[int] = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                value = int(text)
            except ValueError:
                value = None
            if value is not None and value >= 0:
                values.append(value)
                continue
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
            raise _bad(
                f"{path}:{lineno}: {text!r} {what}, not a token count; write one whole number "
                "per line."
            )
    return np.asarray(values, dtype=np.int64)


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
    return arr.astype(np.int64)


def load_lengths(path: Path) -> np.ndarray:
    """Token counts from ``path`` (``.npy`` or text, see the module docstring), at least one.

    Raises:
        click.BadParameter: naming the file, and the line (text) or index (``.npy``) at fault.
    """
    arr = _npy_lengths(path) if path.suffix == ".npy" else _text_lengths(path)
    if arr.size == 0:
        raise _bad(
            f"{path}: no lengths in this file; write one token count per line (or a 1-D .npy)."
        )
    return arr
