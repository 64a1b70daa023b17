# SPDX-License-Identifier: Apache-2.0
"""mRoPE positions: a hand-worked document, then equality with transformers' Qwen2-VL."""

from __future__ import annotations

import os

import pytest
import torch

from energon_pack.attention import mrope_position_ids

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_worked_example_text_image_text() -> None:
    # 2 text, image (1, 4, 4) merged 2x2 -> 4 tokens on a 2x2 grid starting at 2, then text at
    # 2 + max(2, 2) = 4
    out = mrope_position_ids(7, torch.tensor([[2, 6]]), torch.tensor([[1, 4, 4]]))
    assert out.tolist() == [
        [0, 1, 2, 2, 2, 2, 4],
        [0, 1, 2, 2, 3, 3, 4],
        [0, 1, 2, 3, 2, 3, 4],
    ]
    assert out.dtype == torch.int64


def test_text_only_rows_are_equal_and_padding_continues() -> None:
    out = mrope_position_ids(
        3, torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, 3), padded_length=5
    )
    assert out.tolist() == [[0, 1, 2, 3, 4]] * 3


def test_padding_after_an_image_continues_from_the_text_cursor() -> None:
    # image (1, 2, 4) -> 1x2 merged grid at 0; next text position is max(1, 2) = 2
    out = mrope_position_ids(2, torch.tensor([[0, 2]]), torch.tensor([[1, 2, 4]]), padded_length=4)
    assert out.tolist() == [[0, 0, 2, 3], [0, 0, 2, 3], [0, 1, 2, 3]]


def _qwen2_vl_positions(input_len: int, spans: list[tuple[int, int]], grid: torch.Tensor):
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    config = Qwen2VLConfig(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vocab_size": 32,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 0]},
        },
        vision_config={
            "depth": 1,
            "embed_dim": 16,
            "hidden_size": 16,
            "num_heads": 2,
            "spatial_merge_size": 2,
            "mlp_ratio": 1,
        },
    )
    model = Qwen2VLModel(config)
    types = torch.zeros(1, input_len, dtype=torch.int)
    for start, end in spans:
        types[0, start:end] = 1
    ids = torch.zeros(1, input_len, dtype=torch.long)
    positions, _ = model.get_rope_index(ids, types, image_grid_thw=grid)
    return positions[:, 0]


@pytest.mark.parametrize(
    ("length", "spans", "grid"),
    [
        (15, [(2, 6), (7, 13)], [[1, 4, 4], [1, 4, 6]]),  # two images, non-square second
        (
            10,
            [(0, 6)],
            [[1, 6, 4]],
        ),  # image first, taller than wide
        (12, [(3, 9)], [[2, 2, 6]]),  # t = 2 (video-like grid through the image path)
    ],
)
def test_matches_transformers_qwen2_vl_get_rope_index(length, spans, grid) -> None:
    grid_t = torch.tensor(grid)
    expected = _qwen2_vl_positions(length, spans, grid_t)
    out = mrope_position_ids(length, torch.tensor(spans), grid_t, spatial_merge_size=2)
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    ("spans", "grid", "match"),
    [
        ([[2, 5]], [[1, 4, 4]], "needs 4"),  # 3 tokens for a 4-token image
        ([[2, 6]], [[1, 3, 4]], "not divisible"),
        ([[4, 8], [2, 6]], [[1, 4, 4], [1, 4, 4]], "out of order"),
        ([[2, 6]], [[1, 4, 4], [1, 4, 4]], "one per image"),
    ],
)
def test_bad_images_raise(spans, grid, match) -> None:
    with pytest.raises(ValueError, match=match):
        mrope_position_ids(9, torch.tensor(spans), torch.tensor(grid))


def test_frame_runs_split_a_timestamped_video_per_temporal_patch() -> None:
    from energon_pack.attention import frame_runs

    # v = placeholder 9; a Qwen3-VL video of grid (2, 2, 4) (2 tokens a patch), text between
    tokens = torch.tensor([1, 9, 9, 5, 6, 9, 9, 2])
    assert frame_runs(tokens, (1, 7), (2, 2, 4)) == ([(1, 3), (5, 7)], [(1, 2, 4), (1, 2, 4)])
    # a contiguous (Qwen2-VL) video stays one run
    assert frame_runs(torch.tensor([9] * 4), (0, 4), (2, 2, 4)) == ([(0, 4)], [(2, 2, 4)])
    with pytest.raises(ValueError, match="needs 2 of 2"):
        frame_runs(torch.tensor([9, 9, 5, 9, 5, 9]), (0, 6), (2, 2, 4))


def test_timestamped_video_positions_match_transformers_qwen3_vl() -> None:
    # <s> | <vs> stamp <vs> [2 pads] <ve> stamp <vs> [2 pads] <ve> <ve> | text: the per-frame
    # runs through mrope_position_ids equal Qwen3VLModel.get_rope_index on the same tokens.
    from transformers import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    from energon_pack.attention import frame_runs

    config = Qwen3VLConfig(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 8,
            "vocab_size": 32,
            "rope_parameters": {"rope_type": "default", "mrope_section": [1, 1, 2]},
        },
        vision_config={"depth": 1, "hidden_size": 16, "num_heads": 2, "out_hidden_size": 16},
    )
    model = Qwen3VLModel(config)
    vs, ve, pad = 20, 21, 22
    tokens = torch.tensor([1, vs, 5, 6, vs, pad, pad, ve, 7, vs, pad, pad, ve, ve, 8, 9])
    grid = torch.tensor([[2, 2, 4]])
    types = (tokens == pad).to(torch.int).view(1, -1) * 2
    expected, _ = model.get_rope_index(tokens.view(1, -1), types, video_grid_thw=grid)
    runs, grids = frame_runs(tokens, (5, 12), (2, 2, 4))
    out = mrope_position_ids(len(tokens), torch.tensor(runs), torch.tensor(grids))
    assert torch.equal(out, expected[:, 0])
    assert out[:, 5:7].tolist() == [[5, 5], [5, 5], [5, 6]]  # first frame at 5
