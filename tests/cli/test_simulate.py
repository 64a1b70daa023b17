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

from energon_pack_tools.cli._lengths_file import load_lengths
from energon_pack_tools.cli._simulate_command import command


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
        "documents_per_pack",
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
            "energon_pack_tools.cli",
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
    lengths, media = load_lengths(path)
    assert lengths.tolist() == [3, 3] and media is None


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


# Five documents in pack 10 (length media_tokens media_items): two one-image documents of 3
# media tokens, text, one with 7 media tokens (over a budget of 6: dropped) and one with two
# images of 1 token each. With the budget: 8 media tokens left -> at least ceil(8 / 6) = 2 packs.
VLM_LINES = "# length media_tokens media_items\n5 3 1\n5 3 1\n2 0 0\n7 7 1\n4 2 2\n"
BUDGET = ["--pack-size", "10", "--buffer-size", "8", "--max-media-tokens-per-pack", "6"]


def _vlm(tmp_path: Path, text: str = VLM_LINES) -> Path:
    path = tmp_path / "vlm.txt"
    path.write_text(text)
    return path


def test_three_columns_give_media_loads(tmp_path: Path) -> None:
    lengths, media = load_lengths(_vlm(tmp_path))
    assert lengths.tolist() == [5, 5, 2, 7, 4]
    assert media is not None
    assert (media.tokens.tolist(), media.items.tolist()) == ([3, 3, 0, 7, 2], [1, 1, 0, 1, 2])


def test_media_budget_json(tmp_path: Path) -> None:
    res = CliRunner().invoke(command, [str(_vlm(tmp_path)), *BUDGET, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    # The packs keep the budget; the 7-token document is counted, not packed.
    assert data["media"]["max_media_tokens_per_pack"] <= 6
    assert data["media"]["dropped_over_budget"] == data["dropped_over_budget"] == 1
    assert (data["samples_in"], data["samples_out"], data["tokens"]) == (5, 4, 16)
    # 16 tokens -> 2 packs; 8 media tokens / 6 -> 2 packs.
    assert data["lower_bound_packs"] == data["global_lower_bound_packs"] == 2


def test_item_budget_sets_the_bound(tmp_path: Path) -> None:
    # Three one-image documents of 2 tokens: one pack by tokens, three by one image per pack.
    path = _vlm(tmp_path, "2 1 1\n2 1 1\n2 1 1\n")
    args = [str(path), "--pack-size", "10", "--buffer-size", "8", "--json"]
    free = json.loads(CliRunner().invoke(command, args).output)
    assert (free["packs"], free["global_lower_bound_packs"]) == (1, 1)
    assert free["media"]["max_media_per_pack"] == 3
    one = json.loads(CliRunner().invoke(command, [*args, "--max-media-per-pack", "1"]).output)
    assert (one["packs"], one["lower_bound_packs"], one["global_lower_bound_packs"]) == (3, 3, 3)
    assert one["media"]["max_media_per_pack"] == 1


def test_media_budget_table_and_plain_json(tmp_path: Path) -> None:
    res = CliRunner().invoke(command, [str(_vlm(tmp_path)), *BUDGET])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("media "))
    assert "max per pack 6 media tokens" in line and "dropped over budget 1" in line
    # Without budgets the seven-token document is packed: a pack holds 7 media tokens or more.
    res = CliRunner().invoke(command, [str(_vlm(tmp_path)), *BUDGET[:4], "--json"])
    free = json.loads(res.output)["media"]
    assert free["dropped_over_budget"] == 0 and free["max_media_tokens_per_pack"] >= 7
    plain = CliRunner().invoke(
        command, [str(_write(tmp_path)), "--pack-size", "6", "--buffer-size", "4", "--json"]
    )
    assert json.loads(plain.output)["media"] is None
    table = CliRunner().invoke(
        command, [str(_write(tmp_path)), "--pack-size", "6", "--buffer-size", "4"]
    )
    assert "media " not in table.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5 3 1\n4\n", "l.txt:2: 1 column, but"),
        ("4\n\n5 3 1\n", "l.txt:3: 3 columns, but"),
        ("5 3\n", "l.txt:1: 2 columns ('5 3'); write `length` or"),
        ("5 -3 1\n", "l.txt:1: '-3' is negative, not a media token count; write three"),
        ("5 3 1.5\n", "l.txt:1: '1.5' is not a whole number, not a count of images and videos"),
        ("5 x 1\n", "l.txt:1: 'x' is not a number, not a media token count"),
        ("5 0 0\n4 6 1\n", "l.txt:2: 6 media tokens > length 4; the length counts the media"),
    ],
)
def test_bad_media_lines_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "l.txt"
    path.write_text(text)
    res = CliRunner().invoke(command, [str(path), "--pack-size", "10", "--buffer-size", "4"])
    assert res.exit_code == 2 and message in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output


def test_media_budget_without_media_says_how(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        command,
        [
            str(_write(tmp_path)),
            "--pack-size",
            "6",
            "--buffer-size",
            "4",
            "--max-media-per-pack",
            "2",
        ],
    )
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "write three columns per line in" in out, res.output
    assert "length media_tokens media_items" in out


def test_media_documents_longer_than_the_pack_are_refused(tmp_path: Path) -> None:
    # With media the lengths must be documents as encoded (the encoder cuts by media spans).
    res = CliRunner().invoke(
        command, [str(_vlm(tmp_path)), "--pack-size", "6", "--buffer-size", "4"]
    )
    assert res.exit_code == 2 and "after the over-long policy" in " ".join(res.output.split())
