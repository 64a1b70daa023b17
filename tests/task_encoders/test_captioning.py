# SPDX-License-Identifier: Apache-2.0
"""CaptioningPackingTaskEncoder on a real CaptioningSample dataset with one corrupt image."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from energon_pack.algorithms import ALGORITHMS
from energon_pack.task_encoders import CaptioningPackingTaskEncoder
from energon_pack.testing import assert_each_sample_once
from energon_pack.training import make_loader
from energon_pack_tools import IMAGE_TOKEN, sample_key

CAPTION_PACK_SIZE = 48  # images give at most 16 placeholder tokens with the test processor
BAD = sample_key(3)  # conftest.captioning_dataset: sample 3 holds corrupt PNG bytes


def encoder(tokenizer_dir: Any, image_processor: Any, **kw: Any) -> CaptioningPackingTaskEncoder:
    kw.setdefault("pack_size", CAPTION_PACK_SIZE)
    return CaptioningPackingTaskEncoder(tokenizer_dir, image_processor, **kw)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_sample_once_and_the_corrupt_image_is_skipped(
    captioning_dataset, tokenizer_dir, image_processor, algorithm: str, capsys
) -> None:
    enc = encoder(tokenizer_dir, image_processor, algorithm=algorithm, overlong="drop")
    packs = list(make_loader(captioning_dataset.path, enc, packing_buffer_size=8))
    # The corrupt image is a per-sample error: energon's handler logged it and went on.
    assert_each_sample_once(packs, captioning_dataset.keys, dropped=[BAD, *enc.stats.dropped_keys])
    # energon's default handler prints the error with the sample's sources to stdout.
    assert f"sample {BAD!r}: the image bytes cannot be decoded" in capsys.readouterr().out
    assert all(len(p.tokens) <= CAPTION_PACK_SIZE for p in packs)


def test_placeholders_match_the_grid_and_carry_no_loss(
    captioning_dataset, tokenizer_dir, image_processor, tokenizer
) -> None:
    enc = encoder(tokenizer_dir, image_processor, overlong="drop")
    image_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    packs = list(make_loader(captioning_dataset.path, enc, packing_buffer_size=8))
    for pack in packs:
        grid = pack.image_grid_thw
        # k = t*h*w / merge^2 placeholder tokens per image, exactly at its span.
        per_image = (grid.prod(dim=1) // 4).tolist()
        spans = pack.image_spans.tolist()
        assert [e - s for s, e in spans] == per_image
        assert int((pack.tokens == image_id).sum()) == sum(per_image)
        assert pack.pixel_values.shape == (int(grid.prod(dim=1).sum()), 3 * 2 * 14 * 14)
        for s, e in spans:
            assert (pack.tokens[s:e] == image_id).all()
            # No position predicts an image token (labels shifted: target of i-1 is token i).
            assert (pack.labels[max(s - 1, 0) : e - 1] == -100).all()
        assert len(pack.sample_keys) == len(spans)  # one image per document


def test_image_tokens_come_from_the_processor_worked_example(tokenizer_dir, image_processor):
    """64x48 -> resized to 56x56 -> grid (1, 4, 4) -> 16 patches -> 4 image tokens."""
    from megatron.energon import CaptioningSample

    from energon_pack_tools import random_png_bytes

    enc = encoder(tokenizer_dir, image_processor, light_media=False)  # pixels in the buffer
    sample = CaptioningSample(
        __key__="x", __restore_key__=(), image=random_png_bytes(64, 48), caption="a seed"
    )
    (doc,) = list(enc.encode_sample(sample))
    assert doc.image_grid_thw.tolist() == [[1, 4, 4]]
    assert doc.image_spans.tolist() == [[1, 5]]
    assert doc.pixel_values.shape == (16, 1176)
    assert doc.loss_mask.tolist() == [False] * 5 + [True] * 3  # BOS, 4 images | a seed EOS
    # Decoded inputs give the same encoding as bytes.
    pil = Image.open(io.BytesIO(sample.image)).convert("RGB")
    tensor = torch.from_numpy(np.array(pil)).permute(2, 0, 1)
    for image in (pil, tensor, tensor.float() / 255):
        (again,) = list(
            enc.encode_sample(CaptioningSample.derive_from(sample, image=image, caption="a seed"))
        )
        assert torch.equal(again.tokens, doc.tokens)
        assert torch.allclose(again.pixel_values, doc.pixel_values, atol=1e-5)


def test_empty_caption_follows_the_text_rules(tokenizer_dir, image_processor) -> None:
    """An empty caption still trains on EOD; without EOD there is nothing to learn: dropped."""
    from megatron.energon import CaptioningSample

    from energon_pack_tools import random_png_bytes

    sample = CaptioningSample(
        __key__="empty", __restore_key__=(), image=random_png_bytes(64, 48), caption=""
    )
    enc = encoder(tokenizer_dir, image_processor)
    (doc,) = list(enc.encode_sample(sample))
    assert doc.loss_mask.tolist() == [False] * 5 + [True]  # BOS, 4 images | EOS
    enc = encoder(tokenizer_dir, image_processor, add_eos=False)
    assert list(enc.encode_sample(sample)) == []
    assert (enc.stats.dropped_empty, list(enc.stats.dropped_keys)) == (1, ["empty"])


def test_mrope_positions(captioning_dataset, tokenizer_dir, image_processor) -> None:
    enc = encoder(tokenizer_dir, image_processor, mrope=True, overlong="drop")
    pack = next(iter(make_loader(captioning_dataset.path, enc, packing_buffer_size=8)))
    assert pack.mrope_position_ids is not None
    assert pack.mrope_position_ids.shape == (3, len(pack.tokens))
    # Every document starts at mRoPE position 0 in all three rows.
    starts = [0, *torch.tensor(pack.doc_lengths_padded).cumsum(0)[:-1].tolist()]
    assert (pack.mrope_position_ids[:, starts] == 0).all()


def test_unknown_image_token_is_a_clear_error(tokenizer_dir, image_processor) -> None:
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        encoder(tokenizer_dir, image_processor, image_token="<no_such_token>")
