# SPDX-License-Identifier: Apache-2.0
"""``energon-pack analyze`` on a ``blend:`` metadataset (issue 33, point 3): the shares of
tokens, documents and loss tokens each dataset trains on, sample-weighted beside
token-weighted, through the text task's real tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack_tools import WORDS, make_blend_metadataset, make_text_dataset
from energon_pack_tools.cli._analyze_command import command

#: Short chat texts need a larger buffer to fill packs; these runs measure shares.
pytestmark = pytest.mark.filterwarnings("ignore::energon_pack.encoding.SmallPackingBufferWarning")


def _blend(tmp_path: Path) -> Path:
    """``chat``: 300 texts of 2..6 words; ``books``: 40 of 60..180 words; blended 1:1."""
    rng = random.Random(4)

    def texts(n: int, lo: int, hi: int) -> list[str]:
        return [" ".join(rng.choices(WORDS, k=rng.randint(lo, hi))) for _ in range(n)]

    chat = make_text_dataset(tmp_path / "chat", texts(300, 2, 6))
    books = make_text_dataset(tmp_path / "books", texts(40, 60, 180))
    return make_blend_metadataset(tmp_path / "blend.yaml", [(chat, 1.0), (books, 1.0)])


def test_analyze_shows_both_blends_shares(tmp_path: Path, tokenizer_dir: Path) -> None:
    meta = _blend(tmp_path)
    args = [str(meta), "--tokenizer", str(tokenizer_dir), "--pack-size", "256"]
    args += ["--buffer-size", "32", "--blend-tokens", "12000"]
    res = CliRunner().invoke(command, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    chat, books = out["rows"]
    assert (Path(chat["dataset"]).name, Path(books["dataset"]).name) == ("chat", "books")
    assert chat["weight"] == books["weight"] == 0.5
    # Sample-weighted: about 1:1 in documents, the books take most tokens.
    assert abs(chat["samples_documents"] - 0.5) < 0.1 and chat["samples_tokens"] < 0.2, out
    # Token-weighted: 1:1 in tokens (within 3 points over 12k tokens), chat most documents.
    assert abs(chat["size_tokens"] - 0.5) < 0.03 and chat["size_documents"] > 0.8, out
    for run in ("samples", "size"):
        for counter in ("tokens", "documents", "loss_tokens"):
            assert abs(chat[f"{run}_{counter}"] + books[f"{run}_{counter}"] - 1) < 1e-9
    text = CliRunner().invoke(command, [*args, "--no-progress"])
    assert text.exit_code == 0, text.output
    assert "| samples: tokens" in text.stdout and "| tokens:  tokens" in text.stdout
    assert text.stdout.splitlines()[2].startswith("chat")


def test_plot_on_a_blend_is_refused_with_the_fix(tmp_path: Path, tokenizer_dir: Path) -> None:
    meta = _blend(tmp_path)
    args = [
        str(meta),
        "--tokenizer",
        str(tokenizer_dir),
        "--pack-size",
        "256",
        "--buffer-size",
        "8",
    ]
    res = CliRunner().invoke(command, [*args, "--plot", str(tmp_path / "p.png")])
    assert res.exit_code != 0 and "analyze a leaf" in res.output
