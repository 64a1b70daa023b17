# SPDX-License-Identifier: Apache-2.0
"""One clear line for a filesystem failure: the path, what went wrong, and what to do.

The commands turn an ``OSError`` into a :class:`click.ClickException` with :func:`os_error`
instead of a traceback. A full disk while writing ``out/shard_000003.tar`` reads::

    cannot write out/shard_000003.tar: No space left on device; free space on that disk or
    choose an output directory on another one.

(one line on the terminal).
"""

from __future__ import annotations

import errno
from pathlib import Path

import click

__all__ = ["os_error"]

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
