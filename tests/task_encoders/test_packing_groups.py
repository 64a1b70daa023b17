# SPDX-License-Identifier: Apache-2.0
"""Packing policy per dataset of a blend (issue 33, item 2): each ``packing_group`` of a
metadataset is packed in its own buffer under its own policy (exactly as that dataset alone;
media budgets too), the groups' packs hold the blend weights in tokens and are counted per
dataset, a save/restore at any point gives the uninterrupted stream, and a changed policy or
group is refused by name. The 2-worker and 2-rank checks are in test_size_blend.py (slow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blend_helpers import PACK, blend_encoder, blend_loader, take
from megatron.energon.errors import FatalSampleError

from energon_pack.energon import ResumeConfigError
from energon_pack.samples import EncodedSample, PackingCounts
from energon_pack.task_encoders import ConversationPackingTaskEncoder, PackingPolicy
from energon_pack.testing import assert_restore_sample_reproduces, assert_same_item
from energon_pack.training import make_loader
from energon_pack_tools import LengthTextEncoder, make_blend_metadataset

pytestmark = pytest.mark.filterwarnings("ignore::energon_pack.encoding.SmallPackingBufferWarning")

#: ``short`` (4..64 tokens) in a buffer of 64 by first-fit; ``long`` (300..1500) in a buffer
#: of 4, at most 2 documents per pack.
POLICIES = {
    "chat": PackingPolicy(buffer_size=64, algorithm="first_fit"),
    "docs": PackingPolicy(buffer_size=4, max_samples_per_pack=2),
}


def _encoder(policies: Any = POLICIES, size: Any = "tokens") -> Any:
    return blend_encoder(size, policies)


def _loader(meta: Path, encoder: Any = None, buffer: int | None = 32) -> Any:
    """:func:`blend_loader`, by default with the groups of :data:`POLICIES`."""
    return blend_loader(meta, encoder or _encoder(), buffer)


def test_each_group_packs_as_its_dataset_alone_under_its_policy(grouped_blend: Path) -> None:
    """The packs of each group, in order, are the packs of its dataset loaded alone with the
    group's buffer size and policy; no pack mixes groups."""
    packs = take(_loader(grouped_blend), 24)
    by_group: dict[str, list[list[int]]] = {"chat": [], "docs": []}
    for pack in packs:
        (group,) = {"chat" if n <= 64 else "docs" for n in pack.doc_lengths}
        assert pack.__subflavors__ == {"packing_group": group}
        by_group[group].append(pack.doc_lengths)
    assert all(len(p) <= 2 for p in by_group["docs"]) and by_group["chat"]
    for group, name, config in (
        ("chat", "short", {"algorithm": "first_fit"}),
        ("docs", "long", {"max_samples_per_pack": 2}),
    ):
        encoder = blend_encoder(None, **config)
        alone = blend_loader(grouped_blend.parent / name, encoder, POLICIES[group].buffer_size)
        expected = [p.doc_lengths for p in take(alone, len(by_group[group]))]
        assert by_group[group] == expected, group


def test_save_restore_at_any_point_gives_the_uninterrupted_stream(grouped_blend: Path) -> None:
    """Saved after 1, 4 and 11 packs (inside the first buffers of both groups, and later),
    restored in a fresh loader: the uninterrupted stream, every field; ``restore_sample``
    rebuilds each pack."""
    n = 12
    reference = take(_loader(grouped_blend), n)
    for save_after in (1, 4, 11):
        first = _loader(grouped_blend)
        it = iter(first)
        consumed = [next(it) for _ in range(save_after)]
        state = first.save_state_rank()
        resumed = _loader(grouped_blend)
        resumed.restore_state_rank(state)
        stream = consumed + take(resumed, n - save_after)
        for i, (a, b) in enumerate(zip(reference, stream, strict=True)):
            assert_same_item(a, b, what=f"save after {save_after}: item {i}")
    assert_restore_sample_reproduces(lambda: _loader(grouped_blend), reference[::2])


def test_a_changed_policy_or_group_is_refused_by_name(grouped_blend: Path, tmp_path: Path) -> None:
    first = _loader(grouped_blend)
    take(first, 3)
    state = first.save_state_rank()
    bigger = {**POLICIES, "docs": PackingPolicy(buffer_size=8, max_samples_per_pack=2)}
    with pytest.raises(ResumeConfigError, match=r"packing_groups\.docs\.buffer_size: 4 -> 8"):
        _loader(grouped_blend, _encoder(bigger)).restore_state_rank(state)
    datasets = [(grouped_blend.parent / "short", 1.0), (grouped_blend.parent / "long", 1.0)]
    moved = make_blend_metadataset(tmp_path / "moved.yaml", datasets, ["docs", "docs"])
    with pytest.raises(ResumeConfigError, match=r"dataset\.0\.subflavors"):
        with pytest.warns(UserWarning, match=r"\['chat'\] name no dataset"):
            _loader(moved).restore_state_rank(state)


def test_what_groups_cannot_do_is_refused_with_the_fix(grouped_blend: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"packing_group \['docs'\].*add a PackingPolicy"):
        _loader(grouped_blend, _encoder({"chat": POLICIES["chat"]}))
    with pytest.raises(ValueError, match="a pack cannot be measured in bytes"):
        _loader(grouped_blend, _encoder(size="bytes"))
    plain = make_blend_metadataset(tmp_path / "p.yaml", [(grouped_blend.parent / "long", 1.0)])
    with pytest.raises(ValueError, match="packing group None has no buffer size"):
        with pytest.warns(UserWarning, match="name no dataset"):  # no leaf has a group
            _loader(plain, buffer=None)
    with pytest.warns(UserWarning, match=r"packing_groups \['spare'\] name no dataset"):
        _loader(grouped_blend, _encoder({**POLICIES, "spare": PackingPolicy(buffer_size=2)}))
    with pytest.raises(ValueError, match="buffer_size=0 must be an int >= 1"):
        PackingPolicy(buffer_size=0)
    with pytest.raises(ValueError, match="is not registered"):
        PackingPolicy(algorithm="nope")


class KeylessEncoder(LengthTextEncoder):
    """Builds documents without ``derive_from``: they lose the raw sample's subflavors."""

    def encode_document(self, sample: Any) -> EncodedSample:
        doc = super().encode_document(sample)
        return EncodedSample(
            __key__=doc.__key__,
            __restore_key__=doc.__restore_key__,
            tokens=doc.tokens,
            loss_mask=doc.loss_mask,
        )


def test_a_document_that_lost_its_group_stops_the_loader(grouped_blend: Path) -> None:
    encoder = blend_encoder(None, POLICIES, KeylessEncoder(pack_size=PACK, overlong="split"))
    # energon re-raises it as a FatalSampleError (a PackingGroupError's base) with its message
    with pytest.raises(FatalSampleError, match="EncodedSample.derive_from"):
        take(_loader(grouped_blend, encoder), 1)


def test_media_budgets_per_group(
    conversation_dataset: Any, vlm_tokenizer_dir: Path, image_processor: Any, tmp_path: Path
) -> None:
    """The same conversations in two groups: under ``tight`` (2 media, 10 media tokens per
    pack) no pack is over budget and the three-image conversations are dropped and counted;
    under ``free`` (the encoder's: no budget) some pack holds more."""
    path, keys, records = conversation_dataset
    meta = make_blend_metadataset(
        tmp_path / "m.yaml", [(path, 1.0), (path, 1.0)], ["tight", "free"]
    )
    encoder = ConversationPackingTaskEncoder(vlm_tokenizer_dir, image_processor, pack_size=128)
    encoder.packing_groups = {
        "tight": PackingPolicy(buffer_size=6, max_media_per_pack=2, max_media_tokens_per_pack=10),
        "free": PackingPolicy(buffer_size=8),
    }
    packs = take(make_loader(meta, encoder, packing_buffer_size=6, repeat=True), 16)
    load = {"tight": [], "free": []}
    for pack in packs:
        items = len(pack.image_grid_thw) + len(pack.video_grid_thw)
        load[pack.__subflavors__["packing_group"]].append((pack.num_media_tokens, items))
    assert load["tight"] and all(t <= 10 and i <= 2 for t, i in load["tight"]), load
    assert any(t > 10 or i > 2 for t, i in load["free"]), load
    three_images = {k for k, r in records.items() if r["id"] % 4 == 2}
    assert set(encoder.stats.dropped_keys) <= three_images and encoder.stats.dropped_keys


def test_validation_packs_each_groups_documents_apart(grouped_blend: Path, tmp_path: Path) -> None:
    """A validation blend is packed in the loader's one buffer, each group's documents apart
    under its policy: no pack mixes groups, ``docs`` packs hold at most 2, none is lost."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    meta = tmp_path / "val.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  val:\n    blend:\n"
        + "".join(
            f"      - path: {grouped_blend.parent / name}\n        split_part: train\n"
            f"        subflavors: {{packing_group: {group}}}\n"
            for name, group in (("short", "chat"), ("long", "docs"))
        )
    )
    dataset = get_val_dataset(
        str(meta),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        packing_buffer_size=32,
        task_encoder=_encoder(),
    )
    packs = list(get_loader(dataset))
    for pack in packs:
        assert len({n <= 64 for n in pack.doc_lengths}) == 1, pack.doc_lengths
        assert max(pack.doc_lengths) <= 64 or len(pack.doc_lengths) <= 2, pack.doc_lengths
    assert sum(len(p.doc_lengths) for p in packs) == 500  # 400 short + 100 long, none split


def test_a_group_of_two_datasets_is_blended_inside_and_counted_per_dataset(
    grouped_blend: Path, tmp_path: Path
) -> None:
    """Group ``a`` = ``short`` + ``mid`` (blended by tokens inside it), group ``b`` = ``long``
    at weights 1:2:1: ``b`` trains half the tokens (within one pack), and the counts name each
    of the three datasets, in metadataset order."""
    from energon_pack_tools import make_text_dataset

    mid = make_text_dataset(tmp_path / "mid", [str(100 + i % 100) for i in range(200)])
    datasets = [
        (grouped_blend.parent / "short", 1.0),
        (grouped_blend.parent / "long", 2.0),
        (mid, 1.0),
    ]
    meta = make_blend_metadataset(tmp_path / "three.yaml", datasets, ["a", "b", "a"])
    policies = {"a": PackingPolicy(buffer_size=64), "b": PackingPolicy(buffer_size=4)}
    packs, tokens = [], [0, 0, 0]  # short (<= 64), long (>= 300), mid (100..199)
    for pack in _loader(meta, _encoder(policies)):
        packs.append(pack)
        for n in pack.doc_lengths:
            tokens[0 if n <= 64 else 1 if n >= 300 else 2] += n
        if sum(tokens) >= 40_000:
            break
    counts = PackingCounts.total(p.counts for p in packs)
    assert counts.dataset_tokens == tuple(tokens)
    assert sum(counts.dataset_documents) == sum(len(p.doc_lengths) for p in packs)
    assert abs(tokens[1] / sum(tokens) - 0.5) <= PACK / sum(tokens), tokens
    assert min(tokens[0], tokens[2]) > 0.15 * sum(tokens), tokens
