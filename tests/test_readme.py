# SPDX-License-Identifier: Apache-2.0
"""The README runs as written: every command of its bash blocks after the set-up steps 1-2
(verbatim, in a fresh directory), and its Python snippet (paths and the model swapped for tiny
local ones). Every python block of the README and docs/ parses and imports only names that
exist; the custom-task page's blocks run in order."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README and every docs page: their python blocks are checked.
PAGES = [README, *sorted((README.parent / "docs").rglob("*.md"))]
#: Modules only a GPU machine has (flash-attn builds against CUDA): their names are not checked.
GPU_ONLY = {"flash_attn"}


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def _snippet() -> str:
    blocks = _python_blocks(README)
    assert blocks, "README.md has no ```python block"
    return blocks[0]


def _imports(tree: ast.AST) -> list[tuple[str, str | None]]:
    """``(module, name)`` per imported name (``name`` None for ``import module``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(README.parent).as_posix())
def test_python_blocks_import_only_what_exists(page: Path) -> None:
    """A user copies a block: it parses, and every ``from X import Y`` resolves."""
    for i, block in enumerate(_python_blocks(page)):
        where = f"{page.name} python block {i + 1}"
        tree = ast.parse(block, where)  # a SyntaxError names the page and block
        for module, name in _imports(tree):
            if module.split(".")[0] in GPU_ONLY:
                continue
            found = importlib.import_module(module)
            if name is not None and not hasattr(found, name):
                importlib.import_module(f"{module}.{name}")  # a submodule, or ImportError
                assert hasattr(found, name), f"{where}: from {module} import {name}"


def test_custom_task_page_runs(tmp_path: Path, tokenizer_dir: Path, monkeypatch: Any) -> None:
    """docs/howto/custom-task.md: its blocks, run in order, define the encoder, write the
    dataset and pass the contract checks (only the tokenizer path is swapped)."""
    page = README.parent / "docs" / "howto" / "custom-task.md"
    code = "\n".join(_python_blocks(page))
    assert '"path/to/tokenizer"' in code
    code = code.replace('"path/to/tokenizer"', repr(str(tokenizer_dir)))
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("custom_task_page")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, str(page), "exec"), module.__dict__)
    assert (tmp_path / "code.jsonl").exists() and len(module.reference) > 0


def test_readme_snippet_trains_on_packed_batches(tmp_path: Path, tokenizer_dir: Path) -> None:
    from energon_pack_tools import make_text_dataset, synthetic_texts, tiny_causal_lm

    data = make_text_dataset(tmp_path / "data", synthetic_texts(40, seed=1, max_words=30))
    code = _snippet()
    code = code.replace('"path/to/tokenizer"', repr(str(tokenizer_dir)))
    code = code.replace('"data/"', repr(str(data)))
    code = code.replace("pack_size=4096", "pack_size=64")
    code = code.replace(
        "default_worker_config(num_workers=2)", "default_worker_config(num_workers=0)"
    )
    assert code != _snippet()
    # the loop runs forever on training data (repeat=True): stop it after three batches
    code = code.replace(
        "for batch in get_savable_loader(ds):",
        "for step, batch in zip(range(3), get_savable_loader(ds)):",
    )
    model = tiny_causal_lm(vocab_size=256, seed=0)
    scope: dict = {"model": model}
    exec(compile(code, str(README), "exec"), scope)
    out = scope["out"]
    assert scope["step"] == 2
    assert torch.isfinite(out.loss)
    assert out.logits.shape[:2] == scope["batch"].tokens.shape


#: Steps of the README's first block that set up the machine (venv, pip) and run this suite.
SETUP_STEPS = ("1", "2")


def _commands() -> list[str]:
    """Every command line of the README's bash blocks, except under ``# 1.`` and ``# 2.``."""
    commands: list[str] = []
    step = None
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            heading = re.match(r"#\s*(\d+)\.", line.strip())
            if heading:
                step = heading.group(1)
            elif line.strip() and not line.lstrip().startswith("#") and step not in SETUP_STEPS:
                commands.append(line)
    return commands


@pytest.mark.slow  # the README commands as subprocesses (the demo)
def test_readme_commands_run_verbatim(tmp_path: Path) -> None:
    commands = _commands()
    assert any(c.startswith("energon-pack demo") for c in commands), commands
    assert any(c.startswith("energon-pack analyze") for c in commands), commands
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # the venv's bin first: ``energon-pack`` is the script pip installed next to python
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    script = "set -e\n" + "\n".join(commands) + "\n"
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resume          PASS" in done.stdout
    assert re.search(r"^recommended buffer  \d+", done.stdout, flags=re.M), done.stdout
    assert (tmp_path / "packing.png").read_bytes()[:4] == b"\x89PNG"
    # nothing a new user would take for a problem
    # nor progress bars in a log (stderr is not a terminal), nor energon's shard print
    for noise in ("Traceback", "pin_memory", "Token indices sequence length", "Warning", "it/s"):
        assert noise not in done.stderr, done.stderr[-3000:]
    assert "sample_range=" not in done.stdout + done.stderr
    # what the commands write in the repository root is ignored by git
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for name in ("demo", "data", "packing.png"):
        assert (tmp_path / name).exists() and any(i.strip("/") == name for i in ignored), name


def test_quickstart_first_loader_runs(tmp_path: Path, tokenizer_dir: Path, monkeypatch) -> None:
    """docs/quickstart.md "Your first loader", as written but for tiny local parts: every name
    it uses is imported or defined (it once lacked ``import torch``)."""
    from energon_pack_tools import make_text_dataset, synthetic_texts, tiny_causal_lm

    page = ROOT / "docs" / "quickstart.md"
    (code,) = [b for b in _python_blocks(page) if "get_savable_loader(dataset)" in b]
    data = make_text_dataset(tmp_path / "data", synthetic_texts(40, seed=1, max_words=30))
    swaps = {
        '"path/to/tokenizer"': repr(str(tokenizer_dir)),
        '"data/"': repr(str(data)),
        "pack_size=4096": "pack_size=64",
        "num_workers=2": "num_workers=0",
        "for step, batch in enumerate(loader):": "for step, batch in zip(range(3), loader):",
    }
    for old, new in swaps.items():
        assert old in code, old
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)  # it saves loader_0.pt
    scope: dict = {"model": tiny_causal_lm(vocab_size=256, seed=0)}
    exec(compile(code, str(page), "exec"), scope)
    assert scope["step"] == 2 and (tmp_path / "loader_0.pt").exists()
    assert torch.isfinite(scope["out"].loss)
