# SPDX-License-Identifier: Apache-2.0
"""Verdicts tied to the versions they were made on.

``verified.json`` (written by ``tests/benchmarks/model_matrix.py --write``) records the
transformers and torch versions its cells were proven on; on any other version it is not read,
and the experiment decides. Experiment outcomes of transformers' own classes are cached on disk
per transformers + torch version (``$ENERGON_PACK_CACHE``, default
``~/.cache/energon_pack``), so a 7B config is answered from the cache after its first check.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import transformers

__all__ = ["EXPERIMENT_VERSION", "cached", "installed", "key", "store", "table", "table_versions"]

#: Bumped whenever the experiment changes what it proves (older cache entries are not read).
EXPERIMENT_VERSION = 5  # 5: flex runs uncompiled in train mode too (no inductor)
_TABLE = Path(__file__).parent / "verified.json"


def installed() -> dict[str, str]:
    """The versions a verdict depends on: transformers' exact version, torch's major.minor."""
    torch_version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    return {"transformers": transformers.__version__, "torch": torch_version}


@functools.cache
def _read_table() -> dict[str, Any]:
    return json.loads(_TABLE.read_text())


def table_versions() -> dict[str, str]:
    """The versions the family matrix in ``verified.json`` was proven on."""
    return dict(_read_table()["made_with"])


def table() -> dict[str, dict[str, list[str]]]:
    """The matrix's exact cells (class name -> implementation -> feature keys), or nothing when
    the installed versions are not the ones it was made on."""
    data = _read_table()
    return data["cells"] if data["made_with"] == installed() else {}


def _cache_file() -> Path:
    root = Path(os.environ.get("ENERGON_PACK_CACHE") or Path.home() / ".cache" / "energon_pack")
    v = installed()
    return root / f"verdicts-transformers{v['transformers']}-torch{v['torch']}.json"


def key(model_class: type, tiny: Any, impl: str, pack_size: int | None) -> str | None:
    """The cache key of an experiment (taken before it runs: building a model writes into its
    config), or None for classes outside transformers (their code may change)."""
    if not model_class.__module__.startswith("transformers."):
        return None
    text = tiny.to_json_string(use_diff=False)
    name = f"{model_class.__module__}.{model_class.__qualname__}"
    payload = f"{EXPERIMENT_VERSION}|{name}|{impl}|{pack_size}|{text}"
    return hashlib.sha1(payload.encode()).hexdigest()


def cached(key: str | None) -> Any:
    """The stored outcome of the experiment of ``key`` (a JSON value), or None."""
    if key is None:
        return None
    try:
        return json.loads(_cache_file().read_text()).get(key)
    except (OSError, ValueError):
        return None


def store(key: str | None, outcome: Any) -> None:
    """Remember an outcome (atomically; an unwritable cache is skipped)."""
    if key is None:
        return
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            entries = {}
        entries[key] = outcome
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, path)
    except OSError:
        return
