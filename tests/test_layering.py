# SPDX-License-Identifier: Apache-2.0
"""The package's folders are layers; every import (top-level or inside a function) points down.

    algorithms <- attention <- samples <- encoding <- energon <- task_encoders <- training
    testing uses the product; no product module imports testing.
    energon_pack_tools (the command, writers, analysis, demo, fixtures) uses the product; no
    energon_pack module imports it.

Also: the pure layer imports neither torch nor megatron, ``attention`` does not import megatron,
and the tests run against the installed distribution.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import energon_pack

LAYERS = [
    "algorithms",
    "attention",
    "samples",
    "encoding",
    "energon",
    "task_encoders",
    "training",
    "testing",
]
PACKAGE = Path(energon_pack.__file__).parent
TOOLS = PACKAGE.parent / "energon_pack_tools"


def _layer(module: str) -> str | None:
    """The layer ``module`` belongs to; ``"energon_pack"`` itself is the facade above them all."""
    parts = module.split(".")
    if parts[0] != "energon_pack":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _upward_imports() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        for line, module in _imports(path):
            if module.split(".")[0] == "energon_pack_tools":
                bad.append(f"{rel}:{line} imports the tooling package {module}")
        if len(rel.parts) < 2:
            continue  # the top-level facade may re-export any layer
        own = LAYERS.index(rel.parts[0])
        for line, module in _imports(path):
            other = _layer(module)
            if other == "__init__" or (other in LAYERS and LAYERS.index(other) > own):
                bad.append(f"{rel}:{line} ({rel.parts[0]}) imports {module} ({other})")
    return bad


def test_every_folder_is_a_known_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS)


def test_imports_point_down() -> None:
    assert _upward_imports() == []


def test_checker_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "mod.py"
    bad.write_text(
        "def f():\n    from energon_pack.testing import member_keys\n    import energon_pack\n"
    )
    assert _imports(bad) == [(2, "energon_pack.testing"), (3, "energon_pack")]
    assert [_layer(m) for _, m in _imports(bad)] == ["testing", "__init__"]


def test_tooling_library_does_not_import_the_command() -> None:
    bad = [
        f"{path.relative_to(TOOLS)}:{line} imports {module}"
        for path in sorted(TOOLS.glob("*.py"))
        for line, module in _imports(path)
        if module.startswith("energon_pack_tools.cli")
    ]
    assert bad == []


def _modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def _imported(mods: set[str], root: str) -> set[str]:
    return {m for m in mods if m == root or m.startswith(root + ".")}


def test_algorithms_import_neither_torch_nor_megatron() -> None:
    mods = _modules_after_import("energon_pack.algorithms")
    assert "energon_pack.algorithms" in mods  # the check itself can see imports
    assert not _imported(mods, "torch")
    assert not _imported(mods, "megatron")


def test_attention_does_not_import_megatron() -> None:
    """Importing ``attention`` imports no megatron; building ``PackedSeqParams`` then imports
    megatron-core where it is installed, never megatron.energon (one subprocess for both)."""
    code = (
        "import sys, energon_pack.attention as m; print(' '.join(sys.modules)); "
        "m.packed_seq_params(m.document_metadata([[2]])); print(' '.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    imported, called = (set(line.split()) for line in out.stdout.splitlines()[-2:])
    assert "torch" in imported and "energon_pack.attention" in called
    assert not _imported(imported, "megatron")
    assert not _imported(called, "megatron.energon")


@pytest.mark.parametrize("module", ["energon_pack", "energon_pack_tools.cli"])
def test_light_entry_points_do_not_import_torch(module: str) -> None:
    assert not _imported(_modules_after_import(module), "torch")


def test_tests_run_against_the_installed_distribution() -> None:
    dist = importlib.metadata.distribution("energon-pack")
    assert dist.version == energon_pack.__version__
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts == {"energon-pack": "energon_pack_tools.cli:main"}
