# SPDX-License-Identifier: Apache-2.0
"""The layering rule: algorithms import neither torch nor megatron; metadata not megatron."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


def _modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def test_algorithms_import_neither_torch_nor_megatron() -> None:
    mods = _modules_after_import("energon_pack.algorithms")
    assert "energon_pack.algorithms" in mods  # the check itself can see imports
    assert not {m for m in mods if m == "torch" or m.startswith("torch.")}
    assert not {m for m in mods if m == "megatron" or m.startswith("megatron.")}


def test_metadata_does_not_import_megatron() -> None:
    if importlib.util.find_spec("energon_pack.metadata") is None:
        pytest.skip("energon_pack.metadata does not exist yet")
    mods = _modules_after_import("energon_pack.metadata")
    assert not {m for m in mods if m == "megatron" or m.startswith("megatron.")}
