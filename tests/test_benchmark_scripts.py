# SPDX-License-Identifier: Apache-2.0
"""The benchmark scripts (tests/benchmarks/, not collected) still import names that exist.

Each script is parsed, not run: every ``import energon_pack...`` / ``from energon_pack... import X``
(and ``energon_pack_tools``), at top level or inside functions, must resolve.
"""

import ast
import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parent / "benchmarks").glob("*.py"))
OURS = ("energon_pack", "energon_pack_tools")


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def unresolved(source: str) -> list[str]:
    """``line: what`` for each import of our packages in ``source`` that does not resolve."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names if _ours(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module or ""):
            targets = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in targets:
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                bad.append(f"{node.lineno}: {module} ({exc})")
                continue
            if name is None or name == "*" or hasattr(mod, name):
                continue
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                bad.append(f"{node.lineno}: {module}.{name}")
    return bad


def test_scripts_found():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_imports_resolve(script: Path):
    assert unresolved(script.read_text()) == []


def test_a_renamed_name_is_caught():
    source = "def f():\n    from energon_pack.algorithms import build_packing_dataset\n"
    assert unresolved(source) == ["2: energon_pack.algorithms.build_packing_dataset"]
