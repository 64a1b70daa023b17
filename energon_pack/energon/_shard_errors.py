# SPDX-License-Identifier: Apache-2.0
"""Read errors that name the damaged shard and the fix.

energon 7.4.1 reads a sample with ``ITarReader._get_item_by_sample_pointer``; a 0-byte shard
stops there with ``tarfile.ReadError: empty file`` and a shard truncated mid-member with
``ReadError: unexpected end of data``, naming neither the shard nor what to do. A member name
that appears twice in one sample (``000007.txt`` twice, adjacent) is merged silently: the second
overwrites the first, one sample is lost. :func:`install_shard_errors` wraps that one method so
such reads raise :class:`DamagedShardError`::

    data/shard_000001.tar is damaged (unexpected end of data) reading sample index 14 ...;
    re-create it (energon-pack make-dataset, or `energon prepare` on fresh shards) and run
    `energon-pack check data` to find every damaged shard.

The error is a ``FatalSampleError`` (energon's handlers re-raise it instead of skipping the
sample) whose message survives a DataLoader worker (torch rebuilds it from the message).
Reads that succeed pay one scan of the sample's member names (about 1 us a sample, within the
noise of a ~200 us raw read on this 2-core machine:
tests/benchmarks/shard_read_errors.py).
"""

from __future__ import annotations

import functools
import tarfile
from collections import Counter
from typing import Any

from megatron.energon.errors import FatalSampleError

__all__ = ["DamagedShardError", "damaged_shard_message", "install_shard_errors"]

#: The errors a damaged tar raises while energon reads it.
_READ_ERRORS = (tarfile.TarError, EOFError, OSError)


class DamagedShardError(FatalSampleError):
    """A shard that cannot be read as written by ``energon prepare``; the message names it."""


def damaged_shard_message(shard: str, dataset: str, problem: str, where: str = "") -> str:
    """``"{shard} is damaged ({problem}){where}; re-create it ... `energon-pack check ...`"``."""
    return (
        f"{shard} is damaged ({problem}){where}; re-create it (energon-pack make-dataset from "
        "the sources, or rewrite the tar and re-run `energon prepare` on the dataset), and run "
        f"`energon-pack check {dataset}` to find every damaged shard."
    )


def _duplicate_members(sample: Any) -> list[str]:
    """Member names read twice for one sample (``file_names`` of its source info)."""
    sources = (sample.get("__sources__") if isinstance(sample, dict) else None) or ()
    names = [n for source in sources for n in getattr(source, "file_names", ())]
    if len(set(names)) == len(names):  # the common case: no counting
        return []
    return sorted(name for name, n in Counter(names).items() if n > 1)


def _named(self: Any, sample_pointer: Any, restore_index: Any, problem: str) -> DamagedShardError:
    shard = str(self.tar_filepaths[sample_pointer.tar_file_id])
    where = f" reading sample index {restore_index} (byte {sample_pointer.byte_offset})"
    return DamagedShardError(damaged_shard_message(shard, str(self.base_path), problem, where))


def _wrap(read: Any) -> Any:
    @functools.wraps(read)
    def read_named(self: Any, sample_pointer: Any, restore_index: Any, *args: Any, **kw: Any):
        try:
            sample = read(self, sample_pointer, restore_index, *args, **kw)
        except DamagedShardError:
            raise
        except _READ_ERRORS as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise _named(self, sample_pointer, restore_index, problem) from exc
        except ValueError as exc:  # energon's own "Unexpected end of tar file: ..."
            if "end of tar file" not in str(exc):
                raise
            raise _named(self, sample_pointer, restore_index, str(exc)) from exc
        duplicates = _duplicate_members(sample) if sample is not None else []
        if duplicates:
            shard = self.tar_filepaths[sample_pointer.tar_file_id]
            raise DamagedShardError(
                f"{shard}: member {duplicates[0]!r} appears twice in one sample (sample index "
                f"{restore_index}); energon would keep only the last copy and lose a sample "
                "silently. Give every sample its own key (energon-pack make-dataset numbers "
                f"them), re-run `energon prepare`, and run `energon-pack check {self.base_path}`."
            )
        return sample

    read_named.__energon_pack_named__ = True
    return read_named


def install_shard_errors() -> bool:
    """Make energon's tar reader raise :class:`DamagedShardError` (idempotent).

    Returns False (and changes nothing) when the installed energon has no such reader method.
    """
    try:
        from megatron.energon.flavors.webdataset.itar_reader import ITarReader
    except ImportError:  # pragma: no cover - another energon layout
        return False
    read = getattr(ITarReader, "_get_item_by_sample_pointer", None)
    if read is None:  # pragma: no cover
        return False
    if not getattr(read, "__energon_pack_named__", False):
        ITarReader._get_item_by_sample_pointer = _wrap(read)
    return True
