# SPDX-License-Identifier: Apache-2.0
"""``energon-pack analyze`` on datasets made by ``make-dataset``: literal packs, agreement with
``simulate`` on the same lengths, the buffer recommendation and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack.algorithms import CarryOver, simulate
from energon_pack_tools import synthetic_texts
from energon_pack_tools._replay import recommend_buffer_size
from energon_pack_tools.cli._analyze_command import command
from energon_pack_tools.cli._make_dataset_command import command as make_dataset


def _dataset(tmp_path: Path, texts: list[str], name: str, per_shard: int = 1000) -> Path:
    src = tmp_path / f"{name}.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    args = [str(tmp_path / name), str(src), "--samples-per-shard", str(per_shard)]
    res = CliRunner().invoke(make_dataset, args)
    assert res.exit_code == 0, res.output
    return tmp_path / name


def _analyze(*args: str) -> dict:
    res = CliRunner().invoke(command, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_hand_worked_packs(tmp_path: Path, tokenizer_dir: Path) -> None:
    # One token per word, plus BOS and EOS: lengths 5, 3, 5, 3.
    ds = _dataset(tmp_path, ["the the the", "a", "of of of", "to"], "four")
    common = [str(ds), "--tokenizer", str(tokenizer_dir), "--pack-size", "8"]
    # Buffer 4: first-fit-decreasing pairs 5 with 3 twice -> 2 full packs. --lengths-out: one
    # length per document (text: no media columns), in reading order.
    lengths_file = tmp_path / "four.lengths"
    out = _analyze(*common, "--buffer-size", "4", "--lengths-out", str(lengths_file))
    assert lengths_file.read_text() == "5\n3\n5\n3\n"
    assert (out["packs"], out["tokens"], out["fill"]) == (2, 16, 1.0)
    assert (out["samples_in"], out["samples_out"], out["documents_per_pack"]) == (4, 4, 2.0)
    # Plain text trains on every token but each document's last: 16 - 4 = 12.
    assert (out["loss_tokens"], out["loss_share"]) == (12, 0.75)
    # Pack sizes x0.5, x1, x2 at buffer 4 (overlong=truncate): at 4 the 5s are cut to 4 and
    # nothing pairs (4 packs, 14 / 16); at 8, 5 + 3 twice; at 16 all four in one pack.
    choices = {"4": (0.875, 4, 14), "8": (1.0, 2, 16), "16": (1.0, 1, 16)}
    got = {k: (c["fill"], c["packs"], c["tokens"]) for k, c in out["pack_size_choices"].items()}
    assert got == choices
    # Buffer costs: 4 tokens a document on average, each an int64 token and a bool loss-mask
    # entry (9 bytes); time to fill = buffer x the measured encode time per sample.
    assert out["bytes_per_document"] == 4 * 9 and out["seconds_per_sample"] > 0
    costs = out["buffer_costs"]
    assert set(costs) == {"4", *out["buffer_sweep"]}
    for b, cost in costs.items():
        assert cost["memory_bytes"] == int(b) * 36 and cost["restore_samples"] == int(b)
        assert cost["first_pack_s"] == pytest.approx(int(b) * out["seconds_per_sample"])
    # Buffer 1: every document alone -> 4 packs, 16 tokens in 32 slots.
    out = _analyze(*common, "--buffer-size", "1")
    assert (out["packs"], out["fill"]) == (4, 0.5)
    # --limit 2 reads "the the the" and "a" only: one full pack.
    out = _analyze(*common, "--buffer-size", "4", "--limit", "2")
    assert (out["packs"], out["samples_in"], out["fill"]) == (1, 2, 1.0)
    # A limit past the end of the dataset reads everything.
    out = _analyze(*common, "--buffer-size", "4", "--limit", "99")
    assert (out["packs"], out["samples_in"]) == (2, 4)
    # --plot on 4 documents: no degenerate PNG, the report says why (exit 0, figures printed).
    png = tmp_path / "four.png"
    res = CliRunner().invoke(command, [*common, "--buffer-size", "4", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "fill                100.00%" in res.stdout and not png.exists()
    assert "plot                none: 4 documents are too few to plot (it needs at least 32" in (
        res.stdout
    )


def test_overlong_counts(tmp_path: Path, tokenizer_dir: Path) -> None:
    # 12 words -> 14 tokens > pack size 8.
    ds = _dataset(tmp_path, ["the " * 12, "a"], "long")
    common = [str(ds), "--tokenizer", str(tokenizer_dir), "--pack-size", "8", "--buffer-size", "4"]
    split = _analyze(*common, "--overlong", "split")
    # 14 -> pieces 8 + 6; plus "a" (3): 17 tokens, pieces 8 | 6 | 3 -> 3 packs (6 + 3 > 8).
    assert (split["split_overlong"], split["samples_out"], split["tokens"], split["packs"]) == (
        1,
        3,
        17,
        3,
    )
    truncated = _analyze(*common, "--overlong", "truncate")
    assert (truncated["truncated_overlong"], truncated["tokens"]) == (1, 11)
    dropped = _analyze(*common, "--overlong", "drop")
    assert (dropped["dropped_overlong"], dropped["samples_out"], dropped["tokens"]) == (1, 1, 3)


@pytest.mark.parametrize(
    "buffer, carry",  # both buffers and both modes in the fast tier, the other two cells slow
    [
        (4, False),
        pytest.param(4, True, marks=pytest.mark.slow),
        pytest.param(16, False, marks=pytest.mark.slow),
        (16, True),
    ],
)
def test_fill_matches_simulate_on_the_same_lengths(
    tmp_path: Path, tokenizer_dir: Path, tokenizer, carry: bool, buffer: int
) -> None:
    texts = synthetic_texts(300, seed=3, min_words=1, max_words=45)
    ds = _dataset(tmp_path, texts, "synthetic", per_shard=64)  # 5 shards
    args = [str(ds), "--tokenizer", str(tokenizer_dir), "--pack-size", "32"]
    args += ["--buffer-size", str(buffer)] + (["--carry-over"] if carry else [])
    out = _analyze(*args)
    # Lengths measured independently of the loader: BOS + words + EOS, in file order.
    lengths = [len(tokenizer(t, add_special_tokens=False).input_ids) + 2 for t in texts]
    sim = simulate(lengths, 32, buffer, carry_over=CarryOver() if carry else None)
    assert out["samples_in"] == 300 and out["tokens"] == sim.tokens
    assert abs(out["fill"] - sim.fill) <= 0.002, (out["fill"], sim.fill)
    assert out["packs"] == sim.packs
    assert out["simulated_fill"] == sim.fill  # analyze's own replay saw the same order


def test_recommendation_and_plot(tmp_path: Path, tokenizer_dir: Path) -> None:
    texts = synthetic_texts(200, seed=4, min_words=1, max_words=30)
    ds = _dataset(tmp_path, texts, "rec")
    png = tmp_path / "analysis.png"
    res = CliRunner().invoke(
        command,
        [
            str(ds),
            "--tokenizer",
            str(tokenizer_dir),
            "--pack-size",
            "32",
            "--buffer-size",
            "2",
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "recommended buffer" in res.output and "at buffer 2 with --carry-over" in res.output
    assert "or with carry-over" in res.output and "waits at most 65 buffers" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recommend_buffer_size_literal() -> None:
    # 300 and 200 pair up into full 512-token packs only when both are in the same buffer.
    lengths = [300, 300, 300, 300, 200, 200, 200, 200]
    best, sweep = recommend_buffer_size(lengths, 512, target_fill=0.97, candidates=(1, 4, 8))
    # Buffer 1 and 4 ([300]*4 alone) give 8 and 6 packs; buffer 8 gives 4 packs of 500 tokens.
    assert (best, sweep) == (8, {1: 2000 / (8 * 512), 4: 2000 / (6 * 512), 8: 2000 / 2048})


def test_crude_jsonl_dataset_keeps_stdout_clean(jsonl_text_dataset, tokenizer_dir: Path) -> None:
    # energon prints the shard slices of a JSONL dataset; --json output must stay one object.
    out = _analyze(
        str(jsonl_text_dataset.path),
        "--tokenizer",
        str(tokenizer_dir),
        "--pack-size",
        "32",
        "--buffer-size",
        "8",
    )
    # conftest: 30 records, one of them empty (corpus[5] == "").
    assert (out["samples_in"], out["dropped_empty"]) == (29, 1)
    limited = _analyze(
        str(jsonl_text_dataset.path),
        "--tokenizer",
        str(tokenizer_dir),
        "--pack-size",
        "32",
        "--buffer-size",
        "8",
        "--limit",
        "10",
    )
    assert (limited["samples_in"], limited["dropped_empty"]) == (9, 1)  # records 0..9, #5 empty


def test_vqa_dataset_reports_media_and_text_tokens(
    tmp_path: Path, tokenizer_dir: Path, image_processor, tokenizer
) -> None:
    from energon_pack.task_encoders import VQAPackingTaskEncoder
    from energon_pack_tools import analyze_dataset, make_vqa_dataset, random_png_bytes

    # 8 samples, one 56x56 image each (4x4 patches, merge 2 -> 4 image tokens) and one answer:
    # one document per sample, 4 media tokens each.
    n = 8
    images = [random_png_bytes(56, 56, seed=i) for i in range(n)]
    questions = synthetic_texts(n, seed=5, min_words=2, max_words=6)
    answers = [[a] for a in synthetic_texts(n, seed=6, max_words=4)]
    ds = make_vqa_dataset(tmp_path / "vqa", images, questions, answers)
    enc = VQAPackingTaskEncoder(tokenizer, image_processor, pack_size=64, log_every=0)
    result = analyze_dataset(ds, encoder=enc, buffer_size=8)
    assert (result.samples_in, result.samples_out) == (n, n)
    assert result.media_tokens == 4 * n and result.text_tokens == result.tokens - 4 * n
    assert sum(result.lengths) == result.tokens and len(result.pack_media_tokens) == result.packs
    media = result.to_dict()["media"]
    assert media["media_tokens"] == 4 * n and media["text_tokens"] == result.tokens - 4 * n
    assert media["media_tokens_per_pack"]["mean"] == 4 * n / result.packs
    assert "media / text" in "\n".join(result.lines())
    # Given both an encoder and a tokenizer, it refuses; a text dataset has no media figures.
    with pytest.raises(ValueError, match="not both"):
        analyze_dataset(ds, tokenizer_dir, encoder=enc, buffer_size=4)
    text = analyze_dataset(
        _dataset(tmp_path, ["the the", "a"], "txt"), tokenizer_dir, pack_size=8, buffer_size=8
    )
    assert text.media_tokens is None and text.to_dict()["media"] is None
    assert "media / text" not in "\n".join(text.lines())


#: A user's own encoder in their own module: text "n" -> a document of ``n * repeat`` tokens.
USER_ENCODER = """
import torch
from energon_pack.samples import EncodedSample
from energon_pack.task_encoders import PackingTaskEncoder


class Repeat(PackingTaskEncoder):
    def __init__(self, repeat, label="x", **packing):
        self.repeat, self.label = repeat, label
        super().__init__(**packing)

    def encode_document(self, sample):
        n = int(sample.text) * self.repeat
        return EncodedSample.derive_from(
            sample, tokens=torch.zeros(n, dtype=torch.int64), loss_mask=torch.ones(n, dtype=bool)
        )
"""


def test_analyze_runs_a_users_own_encoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--encoder module:Class with arguments from a file and options; mistakes are one line."""
    ds = _dataset(tmp_path, ["3", "5", "2"], "lengths")
    (tmp_path / "user_encoders.py").write_text(USER_ENCODER)
    (tmp_path / "args.yaml").write_text("repeat: 3\nlabel: y\n")
    monkeypatch.chdir(tmp_path)  # the module sits next to the user, as with `python -m`
    monkeypatch.syspath_prepend(str(tmp_path))
    common = [str(ds), "--encoder", "user_encoders:Repeat", "--pack-size", "16"]
    out = _analyze(*common, "--buffer-size", "4", "--encoder-args", "args.yaml")
    assert (out["tokens"], out["packs"]) == (30, 2)  # 9 + 15 + 6: [15] and [9, 6]
    out = _analyze(*common, "--buffer-size", "4", "--encoder-arg", "repeat=1")
    assert (out["tokens"], out["packs"]) == (10, 1)

    def error(*args: str) -> str:
        res = CliRunner().invoke(command, [*args, "--buffer-size", "4"])
        assert res.exit_code == 2, res.output
        return res.output

    assert "Repeat(tokenizer) failed" in error(*common, "--tokenizer", str(tmp_path))
    assert "missing 1 required positional argument: 'repeat'" in error(*common)
    assert "give them as --pack-size" in error(*common, "--encoder-arg", "pack_size=8")
    assert "write NAME=VALUE" in error(*common, "--encoder-arg", "repeat")
    assert "cannot import 'nope'" in error(str(ds), "--encoder", "nope:X", "--pack-size", "8")
    bad = error(str(ds), "--encoder", "user_encoders:torch", "--pack-size", "8")
    assert "torch is not a PackingTaskEncoder subclass" in bad
    assert "--task or --encoder, not both" in error(*common, "--task", "text")
