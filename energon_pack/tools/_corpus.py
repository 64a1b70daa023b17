# SPDX-License-Identifier: Apache-2.0
"""The demo's text: documents every Python installation has, and the JSONL that holds them.

:func:`stdlib_documents` reads the standard library's ``.py`` files with ``ast``: each module
docstring and each top-level function or method becomes one document (a few dozen to a few
thousand characters: a realistic mix of short and over-long documents). :func:`write_corpus`
writes them as ``{"text": ...}`` lines, the input ``energon-pack make-dataset`` reads::

    write_corpus(out / "corpus.jsonl", stdlib_documents(2000))
"""

from __future__ import annotations

import ast
import json
import sysconfig
import textwrap
from pathlib import Path

__all__ = ["stdlib_documents", "write_corpus"]


def stdlib_documents(limit: int = 2000) -> list[str]:
    """Up to ``limit`` documents from the standard library's sources, deterministically.

    Files in sorted order; per file its docstring, then each top-level function and each method
    (source text, dedented). Unreadable or unparsable files are skipped.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    docs: list[str] = []
    for path in sorted(root.glob("*.py")):
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        lines = source.splitlines(keepends=True)
        module_doc = ast.get_docstring(tree)
        if module_doc:
            docs.append(module_doc)
        for node in tree.body:
            members = node.body if isinstance(node, ast.ClassDef) else [node]
            for fn in members:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.end_lineno:
                    start = fn.lineno - 1 - len(fn.decorator_list)
                    docs.append(textwrap.dedent("".join(lines[start : fn.end_lineno])))
        if len(docs) >= limit:
            break
    if not docs:
        raise RuntimeError(f"found no Python sources under {root}; is the stdlib installed?")
    return docs[:limit]


def write_corpus(path: Path, texts: list[str]) -> Path:
    """``texts`` as JSONL, one ``{"text": ...}`` per line: the input ``make-dataset`` reads."""
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return path
