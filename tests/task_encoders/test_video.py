# SPDX-License-Identifier: Apache-2.0
"""Video: frames through the image processor in the Qwen2-VL video patch layout, temporal mRoPE
with Qwen2.5-VL's time interval (worked example), and video documents are cut around their
videos, never through them."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import assert_wrappers_whole, chat_sample, png

from energon_pack.algorithms import OverlongSampleError
from energon_pack.attention import mrope_position_ids
from energon_pack.encoding import MediaProcessor, PackingStats, apply_overlong_policy
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
    sample = chat_sample("v", ["hi", "a seed", "<video> is it", "a seed"], videos=[frames])

    def encoder(pack_size: int, overlong: str) -> ConversationPackingTaskEncoder:
        return ConversationPackingTaskEncoder(
            vlm_tokenizer_dir, image_processor, pack_size=pack_size, overlong=overlong
        )

    # 23 tokens: the first turn [0, 7), <|vision_start|> at 7, the video at [8, 16),
    # <|vision_end|> at 16, the second turn's end.
    enc = encoder(32, "split")
    (doc,) = enc.encode_sample(sample)
    assert doc.video_spans.tolist() == [[8, 16]] and doc.video_second_per_grid.tolist() == [1.0]
    wrap = [enc.tokenizer.token_id(t) for t in ("<|vision_start|>", "<|vision_end|>")]
    assert [doc.tokens[7], doc.tokens[16]] == wrap
    # Pack 16, split: the cut at 16 would part the video from its <|vision_end|> -> moves to 7,
    # before its <|vision_start|>; two pieces.
    first, second = encoder(16, "split").encode_sample(sample)
    assert torch.equal(torch.cat([first.tokens, second.tokens]), doc.tokens)
    assert first.video_grid_thw.shape == (0, 3) and first.pixel_values_videos.shape[0] == 0
    assert second.video_spans.tolist() == [[1, 9]] and second.video_grid_thw.tolist() == [[2, 4, 4]]
    assert [second.tokens[0], second.tokens[9]] == wrap
    torch.testing.assert_close(second.pixel_values_videos, doc.pixel_values_videos)
    # Pack 17, truncate: [0, 17) keeps the video and its start/end whole (6 tokens lost).
    (head,) = encoder(17, "truncate").encode_sample(sample)
    assert head.length == 17 and head.video_spans.tolist() == [[8, 16]]
    # Pack 9: the 8-token video fits but not with its start/end (10 tokens): no piece can hold
    # it, dropped and counted, or an error under "error".
    for overlong in ("split", "truncate", "drop"):
        enc = encoder(9, overlong)
        assert list(enc.encode_sample(sample)) == []
        assert list(enc.stats.dropped_keys) == ["v"] and enc.stats.dropped_overlong == 1
    with pytest.raises(OverlongSampleError, match="'v'"):
        list(encoder(9, "error").encode_sample(sample))


@pytest.fixture(scope="module")
def stamp_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tokenizer that knows digits (timestamps are not all ``<unk>``) and the VLM tokens."""
    from transformers import AutoTokenizer
    from vlm_helpers import VLM_TOKENS

    from energon_pack_tools import make_tokenizer, synthetic_texts

    path = tmp_path_factory.mktemp("stamp_tok")
    make_tokenizer(path, [*synthetic_texts(100, seed=2), "< 0 1 2 3 4 5 6 7 8 9 . seconds >"])
    tok = AutoTokenizer.from_pretrained(path)
    tok.add_tokens(VLM_TOKENS, special_tokens=True)
    tok.save_pretrained(path)
    return path


def qwen3_sample() -> ConversationSample:
    """An image and two videos: 3 frames at 1 fps (times 0.5, 2.0), 4 frames at the default
    2 fps (times 0.2 (0.25 rounds half to even), 1.2 (1.25))."""
    return chat_sample(
        "q3",
        ["<video> and <image> and <video>", "a seed"],
        images=[png(56, 28, seed=9)],
        videos=[[png(28, 56, seed=i) for i in range(3)], [png(56, 56, seed=i) for i in range(4)]],
        video_fps=[1.0, None],
    )


def qwen3_vl_processor(tokenizer: Any, image_processor: Any) -> Any:
    """transformers' ``Qwen3VLProcessor`` with its own token expansion methods. Its constructor
    checks the video processor class through a mapping that needs torchvision (absent here),
    so the instance is made without it and given what those methods read."""
    import warnings

    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        video_processor = Qwen3VLVideoProcessor(patch_size=14, temporal_patch_size=2, merge_size=2)
    processor = object.__new__(Qwen3VLProcessor)
    processor.tokenizer = tokenizer
    processor.image_processor = image_processor
    processor.video_processor = video_processor
    processor.image_token, processor.video_token = "<|image_pad|>", "<|video_pad|>"
    processor.vision_start_token, processor.vision_end_token = "<|vision_start|>", "<|vision_end|>"
    return processor


@pytest.mark.parametrize("light", [False, True])
def test_qwen3_vl_video_document_equals_the_processor_output(
    stamp_tokenizer_dir, image_processor, light: bool
) -> None:
    """Tokens equal what transformers' ``Qwen3VLProcessor`` makes of the same chat-rendered
    text (its own ``replace_video_token`` / ``replace_image_token`` expansion, then its
    tokenizer); stock and light buffers give the same document."""
    from transformers.video_utils import VideoMetadata

    from energon_pack.encoding import load_tokenizer

    enc = ConversationPackingTaskEncoder(
        stamp_tokenizer_dir,
        image_processor,
        pack_size=256,
        video_timestamps=True,
        light_media=light,
    )
    (doc,) = enc.encode_sample(qwen3_sample())
    doc = enc.materialize(doc)
    tok = load_tokenizer(stamp_tokenizer_dir)
    processor = qwen3_vl_processor(tok, image_processor)
    placeholder = "<|vision_start|>{}<|vision_end|>"
    text = tok.apply_chat_template(
        [
            {
                "role": "user",
                "content": "{v} and {i} and {v}".format(
                    v=placeholder.format("<|video_pad|>"), i=placeholder.format("<|image_pad|>")
                ),
            },
            {"role": "assistant", "content": "a seed"},
        ],
        tokenize=False,
    )
    images = {"image_grid_thw": doc.image_grid_thw}
    metadata = [
        VideoMetadata(total_num_frames=n, fps=f, frames_indices=list(range(n)))
        for n, f in ((3, 1.0), (4, 2.0))
    ]
    videos = {"video_grid_thw": doc.video_grid_thw, "video_metadata": metadata}
    (expanded,), _ = processor.get_text_with_replacements(
        [text],
        [processor.replace_image_token(images, 0)],
        [processor.replace_video_token(videos, i) for i in range(2)],
    )
    assert "<0.5 seconds><|vision_start|>" in expanded and "<1.2 seconds>" in expanded
    assert doc.tokens.tolist() == processor.tokenizer(expanded)["input_ids"]
    assert doc.video_grid_thw.tolist() == [[2, 4, 2], [2, 4, 4]]
    # the spans run from each video's first placeholder to its last; only placeholders count
    (s0, e0), (s1, e1) = doc.video_spans.tolist()
    pads = (doc.tokens == enc.video_token_id).nonzero().view(-1).tolist()
    assert (s0, e1) == (pads[0], pads[-1] + 1) and doc.num_media_tokens == 2 + 4 + 8
    assert int((doc.tokens[s0:e0] == enc.video_token_id).sum()) == 4
    stock = ConversationPackingTaskEncoder(
        stamp_tokenizer_dir,
        image_processor,
        pack_size=256,
        video_timestamps=True,
        light_media=False,
    )
    (ref,) = stock.encode_sample(qwen3_sample())
    assert torch.equal(doc.tokens, ref.tokens) and torch.equal(doc.loss_mask, ref.loss_mask)
    torch.testing.assert_close(doc.pixel_values_videos, ref.pixel_values_videos, rtol=0, atol=0)
    assert torch.equal(doc.video_spans, ref.video_spans)


def test_video_timestamps_follow_the_video_processor_and_need_the_tokens(
    vlm_tokenizer_dir, image_processor, tokenizer_dir
) -> None:
    import warnings

    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qwen3 = Qwen3VLVideoProcessor()
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir, image_processor, pack_size=64, video_processor=qwen3
    )
    assert enc.video_timestamps is True
    assert (
        ConversationPackingTaskEncoder(
            vlm_tokenizer_dir, image_processor, pack_size=64
        ).video_timestamps
        is False
    )
    # the session tokenizer has no video / vision start-end tokens
    with pytest.raises(ValueError, match="video_timestamps=True"):
        ConversationPackingTaskEncoder(
            tokenizer_dir, image_processor, pack_size=64, video_timestamps=True
        )


def test_qwen3_vl_cuts_keep_each_video_with_its_timestamps_and_start_end(
    stamp_tokenizer_dir, image_processor
) -> None:
    """At every pack size, a split cut of a Qwen3-VL document falls outside each video's
    ``<vs> <0.5 seconds> <vs> pads <ve> ... <ve>`` and each image's ``<vs> pads <ve>``."""
    enc = ConversationPackingTaskEncoder(
        stamp_tokenizer_dir, image_processor, pack_size=256, video_timestamps=True
    )
    (doc,) = enc.encode_sample(qwen3_sample())
    start, end = (enc.tokenizer.token_id(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    no_cut = enc._no_cut_spans(doc)
    assert (no_cut[:, 0] < doc.media_spans()[:, 0]).all()
    longest = int((no_cut[:, 1] - no_cut[:, 0]).max())
    for pack_size in range(longest, doc.length):
        pieces = apply_overlong_policy(doc, pack_size, "split", PackingStats(), no_cut=no_cut)
        for piece in pieces:
            assert_wrappers_whole(piece.tokens, start, end)
        assert sum(len(p.video_spans) for p in pieces) <= 2
    # the encoder cuts with them: the cut at the second video's first pad moves before its <vs>
    at = int(doc.video_spans[1, 0])
    assert doc.tokens[at - 1] == start and doc.tokens[at] == enc.video_token_id
    cut = ConversationPackingTaskEncoder(
        stamp_tokenizer_dir, image_processor, pack_size=at, overlong="split", video_timestamps=True
    )
    pieces = list(cut.encode_sample(qwen3_sample()))
    # (the prompt piece before it has no target: left out)
    last = pieces[-1]
    assert last.__key__ == "q3#1" and len(last.video_spans) == 1 and last.tokens[0] == start
    for piece in pieces:
        assert_wrappers_whole(piece.tokens, start, end)
