# SPDX-License-Identifier: Apache-2.0
"""Command output: :func:`writing_dataset` writes ``OUT`` all or nothing (a failed run removes
what it wrote), :func:`os_error` turns an ``OSError`` into one line naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import click

__all__ = ["check_writable", "os_error", "plural", "progress_bars", "writing_dataset"]

#: errno -> what the user can do about it (the path is named in front of it).
_FIXES: dict[int, str] = {
    errno.ENOSPC: "free space on that disk or choose an output directory on another one",
    errno.EDQUOT: "your disk quota is used up: free space or choose another directory",
    errno.EFBIG: "a file exceeds the size limit: lower --samples-per-shard or raise the limit",
    errno.EROFS: "the file system is read-only: choose a directory on a writable one",
    errno.EACCES: "you have no permission there: choose a directory you can write to",
    errno.EPERM: "the operation is not permitted there: choose a directory you own",
    errno.ENOTDIR: "a parent of that path is a file, not a directory: choose another path",
    errno.ENOENT: "it does not exist: check the path (or restore the missing file)",
    errno.EISDIR: "it is a directory: name a file instead",
}


def os_error(exc: OSError, action: str, path: Path | str | None = None) -> click.ClickException:
    """A one-line ``ClickException`` for ``exc``: ``cannot ACTION PATH: REASON; FIX.``

    ``path`` is used when ``exc`` names no file (``exc.filename`` wins: it is the exact file).
    """
    where = exc.filename if exc.filename is not None else path
    reason = exc.strerror or str(exc) or type(exc).__name__
    fix = _FIXES.get(exc.errno or 0, "check the path and try again")
    target = f" {where}" if where is not None else ""
    return click.ClickException(f"cannot {action}{target}: {reason}; {fix}.")


def plural(n: int, noun: str) -> str:
    """``plural(1, "shard") == "1 shard"``, ``plural(3000, "shard") == "3,000 shards"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def progress_bars(no_progress: bool) -> bool:
    """Whether to show progress bars: not with ``--no-progress``, and not when stderr is not a
    terminal (a log file or CI gets no bars). Without bars, energon's "Filling reading buffer"
    bar is turned off too: tqdm reads ``TQDM_DISABLE`` when it is imported, which the CLI does
    only inside a command."""
    show = not no_progress and sys.stderr.isatty()
    if not show and "tqdm" not in sys.modules:  # once imported, tqdm no longer reads it
        os.environ["TQDM_DISABLE"] = "1"
    return show


def check_writable(path: Path, option: str) -> None:
    """Before a long run: ``path`` can be written (its folder exists, the file can be opened).

    Raises:
        click.UsageError: the folder does not exist.
        click.ClickException: the file cannot be written (one line: path, reason, fix).
    """
    folder = path.parent
    if not folder.is_dir():
        raise click.UsageError(
            f"{option} {path}: the folder {folder} does not exist; create it or choose another "
            "path."
        )
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as exc:
        raise os_error(exc, "write", path) from exc
    if not existed:
        path.unlink()


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


@contextlib.contextmanager
def writing_dataset(out: Path) -> Iterator[None]:
    """Refuse a non-empty ``out``; on any failure inside the block remove what was written and
    turn ``ValueError`` / ``OSError`` / an energon index error into one-line click errors."""
    if out.exists() and any(out.iterdir()):
        raise click.ClickException(f"{out} exists and is not empty; choose a new directory.")
    created = _first_missing(out)
    try:
        yield
    except BaseException as exc:
        _remove_created(out, created)
        if isinstance(exc, ValueError):
            raise click.ClickException(str(exc)) from exc
        if isinstance(exc, OSError):
            raise os_error(exc, "write", out) from exc
        if isinstance(exc, sqlite3.Error):  # energon prepare's index (full disk, mostly)
            raise click.ClickException(
                f"cannot write the energon index {out / '.nv-meta' / 'index.sqlite'}: {exc}; "
                "free space on that disk or choose an output directory on another one."
            ) from exc
        raise
