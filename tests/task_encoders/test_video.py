# SPDX-License-Identifier: Apache-2.0
"""Video: frames through the image processor in the Qwen2-VL video patch layout, temporal mRoPE
with Qwen2.5-VL's time interval (worked example), and video documents are cut around their
videos, never through them."""

from __future__ import annotations

import io

import pytest
import torch
from conftest import png
from PIL import Image

from energon_pack.algorithms import OverlongSampleError
from energon_pack.attention import mrope_position_ids
from energon_pack.encoding import MediaProcessor
from energon_pack.task_encoders import ConversationPackingTaskEncoder, ConversationSample


def frame(seed: int) -> Image.Image:
    return Image.open(io.BytesIO(png(56, 28, seed=seed))).convert("RGB")


def test_video_rows_follow_the_video_processor_layout(image_processor) -> None:
    media = MediaProcessor(image_processor)
    a, b, c = frame(1), frame(2), frame(3)
    # Two copies of one frame are that frame as an image (the image processor repeats it).
    video = media.videos([[a, a]])
    image = media.images([a])
    assert video.grid_thw.tolist() == [[1, 2, 4]] and video.num_tokens == [2]
    torch.testing.assert_close(video.pixel_values, image.pixel_values)
    # Three frames: padded with the last to 4 -> 2 temporal patches; temporal slot 0 holds
    # frame 2j, slot 1 frame 2j+1, channels first: rows (t, h*w) x (C, T, p, p).
    video = media.videos([[a, b, c]])
    assert video.grid_thw.tolist() == [[2, 2, 4]] and video.num_tokens == [4]
    rows = video.pixel_values.view(2, 8, 3, 2, 14 * 14)
    single = [media.images([f]).pixel_values.view(8, 3, 2, 196)[:, :, 0] for f in (a, b, c)]
    for t, (first, second) in enumerate([(0, 1), (2, 2)]):
        torch.testing.assert_close(rows[t, :, :, 0], single[first])
        torch.testing.assert_close(rows[t, :, :, 1], single[second])
    assert not torch.equal(single[0], single[1])


def test_temporal_mrope_worked_example() -> None:
    # <s> | video of grid (2, 2, 2) at interval 50 (Qwen2.5-VL: tokens_per_second 25 * 2 s) | 2
    # text tokens: temporal 1, 51; the text resumes at 1 + max(1, 1) = 2 (transformers 5.x)
    out = mrope_position_ids(
        5, torch.tensor([[1, 3]]), torch.tensor([[2, 2, 2]]), time_intervals=[50]
    )
    assert out.tolist() == [[0, 1, 51, 2, 3], [0, 1, 1, 2, 3], [0, 1, 1, 2, 3]]


def test_a_video_document_longer_than_the_pack_is_cut_around_the_video(
    vlm_tokenizer_dir, image_processor
) -> None:
    frames = [png(56, 56, seed=i) for i in range(4)]  # 2 temporal patches x 4 tokens = 8 tokens
    sample = ConversationSample(
        __key__="v",
        __restore_key__=(),
        conversation=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "a seed"},
            {"role": "user", "content": "<video> is it"},
            {"role": "assistant", "content": "a seed"},
        ],
        videos=[frames],
    )

    def encoder(pack_size: int, overlong: str) -> ConversationPackingTaskEncoder:
        return ConversationPackingTaskEncoder(
            vlm_tokenizer_dir, image_processor, pack_size=pack_size, overlong=overlong
        )

    # 23 tokens: the first turn [0, 8), the video at [8, 16), the second turn's end.
    (doc,) = encoder(32, "split").encode_sample(sample)
    assert doc.video_spans.tolist() == [[8, 16]] and doc.video_second_per_grid.tolist() == [1.0]
    # Pack 15, split: the cut at 15 would fall in the video -> moves to 8; two pieces.
    first, second = encoder(15, "split").encode_sample(sample)
    assert torch.equal(torch.cat([first.tokens, second.tokens]), doc.tokens)
    assert first.video_grid_thw.shape == (0, 3) and first.pixel_values_videos.shape[0] == 0
    assert second.video_spans.tolist() == [[0, 8]] and second.video_grid_thw.tolist() == [[2, 4, 4]]
    torch.testing.assert_close(second.pixel_values_videos, doc.pixel_values_videos)
    # Pack 16, truncate: [0, 16) keeps the video whole (7 tokens lost).
    (head,) = encoder(16, "truncate").encode_sample(sample)
    assert head.length == 16 and head.video_spans.tolist() == [[8, 16]]
    # Pack 6: the 8-token video fits no piece: dropped and counted, or an error under "error".
    for overlong in ("split", "truncate", "drop"):
        enc = encoder(6, overlong)
        assert list(enc.encode_sample(sample)) == []
        assert list(enc.stats.dropped_keys) == ["v"] and enc.stats.dropped_overlong == 1
    with pytest.raises(OverlongSampleError, match="'v'"):
        list(encoder(6, "error").encode_sample(sample))
