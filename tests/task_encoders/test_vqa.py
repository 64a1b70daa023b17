# SPDX-License-Identifier: Apache-2.0
"""VQAPackingTaskEncoder on a real VQASample dataset: loss on the answer only, exact placeholder
counts, one document per sample (seeded answer draw), every sample once."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from megatron.energon import VQASample
from vlm_helpers import VLM_PACK_SIZE, png

from energon_pack.task_encoders import VQAPackingTaskEncoder
from energon_pack.testing import assert_each_sample_once, assert_restore_sample_reproduces
from energon_pack.training import make_loader
from energon_pack_tools import IMAGE_TOKEN


def encoder(tokenizer_dir: Any, image_processor: Any, **kw: Any) -> VQAPackingTaskEncoder:
    kw.setdefault("pack_size", VLM_PACK_SIZE)
    return VQAPackingTaskEncoder(tokenizer_dir, image_processor, **kw)


def sample(answers: Any, weights: Any = None, key: str = "q") -> VQASample:
    return VQASample(
        __key__=key,
        __restore_key__=("Webdataset", 7),
        image=png(64, 48, seed=1),
        context="which is the seed",
        answers=answers,
        answer_weights=weights,
    )


def test_worked_example_loss_on_the_answer_only(vlm_tokenizer_dir, image_processor, vlm_tokenizer):
    """<|user|> <vs> <img>*4 <ve> which is the seed <|assistant|> a token </s>."""
    enc = encoder(vlm_tokenizer_dir, image_processor, light_media=False)  # pixels in the buffer
    (doc,) = list(enc.encode_sample(sample(["a token"])))
    words = vlm_tokenizer.convert_ids_to_tokens(doc.tokens.tolist())
    assert words == [
        "<|user|>", "<|vision_start|>", *[IMAGE_TOKEN] * 4, "<|vision_end|>",
        "which", "is", "the", "seed", "<|assistant|>", "a", "token", "</s>",
    ]  # fmt: skip
    assert doc.loss_mask.tolist() == [False] * 12 + [True] * 3
    assert doc.image_spans.tolist() == [[2, 6]]
    assert doc.image_grid_thw.tolist() == [[1, 4, 4]]
    assert doc.pixel_values.shape == (16, 1176)
    assert doc.video_grid_thw.shape == (0, 3) and doc.pixel_values_videos.shape == (0, 1176)


def test_answer_modes(vlm_tokenizer_dir, image_processor, vlm_tokenizer) -> None:
    answers = ["a", "the", "token"]
    enc = encoder(vlm_tokenizer_dir, image_processor, answers="all")
    docs = list(enc.encode_sample(sample(answers)))
    assert [d.__key__ for d in docs] == ["q#a0", "q#a1", "q#a2"]
    assert [vlm_tokenizer.decode(d.tokens[d.loss_mask][:-1]) for d in docs] == answers
    enc = encoder(vlm_tokenizer_dir, image_processor, answers="first")
    (doc,) = list(enc.encode_sample(sample(answers)))
    assert vlm_tokenizer.decode(doc.tokens[doc.loss_mask][:-1]) == "a"
    # "sample": weighted draw (weight on one answer only picks it); seeded in a loader, see
    # test_every_sample_once_with_exact_placeholders (restore_sample reproduces the draws).
    enc = encoder(vlm_tokenizer_dir, image_processor)
    (doc,) = list(enc.encode_sample(sample(answers, torch.tensor([0.0, 0.0, 1.0]))))
    assert vlm_tokenizer.decode(doc.tokens[doc.loss_mask][:-1]) == "token"
    with pytest.raises(ValueError, match="choose one of"):
        encoder(vlm_tokenizer_dir, image_processor, answers="longest")


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (5, "sample 'q': answers must be a string or a list of strings, got 5; write them"),
        ([{"answer": "red"}], "got [{'answer': 'red'}]; write them as a JSON list of "
         'strings (VQAv2\'s [{"answer": ...}] dicts: keep only the "answer" values)'),
    ],
)  # fmt: skip
def test_answers_of_the_wrong_type_name_the_sample_and_the_fix(
    vlm_tokenizer_dir, image_processor, answers: Any, message: str
) -> None:
    enc = encoder(vlm_tokenizer_dir, image_processor)
    with pytest.raises(ValueError) as info:
        list(enc.encode_sample(sample(answers)))
    assert message in str(info.value)


def test_every_sample_once_with_exact_placeholders(
    vqa_dataset, vlm_tokenizer_dir, image_processor, vlm_tokenizer
) -> None:
    path, keys, records = vqa_dataset
    enc = encoder(vlm_tokenizer_dir, image_processor, mrope=True)
    packs = list(make_loader(path, enc, packing_buffer_size=6))
    assert_each_sample_once(packs, keys)
    # The answer draws (samples hold 1..3 answers) are seeded: restore_sample rebuilds each pack.
    assert_restore_sample_reproduces(lambda: make_loader(path, enc, packing_buffer_size=6), packs)
    image_id = vlm_tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    for pack in packs:
        per_image = (pack.image_grid_thw.prod(dim=1) // 4).tolist()
        assert [e - s for s, e in pack.image_spans.tolist()] == per_image
        assert int((pack.tokens == image_id).sum()) == sum(per_image)
        assert len(per_image) == len(pack.sample_keys)  # one image per document
        # Targets are answer tokens (and </s>) only: never an image token or the question.
        targets = pack.labels[pack.labels != -100]
        assert not (targets == image_id).any()
        assert pack.mrope_position_ids.shape == (3, len(pack.tokens))
        # Each document's targets decode to one of its sample's answers (+ </s>).
        starts = [0, *torch.tensor(pack.doc_lengths).cumsum(0).tolist()]
        for key, start, end in zip(pack.sample_keys, starts, starts[1:]):
            labels = pack.labels[start:end]
            answer = vlm_tokenizer.decode(labels[labels != -100][:-1])
            assert answer in records[key][1]


def test_answer_weights_from_a_dataset_file(
    tmp_path, vlm_tokenizer_dir, image_processor, vlm_tokenizer
) -> None:
    """A VQAv2-style dataset with a ``weights.json`` per sample (raw JSON bytes, no decoder):
    every sample trains on the one answer its weights allow; malformed weights skip that
    sample with its key and the reason."""
    from energon_pack_tools import make_vqa_dataset, sample_key

    n = 6
    answers = [["a", "the", "token"]] * n
    weights: list[list[float]] = [[0, 0, 0] for _ in range(n)]
    for i in range(n):
        weights[i][i % 3] = 2.5
    weights[4] = [1.0]  # one weight for three answers
    weights[5] = [1.0, -1.0, 1.0]
    images = [png(28 + 28 * (i % 2), 28, seed=i) for i in range(n)]
    path = make_vqa_dataset(tmp_path, images, ["what"] * n, answers, answer_weights=weights)
    enc = encoder(vlm_tokenizer_dir, image_processor)
    packs = list(make_loader(path, enc, packing_buffer_size=3))
    got = {}
    for pack in packs:
        starts = [0, *torch.tensor(pack.doc_lengths).cumsum(0).tolist()]
        for key, start, end in zip(pack.sample_keys, starts, starts[1:]):
            labels = pack.labels[start:end]
            got[key] = vlm_tokenizer.decode(labels[labels != -100][:-1])
    assert got == {sample_key(i): answers[i][i % 3] for i in range(4)}
    reasons = dict(enc.stats.skipped_samples)
    assert sorted(reasons) == [sample_key(4), sample_key(5)]
    assert all("answer_weights" in r and "one per answer" in r for r in reasons.values())
    bad = sample(["a", "b"], weights=b"[0.5, ")
    with pytest.raises(ValueError, match="sample 'q': its answer_weights file is not valid JSON"):
        list(encoder(vlm_tokenizer_dir, image_processor).encode_sample(bad))
    ok = sample(["a", "token"], weights=b"[0, 3]")
    (doc,) = list(encoder(vlm_tokenizer_dir, image_processor).encode_sample(ok))
    assert vlm_tokenizer.decode(doc.tokens[doc.loss_mask][:-1]) == "token"
