# SPDX-License-Identifier: Apache-2.0
"""``energon-pack demo`` once as a real subprocess (reduced steps), and its building blocks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from energon_pack_tools import train_bpe_tokenizer
from energon_pack_tools._demo import (
    MARKER,
    _claim_output_dir,
    compare_continuation,
    naive_padding_fill,
)
from energon_pack_tools._texts import stdlib_documents
from energon_pack_tools._tokenizers import BPE_SPECIAL_TOKENS


def test_naive_padding_fill_literal() -> None:
    # [100, 600] at 512: 100 alone in one row, 600 split over two rows -> 700 / (3 * 512).
    assert naive_padding_fill([100, 600], 512) == 700 / 1536
    assert naive_padding_fill([512, 512], 512) == 1.0
    assert naive_padding_fill([], 512) == 0.0


@dataclass
class _Batch:
    __key__: list[str]
    tokens: torch.Tensor


def test_compare_continuation_finds_the_first_difference() -> None:
    ref = [(["a,b"], torch.tensor([[1, 2]])), (["c"], torch.tensor([[3, 0]]))]
    same = [_Batch(["a,b"], torch.tensor([[1, 2]])), _Batch(["c"], torch.tensor([[3, 0]]))]
    assert compare_continuation(ref, iter(same)) == (2, "")
    other_key = [same[0], _Batch(["d"], torch.tensor([[3, 0]]))]
    assert compare_continuation(ref, iter(other_key))[0] == 1
    other_tokens = [_Batch(["a,b"], torch.tensor([[1, 9]])), same[1]]
    assert compare_continuation(ref, iter(other_tokens)) == (
        0,
        "batch 0: same keys but different tokens",
    )
    assert compare_continuation(ref, iter(same[:1])) == (
        1,
        "batch 1: the restored loader ended early",
    )


def test_output_dir_is_reused_only_when_the_demo_wrote_it(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "dataset").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"already holds dataset, not written by the demo"):
        _claim_output_dir(mine)  # names what is there, only that
    assert (mine / "dataset").exists()  # the user's files are untouched
    demo = tmp_path / "demo"
    _claim_output_dir(demo)
    (demo / "dataset").mkdir()
    (demo / "loader_state.pt").write_bytes(b"x")
    _claim_output_dir(demo)  # a rerun clears the earlier run's files
    assert sorted(p.name for p in demo.iterdir()) == [MARKER]


def test_stdlib_documents_are_deterministic_and_real() -> None:
    docs = stdlib_documents(50)
    assert docs == stdlib_documents(50)
    assert len(docs) == 50 and all(d.strip() for d in docs)
    assert any(d.startswith(("def ", "async def ", "@")) for d in docs)  # function sources


def test_bpe_tokenizer_round_trips_unseen_text(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    path = train_bpe_tokenizer(tmp_path / "tok", stdlib_documents(200), vocab_size=400)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    assert [tok.pad_token, tok.bos_token, tok.eos_token] == list(BPE_SPECIAL_TOKENS)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert len(tok) == 400
    # Byte-level: characters never seen in training still round-trip exactly.
    text = "naïve 東京 ✓ def f(x): return x"
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


@pytest.mark.slow  # the demo as a subprocess
def test_demo_subprocess_passes_and_reports(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "energon_pack_tools.cli",
        "demo",
        "--steps",
        "6",
        "--documents",
        "400",
        "--no-progress",
        "--out",
        str(tmp_path / "demo"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "resume          PASS: 3 batches after the saved state identical" in out, out
    fill, naive = map(float, re.search(r"fill\s+([\d.]+)% packed vs ([\d.]+)% naive", out).groups())
    assert fill > 90.0 and naive < fill  # packing beats one-document-per-row padding
    assert (tmp_path / "demo" / "tokenizer" / "tokenizer.json").exists()
    assert (tmp_path / "demo" / "dataset" / ".nv-meta" / "dataset.yaml").exists()
    assert (tmp_path / "demo" / "loader_state.pt").exists()
    corpus = (tmp_path / "demo" / "corpus.jsonl").read_text().splitlines()
    assert len(corpus) == 400 and all(json.loads(line)["text"] for line in corpus)
    # --no-progress hides energon's bar too (tqdm writes "it/s" and "%|")
    assert "Filling reading buffer" not in proc.stderr and "it/s" not in proc.stderr
    assert proc.stderr.splitlines()[0].startswith("[1/5]"), proc.stderr
    # the counts add up: read documents (with repeats) over the dataset's documents
    read, epochs = re.search(r"from ([\d,]+) documents read \(([\d.]+) epochs of 400", out).groups()
    assert float(epochs) == pytest.approx(int(read.replace(",", "")) / 400, abs=0.01)


def test_demo_on_a_read_only_place_is_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from test_make_dataset_errors import _one_line_error, _tmpfs

    from energon_pack_tools.cli._demo_command import command

    with _tmpfs(tmp_path / "ro", "size=64k", "ro") as ro:
        res = CliRunner().invoke(command, ["--out", str(ro / "demo"), "--no-progress"])
        line = _one_line_error(res.output)
        assert res.exit_code == 1
        assert f"cannot write {ro / 'demo'}: Read-only file system" in line
        assert "choose a directory on a writable one" in line
