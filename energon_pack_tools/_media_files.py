# SPDX-License-Identifier: Apache-2.0
"""Reading one media file for ``make-dataset``: what may be read, judged before it is opened.

A record's media name is resolved under the media root as written (``a/../b.png`` ->
``root/b.png``); it is refused when it leaves the root (``../x.png``), is absolute, or resolves
outside the root through a symlink (``os.path.realpath`` of the file, a folder above it, or a
video frame), unless the user opts in (``--allow-absolute-media``). A FIFO, a device
(``/dev/zero``) or a socket is refused from its ``stat`` without being opened (a FIFO would block
forever), and a name energon cannot store (a newline, bytes that are not UTF-8) is refused.
Every error starts with the record's place: ``llava.jsonl:3 (id 'a7'): ...``.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from energon_pack_tools._datasets import member_name_problem

__all__ = ["checked_image", "inside_root", "media_path"]


#: What ``stat`` calls a file that is not a regular one (never opened: a FIFO would block).
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _read(file: Path, where: str, what: str = "file") -> bytes:
    """The bytes of a regular media file. A FIFO, a device (``/dev/zero``), a socket is refused
    by name from its ``stat``, without opening it; an unreadable file names the record."""
    try:
        mode = os.stat(file).st_mode
    except OSError as exc:
        raise ValueError(f"{where}: cannot read {what} {file}: {exc.strerror or exc}.") from exc
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
        raise ValueError(
            f"{where}: {what} {file} is {kind}, not a regular file; media are read from "
            "regular files only: replace it with the image file, or remove the record."
        )
    try:
        return file.read_bytes()
    except OSError as exc:
        raise ValueError(f"{where}: cannot read {what} {file}: {exc.strerror or exc}.") from exc


def _check_name(name: str, kind: str, where: str) -> None:
    """A media name energon can store: UTF-8 text without control characters (a newline)."""
    problem = member_name_problem(name)
    if problem is not None:
        raise ValueError(f"{where}: {kind} {name!r} is {problem}.")


def inside_root(path: Path, root: Path, kind: str, where: str, allow_outside: bool) -> Path:
    """``path`` when its resolved target (``os.path.realpath``: every symlink followed, of the
    file and of the folders above it) lies under the resolved ``root``; refused otherwise unless
    ``allow_outside`` (``--allow-absolute-media``)."""
    if allow_outside:
        return path
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([real, real_root]) != real_root:
        raise ValueError(
            f"{where}: {kind} {path} resolves to {real} (through a symlink), outside the media "
            f"root ({root}); only files under it are read (a downloaded record must not copy "
            "other local files into the dataset): copy the file under the root, or pass "
            "--allow-absolute-media (allow_absolute_media=True) if you trust this link."
        )
    return path


def media_path(root: Path, name: str, kind: str, where: str, allow_absolute: bool) -> Path:
    """``root / name`` normalised as written (``a/../b.png`` -> ``root/b.png``); refused when it
    leaves ``root`` (``../x.png``), is absolute, or resolves outside ``root`` through a symlink
    (of the file or a folder above it), unless ``allow_absolute``. Symlinks whose target stays
    inside ``root`` are fine."""
    _check_name(name, kind, where)
    norm = os.path.normpath(name)
    if os.path.isabs(norm):
        if allow_absolute:
            return Path(norm)
        raise ValueError(
            f"{where}: {kind} {name!r} is an absolute path; media paths are read relative to "
            f"the media root ({root}); make it relative, or pass --allow-absolute-media "
            "(allow_absolute_media=True) if you trust this file."
        )
    if norm == ".." or norm.startswith(".." + os.sep):
        raise ValueError(
            f"{where}: {kind} {name!r} leaves the media root ({root}); only files under it are "
            "read (a downloaded record must not copy other local files into the dataset): fix "
            "the path, or choose the folder it is relative to (--media-root / media_root=)."
        )
    return inside_root(root / norm, root, kind, where, allow_absolute)


def checked_image(file: Path, where: str, what: str) -> bytes:
    """The bytes of ``file`` once PIL has decoded them fully (a text file named x.png, a
    truncated or corrupt image is refused here, before anything is written)."""
    from PIL import Image

    data = _read(file, where, what)
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as exc:  # PIL raises UnidentifiedImageError, OSError, SyntaxError...
        raise ValueError(
            f"{where}: {what} {file} is not an image PIL can decode ({exc}); replace the file "
            "or remove the record."
        ) from exc
    return data
