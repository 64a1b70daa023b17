# SPDX-License-Identifier: Apache-2.0
"""Which ``checkpoint-N`` folders a run can resume from, and how the loader state gets there.

transformers 5.24 writes a checkpoint in place, in this order: model weights, optimizer,
scheduler, RNG states, ``trainer_state.json`` (last), then deletes old checkpoints beyond
``save_total_limit``. ``PackedTrainer`` writes ``energon_loader_state_rank{R}.pt`` (temp file
+ ``os.replace``) *before* all of that, so a folder is **complete** when it holds a readable
``trainer_state.json`` and this rank's loader state; a kill at any moment leaves either a
complete folder or an incomplete one that resuming skips::

    checkpoint-3/  loader state, weights, ..., trainer_state.json       complete
    checkpoint-6/  loader state, weights          (killed here)         incomplete
    train(resume_from_checkpoint=True)  -> checkpoint-3 (a warning names checkpoint-6)

:func:`rotate` keeps at most ``save_total_limit`` folders but never deletes the newest complete
one (nor the one just written, nor the best model's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

__all__ = [
    "LOADER_STATE_FILE",
    "TRAINER_STATE_FILE",
    "checkpoint_folders",
    "incomplete_reason",
    "latest_complete",
    "load_loader_state",
    "rotate",
    "write_loader_state",
]

#: The loader state of process ``rank`` inside a checkpoint folder.
LOADER_STATE_FILE = "energon_loader_state_rank{rank}.pt"
#: What transformers writes last into a checkpoint (``transformers.trainer.TRAINER_STATE_NAME``).
TRAINER_STATE_FILE = "trainer_state.json"

_STEP = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def write_loader_state(folder: Path, rank: int, state: Any) -> Path:
    """``torch.save(state)`` into ``folder`` atomically: a temp file renamed over the target, so
    the file is either absent or whole (a kill mid-write leaves only a ``.tmp`` file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOADER_STATE_FILE.format(rank=rank)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_loader_state(folder: Path, rank: int) -> Any:
    """The loader state of ``rank`` saved in ``folder`` (energon's state is not plain tensors)."""
    return torch.load(folder / LOADER_STATE_FILE.format(rank=rank), weights_only=False)


def incomplete_reason(folder: Path, rank: int) -> str | None:
    """None when ``folder`` is a complete checkpoint for ``rank``, else what is missing."""
    loader_state = folder / LOADER_STATE_FILE.format(rank=rank)
    if not loader_state.is_file():
        return f"{loader_state.name} is missing"
    trainer_state = folder / TRAINER_STATE_FILE
    try:
        json.loads(trainer_state.read_text())
    except FileNotFoundError:
        return f"{TRAINER_STATE_FILE} is missing"
    except (ValueError, OSError) as e:
        return f"{TRAINER_STATE_FILE} is unreadable ({e})"
    return None


def checkpoint_folders(run_dir: Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``run_dir``, by step (oldest first)."""
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := _STEP.match(p.name))]
    return [p for _, p in sorted(found) if p.is_dir()]


def latest_complete(run_dir: Path, rank: int) -> Path | None:
    """The complete checkpoint with the highest step in ``run_dir``, or None."""
    complete = [p for p in checkpoint_folders(run_dir) if incomplete_reason(p, rank) is None]
    return complete[-1] if complete else None


def rotate(
    run_dir: Path, limit: int | None, rank: int, protect: Iterable[Path | str | None]
) -> None:
    """Delete the oldest folders until at most ``limit`` remain (transformers' rule), never the
    newest complete one nor any of ``protect``. A folder is first made incomplete (its
    ``trainer_state.json`` removed), so a kill mid-delete never leaves a half folder that
    looks resumable."""
    if limit is None or limit <= 0:
        return
    folders = checkpoint_folders(run_dir)
    keep = {Path(p).resolve() for p in protect if p is not None}
    newest = latest_complete(run_dir, rank)
    if newest is not None:
        keep.add(newest.resolve())
    remaining = len(folders)
    for folder in folders:
        if remaining <= max(limit, len(keep)):
            break
        if folder.resolve() in keep:
            continue
        (folder / TRAINER_STATE_FILE).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        remaining -= 1
