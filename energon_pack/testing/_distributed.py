# SPDX-License-Identifier: Apache-2.0
"""Run a script under ``torchrun`` (gloo, CPU) from a test and collect one JSON result per rank:
:func:`run_torchrun` launches it, each rank calls :func:`init_torchrun_process_group` and
:func:`write_rank_result`, and :func:`item_record` reduces a loader item to its member keys and a
SHA-256 digest so runs compare bit for bit across processes. See docs/howto/distributed.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from energon_pack.testing._contracts import RUN_RECORD_FIELDS

__all__ = [
    "RESULTS_DIR_ENV",
    "TorchrunError",
    "free_port",
    "init_torchrun_process_group",
    "item_digest",
    "item_record",
    "read_rank_results",
    "run_torchrun",
    "write_rank_result",
]

#: Environment variable through which :func:`run_torchrun` tells the ranks where to write.
RESULTS_DIR_ENV = "ENERGON_PACK_RESULTS_DIR"


class TorchrunError(RuntimeError):
    """A ``torchrun`` launch failed, timed out, or a rank wrote no result."""


def free_port() -> int:
    """A TCP port that is free on localhost right now (for ``--master-port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_torchrun(
    script: str | Path,
    args: Sequence[str] = (),
    *,
    nproc_per_node: int = 2,
    out_dir: str | Path,
    timeout: float = 180.0,
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run ``python -m torch.distributed.run --nproc-per-node N script args``; return rank results.

    Each rank must call :func:`write_rank_result` (it reads ``out_dir`` from
    :data:`RESULTS_DIR_ENV`). Returns the results ordered by rank.

    Raises:
        ValueError: ``nproc_per_node < 1`` or ``script`` does not exist.
        TorchrunError: non-zero exit, timeout, or a missing rank result (with the output tail).
    """
    script = Path(script)
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node={nproc_per_node} must be >= 1.")
    if not script.is_file():
        raise ValueError(f"script {script} does not exist; pass the path of a Python file.")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc_per_node),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(script),
        *args,
    ]
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        RESULTS_DIR_ENV: str(out_dir),
        **(env or {}),
    }
    try:
        proc = subprocess.run(
            cmd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise TorchrunError(f"{' '.join(cmd)} timed out after {timeout} s:\n{_tail(out)}") from e
    if proc.returncode != 0:
        raise TorchrunError(
            f"{' '.join(cmd)} exited with {proc.returncode}:\n{_tail(proc.stdout + proc.stderr)}"
        )
    try:
        return read_rank_results(out_dir, nproc_per_node)
    except TorchrunError as e:
        raise TorchrunError(f"{e}\n{_tail(proc.stdout + proc.stderr)}") from None


def init_torchrun_process_group(backend: str = "gloo") -> tuple[int, int]:
    """Initialise ``torch.distributed`` from torchrun's environment; return (rank, world_size)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ValueError(
            "RANK / WORLD_SIZE are not set: launch this script with "
            "`torchrun --nproc-per-node N script.py` (or python -m torch.distributed.run)."
        )
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend)
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def write_rank_result(result: Mapping[str, Any], out_dir: str | Path | None = None) -> Path:
    """Write this rank's ``result`` to ``out_dir/rank{RANK}.json`` (atomically); return the path.

    ``out_dir`` defaults to ``$ENERGON_PACK_RESULTS_DIR`` (set by :func:`run_torchrun`).
    """
    directory = out_dir if out_dir is not None else os.environ.get(RESULTS_DIR_ENV)
    if directory is None:
        raise ValueError(f"no out_dir given and ${RESULTS_DIR_ENV} is not set.")
    rank = int(os.environ.get("RANK", "0"))
    path = Path(directory) / f"rank{rank}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, sort_keys=True))
    tmp.replace(path)
    return path


def read_rank_results(out_dir: str | Path, world_size: int) -> list[dict[str, Any]]:
    """The ``rank{r}.json`` results of ranks ``0..world_size-1`` in ``out_dir``."""
    results = []
    for rank in range(world_size):
        path = Path(out_dir) / f"rank{rank}.json"
        if not path.is_file():
            raise TorchrunError(f"rank {rank} wrote no result ({path} is missing).")
        results.append(json.loads(path.read_text()))
    return results


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _feed(h, v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _feed_fields(h, value)  # e.g. a batch's DocumentMetadata
    else:
        h.update(repr(value).encode())


def _feed_fields(h: Any, item: Any) -> None:
    h.update(type(item).__name__.encode())
    for f in dataclasses.fields(item):  # compare=False: derived (DocumentMetadata.computed)
        if f.compare and f.name != "__restore_key__" and f.name not in RUN_RECORD_FIELDS:
            h.update(f.name.encode())
            _feed(h, getattr(item, f.name))


def item_digest(item: Any) -> str:
    """SHA-256 over every dataclass field of ``item`` (nested dataclasses included) except
    ``__restore_key__`` and the run's ``counts`` (``RUN_RECORD_FIELDS``), hex."""
    h = hashlib.sha256()
    _feed_fields(h, item)
    return h.hexdigest()


def item_record(item: Any) -> dict[str, Any]:
    """JSON-able summary of a pack or batch: ``keys`` (member keys per row) and ``digest``.

    Batches also record ``doc_lengths``, ``doc_lengths_padded``, ``cu_seqlens``,
    ``cu_seqlens_padded`` and the row length ``length``, so alignment can be checked offline.
    """
    keys = item.sample_keys
    rows = [list(r) for r in keys] if keys and isinstance(keys[0], list) else [list(keys)]
    record: dict[str, Any] = {"keys": rows, "digest": item_digest(item)}
    if hasattr(item, "cu_seqlens_padded"):
        record.update(
            length=int(item.tokens.shape[-1]),
            doc_lengths=[list(r) for r in item.doc_lengths],
            doc_lengths_padded=[list(r) for r in item.doc_lengths_padded],
            cu_seqlens=item.cu_seqlens.tolist(),
            cu_seqlens_padded=item.cu_seqlens_padded.tolist(),
        )
    return record
