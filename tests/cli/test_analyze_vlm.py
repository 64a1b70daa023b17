# SPDX-License-Identifier: Apache-2.0
"""``energon-pack analyze --task ... --processor DIR`` on tiny real VLM datasets: media tokens
reported apart from text tokens, hand-counted; and the option mistakes, one line each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from llava_files import LLAVA_RECORDS, write_llava_media

from energon_pack_tools import random_png_bytes, synthetic_texts
from energon_pack_tools.cli import main


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _analyze(*args: str) -> dict[str, Any]:
    res = _invoke("analyze", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _conversations(tmp_path: Path) -> Path:
    """The four LLaVA records made into a dataset by ``make-dataset --task conversation``."""
    write_llava_media(tmp_path)
    src = tmp_path / "llava.json"
    src.write_text(json.dumps(LLAVA_RECORDS))
    res = _invoke("make-dataset", str(tmp_path / "data"), str(src), "--task", "conversation")
    assert res.exit_code == 0, res.output
    return tmp_path / "data"


def test_conversations_media_tokens_apart_from_text(tmp_path: Path, processor_dir: Path) -> None:
    data = _conversations(tmp_path)
    common = [str(data), "--task", "conversation", "--processor", str(processor_dir)]
    # Hand count with the test chat template "<|role|> text" (+ "</s>" after assistant turns);
    # each tag is <|vision_start|> placeholders <|vision_end|> (see llava_files for media):
    #   t   <|user|> hi <|assistant|> a </s>                          5 text          =  5
    #   i2  <|user|> vs img*4 ve vs img*2 ve which <|assistant|> the first </s>
    #                                                                 10 text + 6     = 16
    #   v   <|user|> vs vid*8 ve what <|assistant|> a cat </s>         8 text + 8     = 16
    #   u   <|user|> vs img*4 ve what <|assistant|> b </s> (tag put before the turn)
    #                                                                  7 text + 4     = 11
    out = _analyze(*common, "--pack-size", "64", "--buffer-size", "4")
    assert (out["samples_in"], out["packs"], out["tokens"]) == (4, 1, 48)
    assert out["media"]["media_tokens"] == 18 and out["media"]["text_tokens"] == 30
    # Loss tokens: the assistant's words and "</s>" (2 + 3 + 3 + 2), each predicted by the
    # position before it; the prompts and the placeholders have no target.
    assert (out["loss_tokens"], out["loss_share"]) == (10, 10 / 48)
    # Pack 16: 16 | 16 | 11 + 5 -> media per pack 6, 8, 4 (+ 0); text 10, 8, 7 + 5.
    out = _analyze(*common, "--pack-size", "16", "--buffer-size", "4")
    assert (out["packs"], out["fill"]) == (3, 1.0)
    assert out["media"]["media_tokens_per_pack"] == {"mean": 6.0, "max": 8}
    assert out["media"]["text_tokens_per_pack"] == {"mean": 10.0, "max": 12}
    res = _invoke("analyze", *common, "--pack-size", "64", "--buffer-size", "4")
    assert res.exit_code == 0, res.output
    assert "media / text        18 media + 30 text tokens; per pack media 18.0 (max 18)" in (
        res.stdout
    )


def test_vqa_and_captioning(tmp_path: Path, processor_dir: Path) -> None:
    from energon_pack_tools import make_captioning_dataset, make_vqa_dataset

    # 5 images of 56x56: 4 placeholder tokens each (grid 1x4x4, merge 2), one document each.
    n = 5
    images = [random_png_bytes(56, 56, seed=i) for i in range(n)]
    texts = synthetic_texts(n, seed=5, min_words=2, max_words=6)
    vqa = make_vqa_dataset(tmp_path / "vqa", images, texts, [["yes"]] * n)
    caps = make_captioning_dataset(tmp_path / "caps", images, texts)
    common = ["--processor", str(processor_dir), "--pack-size", "64", "--buffer-size", "8"]
    for data, task in ((vqa, "vqa"), (caps, "captioning"), (vqa, "conversation")):
        out = _analyze(str(data), "--task", task, *common)
        assert (out["samples_in"], out["samples_out"]) == (n, n), task
        assert out["media"]["media_tokens"] == 4 * n, task
        assert out["media"]["text_tokens"] == out["tokens"] - 4 * n, task
    # The tokenizer from --tokenizer, the image processor alone in --processor.
    only_images = tmp_path / "image_processor"
    only_images.mkdir()
    shutil.copy(processor_dir / "preprocessor_config.json", only_images)
    args = [str(caps), "--task", "captioning", "--processor", str(only_images)]
    out = _analyze(*args, "--tokenizer", str(processor_dir), *common[2:])
    assert out["media"]["media_tokens"] == 4 * n
    res = _invoke("analyze", *args, *common[2:])
    assert res.exit_code == 2
    assert (
        f"--task captioning needs --tokenizer DIR; {only_images} holds no tokenizer" in res.output
    )


def test_sft_and_text_have_no_media(tmp_path: Path, tokenizer_dir: Path) -> None:
    from energon_pack_tools import make_jsonl_dataset

    records = [{"prompt": "the cat", "response": "a dog"}, {"prompt": "of", "response": "to"}]
    data = make_jsonl_dataset(tmp_path / "sft.jsonl", records)
    args = ["--tokenizer", str(tokenizer_dir), "--pack-size", "32", "--buffer-size", "4"]
    out = _analyze(str(data), "--task", "sft", *args)
    # "<|user|> the cat <|assistant|> a dog </s>" = 7 tokens, "<|user|> of <|assistant|> to </s>" 5.
    assert (out["samples_in"], out["tokens"], out["media"]) == (2, 12, None)
    # Only the responses are trained on: "a dog </s>" and "to </s>", 5 of 12 tokens.
    assert (out["loss_tokens"], out["loss_share"]) == (5, 5 / 12)
    res = _invoke("analyze", str(data), "--task", "sft", *args)
    assert "loss tokens         5 = 41.67% of real tokens (have a target)" in res.stdout


def test_option_mistakes_are_one_line(tmp_path: Path, processor_dir: Path) -> None:
    from energon_pack_tools import make_vqa_dataset

    vqa = make_vqa_dataset(tmp_path / "vqa", [random_png_bytes(28, 28)], ["q"], [["a"]])
    spec = ["--pack-size", "64", "--buffer-size", "4"]
    cases = [
        (["--task", "vqa"], "--task vqa needs --processor DIR (a local transformers processor"),
        (
            ["--tokenizer", str(processor_dir), "--processor", str(processor_dir)],
            "--processor is for --task captioning/vqa/conversation; --task text has no media.",
        ),
        (
            ["--tokenizer", str(processor_dir)],
            f"{vqa} holds VQASample samples, which --task text does not read; use --task vqa or "
            "conversation.",
        ),
        (
            ["--task", "captioning", "--processor", str(processor_dir)],
            "which --task captioning does not read; use --task vqa or conversation.",
        ),
        (["--task", "sft"], "--task sft needs --tokenizer DIR."),
    ]
    for args, message in cases:
        res = _invoke("analyze", str(vqa), *args, *spec)
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output, (args, res.output)
    no_config = tmp_path / "tokenizer_only"
    shutil.copytree(processor_dir, no_config)
    (no_config / "preprocessor_config.json").unlink()
    res = _invoke("analyze", str(vqa), "--task", "vqa", "--processor", str(no_config), *spec)
    assert res.exit_code == 2 and f"--processor {no_config}: no preprocessor_config.json" in (
        res.output
    )
    # HyperCLOVAX-V2 saves Qwen2-VL's image processor, under a processor no family lists
    other = tmp_path / "hyperclovax"
    shutil.copytree(processor_dir, other)
    config = {"processor_class": "HyperCLOVAXVisionV2Processor"}
    (other / "processor_config.json").write_text(json.dumps(config))
    res = _invoke("analyze", str(vqa), "--task", "vqa", "--processor", str(other), *spec)
    assert res.exit_code == 2, res.output
    assert "HyperCLOVAXVisionV2Processor is not a registered VLM processor class" in res.output


def test_video_processor_config_without_torchvision_is_a_note(
    tmp_path: Path, processor_dir: Path
) -> None:
    import importlib.util

    data = _conversations(tmp_path)
    proc = tmp_path / "proc"
    shutil.copytree(processor_dir, proc)
    config = {"video_processor_type": "Qwen2VLVideoProcessor", "patch_size": 14, "merge_size": 2}
    (proc / "video_preprocessor_config.json").write_text(json.dumps(config))
    args = ["--task", "conversation", "--processor", str(proc), "--pack-size", "64"]
    res = _invoke("analyze", str(data), *args, "--buffer-size", "4", "--json")
    assert res.exit_code == 0, res.output
    note = "needs torchvision (not installed); video frames go through the image processor"
    assert (note in res.stderr) == (importlib.util.find_spec("torchvision") is None)
    if note in res.stderr:  # frames through the image processor: the same 8 video tokens
        assert json.loads(res.stdout)["media"]["media_tokens"] == 18


def test_media_budgets_in_the_loader_and_the_replay(tmp_path: Path, processor_dir: Path) -> None:
    data = _conversations(tmp_path)
    common = [str(data), "--task", "conversation", "--processor", str(processor_dir)]
    common += ["--pack-size", "64", "--buffer-size", "4"]
    # Media per document: t 0, i2 6 (2 images), v 8 (1 video), u 4 (1 image); 48 tokens.
    # Budget 10 tokens: v fits with neither i2 (14) nor u (12) -> 2 packs, 48 / 128 tokens.
    out = _analyze(*common, "--max-media-tokens-per-pack", "10")
    assert (out["packs"], out["fill"], out["simulated_fill"]) == (2, 0.375, 0.375)
    assert out["media"]["media_tokens_per_pack"]["max"] <= 10 and out["replay_note"] is None
    # At most 1 image or video per pack: i2 (2 images) can never be packed -> dropped, counted;
    # v and u cannot share -> 2 packs of 48 - 16 = 32 tokens.
    out = _analyze(*common, "--max-media-per-pack", "1")
    assert (out["dropped_over_budget"], out["packs"], out["tokens"]) == (1, 2, 32)
    assert out["dropped_overlong"] == 0
    assert out["simulated_fill"] == out["fill"] == 32 / 128
    # Documents longer than the pack: the replay cannot model the budgets and says so.
    split = [*common[:-4], "--pack-size", "12", "--buffer-size", "4", "--overlong", "split"]
    res = _invoke("analyze", *split, "--max-media-tokens-per-pack", "10")
    assert res.exit_code == 0, res.output
    assert (
        "note                the simulated figures (simulate, buffer sweep) ignore the media"
        in (res.stdout)
    )


def test_lengths_out_feeds_simulate_with_media(tmp_path: Path, processor_dir: Path) -> None:
    """analyze --lengths-out writes ``length media_tokens media_items`` per document, and
    simulate on that file with a media budget packs as the loader did."""
    data = _conversations(tmp_path)
    common = [str(data), "--task", "conversation", "--processor", str(processor_dir)]
    common += ["--pack-size", "64", "--buffer-size", "4"]
    out_file = tmp_path / "vlm.lengths"
    measured = _analyze(
        *common, "--max-media-tokens-per-pack", "10", "--lengths-out", str(out_file)
    )
    rows = sorted(tuple(map(int, line.split())) for line in out_file.read_text().splitlines())
    # The hand count above: t 5 tokens, no media; i2 16 (6 media, 2 images); v 16 (8, 1 video);
    # u 11 (4, 1 image).
    assert rows == [(5, 0, 0), (11, 4, 1), (16, 6, 2), (16, 8, 1)]
    res = _invoke(
        "simulate", str(out_file), "--pack-size", "64", "--buffer-size", "4",
        "--max-media-tokens-per-pack", "10", "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    simulated = json.loads(res.stdout)
    assert simulated["packs"] == measured["packs"] == 2
    assert simulated["media"]["max_media_tokens_per_pack"] <= 10
