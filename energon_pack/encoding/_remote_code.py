# SPDX-License-Identifier: Apache-2.0
"""No remote code: a tokenizer or processor directory that asks transformers to run its own Python
files is refused before transformers sees it, unless the user opts in.

transformers runs a directory's modules when one of its configs holds an ``auto_map`` (e.g.
``tokenizer_config.json``: ``{"auto_map": {"AutoTokenizer": ["tok.MyTok", null]}}`` imports
``tok.py``) and ``trust_remote_code`` is on, or when a user answers yes to its prompt. energon-pack
never asks: every load passes ``trust_remote_code=False``, and :func:`refuse_remote_code` says
which file asks for code and how to opt in::

    refuse_remote_code(Path("tok"), what="tokenizer", opt_in="load it yourself ...")
    # ValueError: tok needs remote code: tokenizer_config.json has an auto_map (...) ...
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["REMOTE_CODE_CONFIGS", "refuse_remote_code", "remote_code_configs"]

#: The configs of a saved model, tokenizer or processor where transformers reads ``auto_map``.
REMOTE_CODE_CONFIGS: tuple[str, ...] = (
    "config.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)


def remote_code_configs(path: Path | str) -> dict[str, list[str]]:
    """``{config file: [the auto classes its auto_map names]}`` for the configs of ``path`` that
    ask for remote code (empty when none does; a config that is not JSON is left to
    transformers, which names it)."""
    found: dict[str, list[str]] = {}
    for name in REMOTE_CODE_CONFIGS:
        file = Path(path) / name
        if not file.is_file():
            continue
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        auto_map = config.get("auto_map") if isinstance(config, dict) else None
        if auto_map:
            found[name] = sorted(auto_map) if isinstance(auto_map, dict) else [str(auto_map)]
    return found


def refuse_remote_code(path: Path | str, *, what: str, opt_in: str) -> None:
    """Raise when ``path`` asks for remote code, naming the config, the classes and ``opt_in``.

    Raises:
        ValueError: ``"{path} needs remote code: tokenizer_config.json has an auto_map
            (AutoTokenizer), which makes transformers import Python files from the directory;
            energon-pack does not run them unless you opt in: {opt_in}"``.
    """
    found = remote_code_configs(path)
    if not found:
        return
    name, classes = next(iter(found.items()))
    raise ValueError(
        f"{path} needs remote code: {name} has an auto_map ({', '.join(classes)}), which makes "
        f"transformers import Python files from the directory to build this {what}; "
        f"energon-pack does not run them unless you opt in: {opt_in}"
    )
