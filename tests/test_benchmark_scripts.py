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


DATA = Path(__file__).parent / "benchmarks" / "data"


def _benchmark_module(name: str, path: Path):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fresh_clone_has_lengths_for_the_benchmarks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the full manpages lengths (a clone with no shared/ in or beside it), the
    benchmarks read the sample shipped in the repository; its README's figures are the
    sample's."""
    import shutil

    import numpy as np

    clone = tmp_path / "outer" / "clone" / "tests" / "benchmarks"
    shutil.copytree(DATA, clone / "data")
    shutil.copy(DATA.parent / "_lengths.py", clone)
    lengths = _benchmark_module("_lengths", clone / "_lengths.py")
    assert not lengths.FULL_LENGTHS.exists()
    assert lengths.DEFAULT_LENGTHS == clone / "data" / "manpages-sample.lengths.txt"
    assert "reading the 4,000-length sample" in capsys.readouterr().err
    sample = np.loadtxt(lengths.DEFAULT_LENGTHS, dtype=np.int64)
    assert sample.size == 4000 and sample.min() > 0
    readme = " ".join((DATA / "README.md").read_text().split())
    p90 = round(float(np.percentile(sample, 90)))
    said = f"Median {np.median(sample):g} tokens, p90 {p90:,}, max {sample.max():,}"
    assert said in readme


def test_the_shipped_sample_is_what_make_sample_draws() -> None:
    make = _benchmark_module("make_sample", DATA / "make_sample.py")
    full = make.HERE.parents[2] / "shared" / "data" / "manpages.lengths.txt"
    full = full if full.exists() else make.HERE.parents[3] / "shared" / "data" / full.name
    if not full.exists():
        pytest.skip(f"the full manpages lengths are not at {full}")
    assert make.sample_text(full) == make.SAMPLE.read_text()
