# SPDX-License-Identifier: Apache-2.0
"""Text material: deterministic synthetic sentences for tests and examples
(:func:`synthetic_texts`), and the demo's corpus of standard-library docstrings and functions
written as ``{"text": ...}`` JSONL (:func:`stdlib_documents`, :func:`write_corpus`).
"""

from __future__ import annotations

import ast
import json
import random
import sysconfig
import textwrap
from collections.abc import Sequence
from pathlib import Path

__all__ = ["WORDS", "stdlib_documents", "synthetic_texts", "write_corpus"]

#: The vocabulary of :func:`synthetic_texts` (also what the test tokenizer is trained on).
WORDS: tuple[str, ...] = tuple(
    "the a of to and in is it that on for with as was by at from this be are or an which one "
    "packing energon token sample image caption model train buffer shard worker state restore "
    "loss label position document sequence attention kernel batch epoch seed random data".split()
)


def synthetic_texts(
    n: int, *, seed: int = 0, min_words: int = 1, max_words: int = 40, words: Sequence[str] = WORDS
) -> list[str]:
    """``n`` deterministic sentences of ``min_words..max_words`` words drawn from ``words``."""
    if n < 0 or min_words < 0 or max_words < min_words:
        raise ValueError(
            f"need n >= 0 and 0 <= min_words <= max_words, got {n}, {min_words}, {max_words}"
        )
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(min_words, max_words)))
        for _ in range(n)
    ]


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
