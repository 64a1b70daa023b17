# SPDX-License-Identifier: Apache-2.0
"""``energon-pack simulate`` through click's CliRunner and once as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from energon_pack.cli._lengths import load_lengths
from energon_pack.cli._simulate import command


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(["3"] * 5) + "\n")
    return path


def test_json_output_has_the_documented_keys(tmp_path: Path) -> None:
    # Same as the algorithms-layer worked example: 3 packs, 15 tokens in 18 slots.
    res = CliRunner().invoke(
        command, [str(_write(tmp_path)), "--pack-size", "6", "--buffer-size", "4", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    for key in (
        "fill",
        "packs",
        "lower_bound_packs",
        "tokens",
        "samples_in",
        "samples_out",
        "select_seconds",
    ):
        assert key in data
    assert (data["packs"], data["tokens"], data["samples_in"], data["samples_out"]) == (3, 15, 5, 5)


def test_npy_input_and_text_table(tmp_path: Path) -> None:
    path = tmp_path / "lengths.npy"
    np.save(path, np.array([9, 3], dtype=np.int64))
    res = CliRunner().invoke(
        command, [str(path), "--pack-size", "4", "--buffer-size", "8", "--overlong", "split"]
    )
    assert res.exit_code == 0, res.output
    assert "2 -> 4 packed -> 4 out" in res.output


def test_carry_over_flag(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    rng = np.random.default_rng(0)
    path.write_text("\n".join(map(str, rng.integers(1, 900, size=400))))
    args = [str(path), "--pack-size", "1024", "--buffer-size", "16", "--json"]
    plain = json.loads(CliRunner().invoke(command, args).output)
    carried = json.loads(
        CliRunner().invoke(command, [*args, "--carry-over", "--max-age", "2"]).output
    )
    assert carried["carry_over"] and carried["max_age"] <= 2
    assert carried["samples_out"] == plain["samples_out"] == 400
    assert carried["fill"] >= plain["fill"]


def test_bad_inputs_fail_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("3\nabc\n")
    res = CliRunner().invoke(command, [str(bad), "--pack-size", "6", "--buffer-size", "4"])
    assert res.exit_code != 0 and "bad.txt:2: 'abc' is not a number" in res.output
    res = CliRunner().invoke(
        command,
        [str(_write(tmp_path)), "--pack-size", "2", "--buffer-size", "4", "--overlong", "error"],
    )
    assert res.exit_code != 0 and "pack_size=2" in res.output
    res = CliRunner().invoke(
        command,
        [str(_write(tmp_path)), "--pack-size", "6", "--buffer-size", "4", "--algorithm", "nope"],
    )
    assert res.exit_code != 0


def test_runs_as_a_real_command(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "energon_pack.cli",
            "simulate",
            str(_write(tmp_path)),
            "--pack-size",
            "6",
            "--buffer-size",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(out.stdout)["packs"] == 3


def test_empty_lengths_file_is_an_error(tmp_path: Path) -> None:
    # An empty file would otherwise "simulate" 0 packs at 0.00% fill and exit 0.
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    res = CliRunner().invoke(command, [str(empty), "--pack-size", "6", "--buffer-size", "4"])
    assert res.exit_code != 0 and "empty.txt: no lengths" in res.output


def test_text_table_reports_overlong_counts(tmp_path: Path) -> None:
    # Pack 4: 9 -> 4 (5 tokens cut), 3 fits.
    path = tmp_path / "l.txt"
    path.write_text("9\n3\n")
    res = CliRunner().invoke(
        command, [str(path), "--pack-size", "4", "--buffer-size", "8", "--overlong", "truncate"]
    )
    assert res.exit_code == 0, res.output
    assert "truncated 1 (5 tokens cut), split 0, dropped 0" in res.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # line numbers count from 1, blank and comment lines included
        ("5\n\n# long\ninf\n", "l.txt:4: 'inf' is infinite, not a token count"),
        ("5\nnan\n", "l.txt:2: 'nan' is nan (not a number), not a token count"),
        ("5\n3.5\n", "l.txt:2: '3.5' is not a whole number"),
        ("-3\n", "l.txt:1: '-3' is negative"),
    ],
)
def test_bad_text_lines_are_named_from_one(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "l.txt"
    path.write_text(text)
    res = CliRunner().invoke(command, [str(path), "--pack-size", "6", "--buffer-size", "4"])
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_comments_and_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    path.write_text("# lengths\n3\n\n3  # second\n")
    assert load_lengths(path).tolist() == [3, 3]


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.ones((2, 3), dtype=np.int64), "is 2-D (shape (2, 3)); save a 1-D array"),
        (np.array([3, "x", None], dtype=object), "holds Python objects (dtype object)"),
        (np.array([3.0, np.inf]), "index 1 is infinite, not a token count"),
        (np.array([np.nan, 3.0]), "index 0 is nan (not a number)"),
        (np.array([3.0, 4.5]), "lengths must be integers, got dtype float64"),
        (np.array([3, -1]), "index 1 is -1, a negative token count"),
    ],
)
def test_bad_npy_is_refused_with_a_message(tmp_path: Path, array: np.ndarray, message: str) -> None:
    path = tmp_path / "l.npy"
    np.save(path, array, allow_pickle=True)
    res = CliRunner().invoke(command, [str(path), "--pack-size", "6", "--buffer-size", "4"])
    assert res.exit_code == 2 and message in res.output, res.output
