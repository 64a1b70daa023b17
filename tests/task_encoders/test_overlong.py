# SPDX-License-Identifier: Apache-2.0
"""The over-long policy on encoded documents (hand-worked), and the stats it feeds."""

from __future__ import annotations

import pytest
import torch

from energon_pack.algorithms import OverlongPolicy, OverlongSampleError, cut_overlong
from energon_pack.algorithms._overlong import apply_overlong
from energon_pack.encoding import PackingStats, apply_overlong_policy
from energon_pack.samples import EncodedCaptioningSample, EncodedMultimodalSample, EncodedSample


def doc(n: int, key: str = "k") -> EncodedSample:
    return EncodedSample(
        __key__=key,
        __restore_key__=(),
        tokens=torch.arange(10, 10 + n),
        loss_mask=torch.ones(n, dtype=torch.bool),
    )


def sft_doc(key: str, prompt: int, n: int = 10) -> EncodedSample:
    """``n`` tokens ``0..n-1``; the first ``prompt`` carry no loss (an SFT prompt)."""
    return EncodedSample(
        __key__=key,
        __restore_key__=(),
        tokens=torch.arange(n),
        loss_mask=torch.tensor([False] * prompt + [True] * (n - prompt)),
    )


def caption_doc() -> EncodedCaptioningSample:
    """tokens: 0 1 [2 3 4 5] 6 7 [8 9] 10: two images of 4 and 2 tokens (grids 16 and 8 rows)."""
    return EncodedCaptioningSample(
        __key__="c",
        __restore_key__=(),
        tokens=torch.arange(11),
        loss_mask=torch.ones(11, dtype=torch.bool),
        pixel_values=torch.cat([torch.zeros(16, 3), torch.ones(8, 3)]),
        image_grid_thw=torch.tensor([[1, 4, 4], [1, 2, 4]]),
        image_spans=torch.tensor([[2, 6], [8, 10]]),
    )


def multimodal_doc() -> EncodedMultimodalSample:
    """tokens 0 [1 2] 3 [4 5 6 7] 8 [9 10 11] 12 13 14: image A (grid 1x2x4, 8 rows), a video
    (grid 2x2x4, 16 rows, 0.5 s per temporal patch), image B (grid 1x2x6, 12 rows). Every pixel
    row holds its own number (images 0..19, video 100..115), so a piece's rows name their items.
    """
    return EncodedMultimodalSample(
        __key__="m",
        __restore_key__=(),
        tokens=torch.arange(15),
        loss_mask=torch.ones(15, dtype=torch.bool),
        pixel_values=torch.arange(20.0).view(-1, 1).expand(-1, 3),
        image_grid_thw=torch.tensor([[1, 2, 4], [1, 2, 6]]),
        image_spans=torch.tensor([[1, 3], [9, 12]]),
        pixel_values_videos=(torch.arange(16.0) + 100).view(-1, 1).expand(-1, 3),
        video_grid_thw=torch.tensor([[2, 2, 4]]),
        video_spans=torch.tensor([[4, 8]]),
        video_second_per_grid=torch.tensor([0.5]),
    )


#: Per media kind: (spans field, grids field, pixel rows field) of the documents that have it.
MEDIA_FIELDS = {
    EncodedCaptioningSample: [("image_spans", "image_grid_thw", "pixel_values")],
    EncodedMultimodalSample: [
        ("image_spans", "image_grid_thw", "pixel_values"),
        ("video_spans", "video_grid_thw", "pixel_values_videos"),
    ],
}


def test_fitting_document_is_returned_unchanged() -> None:
    d = doc(4)
    for policy in OverlongPolicy:
        assert apply_overlong_policy(d, 4, policy, PackingStats()) == [d]


def test_truncate_keeps_the_head_counts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    stats = PackingStats()
    (out,) = apply_overlong_policy(doc(9), 4, "truncate", stats)
    assert out.__key__ == "k"
    assert out.tokens.tolist() == [10, 11, 12, 13]
    assert (stats.truncated_overlong, stats.truncated_tokens) == (1, 5)
    assert "truncated sample 'k' to pack_size=4 (5 tokens lost)" in caplog.text


def test_split_makes_numbered_pieces_covering_every_token() -> None:
    stats = PackingStats()
    pieces = apply_overlong_policy(doc(9), 4, OverlongPolicy.SPLIT, stats)
    # 9 tokens at pack size 4 -> 4 + 4 + 1, keys k#0 k#1 k#2.
    assert [p.__key__ for p in pieces] == ["k#0", "k#1", "k#2"]
    assert torch.cat([p.tokens for p in pieces]).tolist() == list(range(10, 19))
    assert (stats.split_overlong, stats.split_pieces) == (1, 3)


def test_drop_counts_and_remembers_the_key(caplog: pytest.LogCaptureFixture) -> None:
    stats = PackingStats()
    assert apply_overlong_policy(doc(9, "long"), 4, "drop", stats) == []
    assert stats.dropped_overlong == 1 and list(stats.dropped_keys) == ["long"]
    assert "long" in caplog.text


def test_error_names_the_sample_and_the_fix() -> None:
    with pytest.raises(OverlongSampleError, match=r"'long' has 9 tokens > pack_size=4.*'split'"):
        apply_overlong_policy(doc(9, "long"), 4, "error", PackingStats())
    assert issubclass(OverlongSampleError, ValueError)


def test_split_never_cuts_an_image_and_moves_its_pixels() -> None:
    # Pack size 7: the cut at 7 would not cut an image (spans [2,6) and [8,10)) -> [0,7), then
    # [7,14) would end at 11 -> [7,11). Pack size 9: the cut at 9 falls in [8,10) -> moves to 8.
    pieces = apply_overlong_policy(caption_doc(), 9, "split", PackingStats())
    assert [(p.tokens[0].item(), len(p.tokens)) for p in pieces] == [(0, 8), (8, 3)]
    first, second = pieces
    assert first.image_spans.tolist() == [[2, 6]] and first.pixel_values.shape == (16, 3)
    assert first.image_grid_thw.tolist() == [[1, 4, 4]]
    assert second.image_spans.tolist() == [[0, 2]] and second.image_grid_thw.tolist() == [[1, 2, 4]]
    assert torch.equal(second.pixel_values, torch.ones(8, 3))


def test_truncate_drops_images_past_the_cut() -> None:
    (out,) = apply_overlong_policy(caption_doc(), 9, "truncate", PackingStats())
    assert out.tokens.tolist() == list(range(8))
    assert out.image_spans.tolist() == [[2, 6]] and out.pixel_values.shape == (16, 3)


def test_an_image_longer_than_the_pack() -> None:
    # split: piece [0, 2), then the 4-token image at 2 cannot fit 3 tokens -> error.
    with pytest.raises(OverlongSampleError, match="'c'"):
        apply_overlong_policy(caption_doc(), 3, "split", PackingStats())
    # truncate: the cut at 3 moves back to the image start: the text before it survives.
    (out,) = apply_overlong_policy(caption_doc(), 3, "truncate", PackingStats())
    assert out.tokens.tolist() == [0, 1] and out.image_spans.shape == (0, 2)
    assert out.pixel_values.shape == (0, 3)


def test_stats_fill_and_documents_worked_example() -> None:
    stats = PackingStats(log_every=0)
    stats.record_pack(doc_lengths=[5, 3], pack_size=8)
    stats.record_pack(doc_lengths=[4], pack_size=8)
    assert stats.fill == 12 / 16 and stats.documents_per_pack == 1.5
    assert (stats.last_fill, stats.last_documents) == (0.5, 1)
    assert stats.as_dict()["packs"] == 2
    assert "fill=75.0%" in stats.summary()


def test_truncate_that_keeps_no_target_drops_and_counts() -> None:
    # A 10-token SFT document whose prompt is 8 tokens: truncated to 6, no target token is
    # left, so the sample would train on nothing; it is dropped (counted, key recorded).
    sft = sft_doc("long-prompt", prompt=8)
    stats = PackingStats(log_every=0)
    assert apply_overlong_policy(sft, 6, "truncate", stats) == []
    assert (stats.dropped_overlong, stats.truncated_overlong) == (1, 0)
    assert list(stats.dropped_keys) == ["long-prompt"]
    # With one target left inside the cut (prompt of 5: token 5 is a target), it is truncated.
    sft = sft_doc("short-prompt", prompt=5)
    (kept,) = apply_overlong_policy(sft, 6, "truncate", stats)
    assert kept.loss_mask.tolist() == [False] * 5 + [True]
    assert (stats.dropped_overlong, stats.truncated_overlong, stats.truncated_tokens) == (1, 1, 4)


def test_split_leaves_out_target_free_pieces() -> None:
    # 10 tokens, prompt of 7 (no loss), pack 4: pieces 0-3 (prompt only: left out), 4-7 and
    # 8-9 (targets at 7, 8, 9). Keys keep their piece numbers.
    sft = sft_doc("p", prompt=7)
    stats = PackingStats(log_every=0)
    pieces = apply_overlong_policy(sft, 4, "split", stats)
    assert [p.__key__ for p in pieces] == ["p#1", "p#2"]
    assert [p.tokens.tolist() for p in pieces] == [[4, 5, 6, 7], [8, 9]]
    assert (stats.split_overlong, stats.split_pieces, stats.split_pieces_dropped) == (1, 3, 1)
    # Plain text (every token a target) keeps every piece, however short.
    stats = PackingStats(log_every=0)
    assert len(apply_overlong_policy(doc(9), 4, "split", stats)) == 3
    assert stats.split_pieces_dropped == 0


def test_split_counts_a_piece_of_one_target_token_as_target_free() -> None:
    # 9 prompt tokens + 1 target, pack 9: pieces [0..8] (prompt) and [9] (one token, never
    # predicted since it starts its own document): nothing left to learn, the sample is dropped.
    sft = sft_doc("all-prompt", prompt=9)
    stats = PackingStats(log_every=0)
    assert apply_overlong_policy(sft, 9, "split", stats) == []
    assert (stats.dropped_overlong, stats.split_overlong, stats.split_pieces_dropped) == (1, 0, 0)


def _document_pieces(d: EncodedSample, pack_size: int, policy: OverlongPolicy) -> object:
    """Piece lengths the encoder makes of ``d`` (or the error it raises)."""
    try:
        return [len(p.tokens) for p in apply_overlong_policy(d, pack_size, policy, PackingStats())]
    except OverlongSampleError:
        return OverlongSampleError


def _length_pieces(d: EncodedSample, pack_size: int, policy: OverlongPolicy) -> object:
    """Piece lengths the pure, lengths-level policy gives for ``d``'s length, spans and mask."""
    try:
        cut = cut_overlong(
            len(d.tokens),
            pack_size,
            policy,
            no_cut=d.media_spans().numpy(),
            targets=d.loss_mask.numpy(),
        )
    except OverlongSampleError:
        return OverlongSampleError
    return [e - s for s, e in cut.pieces]


@pytest.mark.parametrize("policy", list(OverlongPolicy))
@pytest.mark.parametrize("pack_size", [1, 3, 4, 7, 9, 12])
def test_lengths_and_documents_give_the_same_pieces(policy: OverlongPolicy, pack_size: int) -> None:
    # Text (every token a target): simulate's apply_overlong on the bare lengths predicts the
    # encoder's documents exactly, for every policy.
    lengths = [9, 3, 4, 12, 1, 8]
    docs = [doc(n, f"d{i}") for i, n in enumerate(lengths)]
    if policy is OverlongPolicy.ERROR and max(lengths) > pack_size:
        with pytest.raises(OverlongSampleError):
            apply_overlong(lengths, pack_size, policy)
    else:
        pieces = [_document_pieces(d, pack_size, policy) for d in docs]
        assert sum(pieces, []) == apply_overlong(lengths, pack_size, policy).tolist()
    # Captioning and multimodal (media spans no cut may enter) and SFT (a prompt without
    # targets): the same function, given the document's spans and loss mask, gives the
    # encoder's pieces.
    for d in (caption_doc(), multimodal_doc(), sft_doc("s", prompt=5), sft_doc("t", prompt=8)):
        assert _document_pieces(d, pack_size, policy) == _length_pieces(d, pack_size, policy)


def test_captioning_split_differs_from_bare_lengths_only_through_its_spans() -> None:
    # 11 tokens, images at [2, 6) and [8, 10), pack 9: the bare length splits 9 + 2, the
    # document 8 + 3 (the cut moves back to the image start).
    assert apply_overlong([11], 9, "split").tolist() == [9, 2]
    assert _document_pieces(caption_doc(), 9, OverlongPolicy.SPLIT) == [8, 3]
    assert cut_overlong(11, 9, "split", no_cut=caption_doc().image_spans).pieces == [
        (0, 8),
        (8, 11),
    ]


def test_multimodal_split_keeps_images_and_videos_whole_and_in_order() -> None:
    # Pack 6: the cut at 6 falls in the video [4, 8) -> 4; the cut at 4 + 6 = 10 falls in image
    # B [9, 12) -> 9; the rest [9, 15) fits. One item per piece: A | video | B.
    a, v, b = apply_overlong_policy(multimodal_doc(), 6, "split", PackingStats())
    assert [p.tokens.tolist() for p in (a, v, b)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7, 8],
        [9, 10, 11, 12, 13, 14],
    ]
    assert a.image_spans.tolist() == [[1, 3]] and a.video_spans.shape == (0, 2)
    assert a.pixel_values[:, 0].tolist() == list(range(8))
    assert a.pixel_values_videos.shape == (0, 3) and a.video_second_per_grid.tolist() == []
    assert v.image_spans.shape == (0, 2) and v.pixel_values.shape == (0, 3)
    assert v.video_spans.tolist() == [[0, 4]] and v.video_grid_thw.tolist() == [[2, 2, 4]]
    assert v.pixel_values_videos[:, 0].tolist() == [100.0 + i for i in range(16)]
    assert v.video_second_per_grid.tolist() == [0.5] and v.num_media_tokens == 4
    assert b.image_spans.tolist() == [[0, 3]] and b.image_grid_thw.tolist() == [[1, 2, 6]]
    assert b.pixel_values[:, 0].tolist() == list(range(8, 20))
    assert all(type(p) is EncodedMultimodalSample for p in (a, v, b))


def test_multimodal_truncate_keeps_the_media_before_the_cut() -> None:
    # Pack 10: the cut at 10 falls in image B [9, 12) -> 9: image A and the video stay.
    (out,) = apply_overlong_policy(multimodal_doc(), 10, "truncate", PackingStats())
    assert out.tokens.tolist() == list(range(9))
    assert out.media_spans().tolist() == [[1, 3], [4, 8]]
    assert out.pixel_values.shape == (8, 3) and out.pixel_values_videos.shape == (16, 3)


def test_slice_refuses_a_cut_through_media() -> None:
    with pytest.raises(ValueError, match=r"\[0, 6\) cuts media span \[4, 8\)"):
        multimodal_doc().slice(0, 6)
    assert multimodal_doc().media_spans().tolist() == [[1, 3], [4, 8], [9, 12]]
    assert doc(3).media_spans().shape == (0, 2) and doc(5).slice(1, 3).tokens.tolist() == [11, 12]


def _check_piece(orig: EncodedSample, piece: EncodedSample) -> int:
    """Assert ``piece`` holds exactly ``orig``'s media inside its token range; their number.

    The reference: items by their spans, rows by the running sum of ``t*h*w`` over the grids.
    """
    offset = int(piece.tokens[0]) - int(orig.tokens[0])
    end = offset + len(piece.tokens)
    assert torch.equal(piece.tokens, orig.tokens[offset:end])
    count = 0
    for spans_f, grid_f, rows_f in MEDIA_FIELDS.get(type(orig), []):
        spans, grid, rows = (getattr(orig, f) for f in (spans_f, grid_f, rows_f))
        sizes = [int(t * h * w) for t, h, w in grid.tolist()]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        inside = [i for i, (s, e) in enumerate(spans.tolist()) if offset <= s and e <= end]
        assert getattr(piece, spans_f).tolist() == [
            [s - offset, e - offset] for s, e in spans[inside].tolist()
        ]
        assert getattr(piece, grid_f).tolist() == grid[inside].tolist()
        want = [rows[starts[i] : starts[i] + sizes[i]] for i in inside]
        assert torch.equal(getattr(piece, rows_f), torch.cat(want) if want else rows[:0])
        assert getattr(piece, rows_f).shape[0] == sum(sizes[i] for i in inside)
        count += len(inside)
    if isinstance(piece, EncodedMultimodalSample):
        assert len(piece.video_second_per_grid) == len(piece.video_grid_thw)
    assert count == len(piece.media_spans())
    return count


@pytest.mark.parametrize("policy", list(OverlongPolicy))
@pytest.mark.parametrize("make", [lambda: doc(15), caption_doc, multimodal_doc])
def test_every_document_type_and_policy_cuts_around_its_media(policy, make) -> None:
    orig = make()
    n_media = len(orig.media_spans())
    for pack_size in range(1, len(orig.tokens) + 2):
        try:
            pieces = apply_overlong_policy(orig, pack_size, policy, PackingStats(log_every=0))
        except OverlongSampleError:
            assert len(orig.tokens) > pack_size and policy in ("error", "split", "truncate")
            continue
        assert all(type(p) is type(orig) and len(p.tokens) <= pack_size for p in pieces)
        counts = [_check_piece(orig, p) for p in pieces]
        if policy is OverlongPolicy.SPLIT:
            assert torch.equal(torch.cat([p.tokens for p in pieces]), orig.tokens)
            assert sum(counts) == n_media
        elif policy is OverlongPolicy.TRUNCATE:  # the head, or nothing (no target left)
            assert len(pieces) <= 1 and all(p.tokens[0] == orig.tokens[0] for p in pieces)
        elif len(orig.tokens) > pack_size:  # drop
            assert pieces == []
