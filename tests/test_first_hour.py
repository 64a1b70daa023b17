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
    from energon_pack.training import make_loader

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
    from energon_pack_tools.cli import main
    from energon_pack_tools.cli._main import COMMANDS

    out = CliRunner().invoke(main, ["--help"]).output
    for name in COMMANDS:
        assert re.search(rf"^  {name}\s", out, flags=re.M), out
    summary = out.split("Options:")[0]
    assert all(name in summary for name in COMMANDS), summary


@pytest.mark.parametrize("name", ["analyze", "simulate"])
def test_carry_over_default_is_shown(name: str) -> None:
    from energon_pack_tools.cli import main

    out = CliRunner().invoke(main, [name, "--help"]).output
    # the flag's help runs from its line to the next option
    flag = re.search(r"--carry-over / --no-carry-over(.*?)\n  --", out, flags=re.S).group(1)
    assert "[default: no-carry-over]" in " ".join(flag.split()), flag


def test_energon_dependency_is_an_open_range() -> None:
    pins = re.findall(r'"(megatron-energon[^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert pins == ["megatron-energon>=7.4.1"]  # no upper bound: upgrading energon is allowed


def test_carry_over_version_check_names_the_fix() -> None:
    from energon_pack.energon import check_energon_version

    with pytest.raises(RuntimeError) as info:
        check_energon_version("7.5.0")
    message = str(info.value)
    assert "'7.5.0'" in message and "7.4.x" in message
    assert "pip install 'megatron-energon>=7.4.1,<7.5'" in message  # the fix, runnable
    assert "carry_over=None" in message  # or the other fix


def _cli(*args: str) -> object:
    from energon_pack_tools.cli import main

    return CliRunner().invoke(main, list(args))


def test_cli_mistakes_are_named_before_anything_runs(tmp_path: Path) -> None:
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("5\n# a comment\n0\n7\n")
    res = _cli("simulate", str(lengths), "--pack-size", "8", "--buffer-size", "4")
    assert f"{lengths}:3: length 0; a document has at least one token" in res.output
    lengths.write_text("5\n3\n")
    res = _cli("simulate", str(lengths), "--buffer-size", "4")
    assert res.exit_code == 2 and "Missing option '--pack-size'" in res.output
    res = _cli(
        "simulate", str(lengths), "--pack-size", "8", "--buffer-size", "4", "--min-fill", "0.5"
    )
    assert res.exit_code == 2
    assert "--min-fill is a carry-over setting: add --carry-over, or leave them out." in res.output
    ok = _cli("simulate", str(lengths), "--pack-size", "8", "--buffer-size", "4", "--carry-over",
              "--min-fill", "0.5")  # fmt: skip
    assert ok.exit_code == 0 and "min_fill=0.5" in ok.output
    # output paths are checked before the dataset is even opened (this folder is no dataset)
    common = ["analyze", str(tmp_path), "--tokenizer", str(tmp_path), "--pack-size", "8"]
    res = _cli(*common, "--buffer-size", "4", "--plot", str(tmp_path / "no" / "p.png"))
    assert res.exit_code == 2
    assert f"--plot {tmp_path / 'no' / 'p.png'}: the folder {tmp_path / 'no'} does not exist" in (
        res.output
    )
    # a file the kernel refuses to open for writing (even to root): one line, before the run
    res = _cli(*common, "--buffer-size", "4", "--lengths-out", "/proc/version")
    assert res.exit_code == 1 and "cannot write /proc/version: " in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_analyze_no_progress_and_quiet_logs(jsonl_text_dataset, tokenizer_dir, capfd) -> None:
    """A JSONL dataset through the CLI: no energon shard print on stdout, no bars in a log
    (stderr is not a terminal here), no pin_memory warning on a CPU-only machine."""
    import torch

    from energon_pack import LLMPackingTaskEncoder
    from energon_pack.training import make_loader

    args = ["analyze", str(jsonl_text_dataset.path), "--tokenizer", str(tokenizer_dir)]
    res = _cli(*args, "--pack-size", "64", "--buffer-size", "8", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "sample_range=" not in res.output and "packing:" not in res.output
    encoder = LLMPackingTaskEncoder(str(tokenizer_dir), pack_size=64, log_every=0)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = make_loader(jsonl_text_dataset.path, encoder, packing_buffer_size=8)
        packs = list(loader)
    assert packs and loader.pin_memory == torch.cuda.is_available()
    assert not [w for w in caught if "pin_memory" in str(w.message)]
    assert "sample_range=" not in capfd.readouterr().out  # energon prints it for JSONL
