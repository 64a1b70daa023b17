# SPDX-License-Identifier: Apache-2.0
"""The public API rule: every top-level name resolves, is visible to type checkers, has one
home in a layer package, and implementation modules are private."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import energon_pack

PACKAGE = Path(energon_pack.__file__).parent


def test_every_top_level_name_resolves_to_its_layer_package_object() -> None:
    for name in energon_pack.__all__:
        value = getattr(energon_pack, name)
        home = energon_pack._LAZY.get(name)
        if home is not None:
            assert value is getattr(importlib.import_module(home), name), name
            assert name in importlib.import_module(home).__all__, f"{name} not public in {home}"


def test_type_checking_imports_mirror_the_lazy_table() -> None:
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                seen.update({alias.name: imp.module for alias in imp.names})
    assert seen == energon_pack._LAZY


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        energon_pack.not_a_name  # noqa: B018
    except AttributeError as err:
        assert "not_a_name" in str(err)
    else:
        raise AssertionError("energon_pack.not_a_name resolved")


def test_each_public_name_has_one_home_among_the_layer_packages() -> None:
    homes: dict[str, list[str]] = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        layer = init.parent.name
        for name in importlib.import_module(f"energon_pack.{layer}").__all__:
            homes.setdefault(name, []).append(layer)
    assert {n: h for n, h in homes.items() if len(h) > 1} == {}


def test_top_level_all_is_the_eager_names_plus_the_lazy_table() -> None:
    eager = {n for n in energon_pack.__all__ if n not in energon_pack._LAZY}
    assert eager <= set(vars(energon_pack))
    assert set(energon_pack._LAZY) <= set(energon_pack.__all__)


def test_implementation_modules_are_private() -> None:
    public = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.parent != PACKAGE and not p.name.startswith("_")
    ]
    assert public == []


def test_layer_packages_reexport_only_what_they_import() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        module = importlib.import_module(f"energon_pack.{init.parent.name}")
        missing = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
        assert missing == [], f"{init.parent.name}.__all__ names missing objects: {missing}"


def test_tooling_names_resolve_and_mirror_the_type_checking_imports() -> None:
    import energon_pack_tools

    tree = ast.parse(Path(energon_pack_tools.__file__).read_text())
    seen: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                seen.update({alias.name: imp.module for alias in imp.names})
    assert seen == energon_pack_tools._LAZY
    assert sorted(energon_pack_tools.__all__) == sorted(energon_pack_tools._LAZY)
    for name in energon_pack_tools.__all__:
        assert getattr(energon_pack_tools, name) is not None, name
