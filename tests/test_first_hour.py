# SPDX-License-Identifier: Apache-2.0
"""Small things a new user meets in the first hour: warnings that point at their own code,
no transformers noise, help texts that list everything, a dependency range that lets energon
upgrade, and a carry-over version check that names the fix."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]


def test_small_buffer_warning_points_at_the_users_loop(text_dataset, tokenizer_dir) -> None:
    from energon_pack import LLMPackingTaskEncoder
    from energon_pack.encoding import SmallPackingBufferWarning
    from energon_pack.tools import make_loader

    encoder = LLMPackingTaskEncoder(str(tokenizer_dir), pack_size=4096, log_every=0)
    loader = make_loader(text_dataset.path, encoder, packing_buffer_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in loader:  # the user's loop: the warning must name this line
            pass
    small = [w for w in caught if w.category is SmallPackingBufferWarning]
    assert len(small) == 1, [str(w.message) for w in caught]
    source = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text.endswith("must name this line"))
    assert (small[0].filename, small[0].lineno) == (__file__, line)


def test_encoder_does_not_print_transformers_length_warning(tokenizer_dir, caplog) -> None:
    from energon_pack.encoding import DocumentTokenizer, load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    tok.model_max_length = 8
    text = " ".join(["alpha"] * 50)
    with caplog.at_level(logging.WARNING):
        ids = DocumentTokenizer(tok).encode_text(text)
    assert len(ids) > 8
    assert "Token indices sequence length" not in caplog.text
    # the same call straight on the tokenizer does warn: the test would see it
    tok2 = load_tokenizer(tokenizer_dir)
    tok2.model_max_length = 8
    with caplog.at_level(logging.WARNING):
        tok2.encode(text, add_special_tokens=False)
    assert "Token indices sequence length" in caplog.text


def test_top_level_help_lists_every_command() -> None:
    from energon_pack.cli import main
    from energon_pack.cli._main import COMMANDS

    out = CliRunner().invoke(main, ["--help"]).output
    for name in COMMANDS:
        assert re.search(rf"^  {name}\s", out, flags=re.M), out
    summary = out.split("Options:")[0]
    assert all(name in summary for name in COMMANDS), summary


@pytest.mark.parametrize("name", ["analyze", "simulate"])
def test_carry_over_default_is_shown(name: str) -> None:
    from energon_pack.cli import main

    out = CliRunner().invoke(main, [name, "--help"]).output
    # the flag's help runs from its line to the next option
    flag = re.search(r"--carry-over / --no-carry-over(.*?)\n  --", out, flags=re.S).group(1)
    assert "[default: no-carry-over]" in " ".join(flag.split()), flag


def test_energon_dependency_is_an_open_range() -> None:
    pins = re.findall(r'"(megatron-energon[^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert pins == ["megatron-energon>=7.4.1"]  # no upper bound: upgrading energon is allowed


def test_carry_over_version_check_names_the_fix() -> None:
    from energon_pack.wrappers import check_energon_version

    with pytest.raises(RuntimeError) as info:
        check_energon_version("7.5.0")
    message = str(info.value)
    assert "'7.5.0'" in message and "7.4.x" in message
    assert "pip install 'megatron-energon>=7.4.1,<7.5'" in message  # the fix, runnable
    assert "carry_over=None" in message  # or the other fix
