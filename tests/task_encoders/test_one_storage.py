# SPDX-License-Identifier: Apache-2.0
"""A batch a loader worker sends has its small tensors in one storage whose bytes travel by
value through the multiprocessing pickler (``energon_pack.energon._one_storage``; above
``BY_VALUE`` bytes, one shared-memory storage), with every value, dtype and shape unchanged."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from megatron.energon import TextSample

import energon_pack.energon._one_storage as one
from energon_pack.samples import collate_packs, pack_documents
from energon_pack.task_encoders import CaptioningPackingTaskEncoder, LLMPackingTaskEncoder


@pytest.fixture(autouse=True)
def _own_registrations(monkeypatch):
    """``one_storage`` registers batch types with this process's multiprocessing pickler (in a
    worker); undo it after each test so that no other test pickles by value."""
    monkeypatch.setattr(ForkingPickler, "_extra_reducers", dict(ForkingPickler._extra_reducers))
    monkeypatch.setattr(one, "_REGISTERED", set())


def _sent(item):
    """``item`` pickled and unpickled as a worker's multiprocessing queue does."""
    return pickle.loads(ForkingPickler.dumps(item))


def _tensors(obj, out=None):
    """Every tensor of ``obj``'s dataclass fields (nested ones too), by field path."""
    out = {} if out is None else out
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, torch.Tensor):
            out[f"{type(obj).__name__}.{f.name}"] = value
        elif dataclasses.is_dataclass(value):
            _tensors(value, out)
    return out


def _text_batch(tokenizer, corpus):
    enc = LLMPackingTaskEncoder(tokenizer, pack_size=64, overlong="truncate")
    docs = [
        d
        for i, text in enumerate(corpus[:9])
        for d in enc.encode_sample(TextSample(__key__=f"d{i}", __restore_key__=(), text=text))
    ]
    packs = [pack_documents(docs[i : i + 3]) for i in range(0, 9, 3)]
    return collate_packs(packs, pad_to=3 * 64)


def test_a_text_batch_is_written_into_one_storage(tokenizer, corpus) -> None:
    """``collate_packs`` writes tokens, labels and ``cu_seqlens*`` into one buffer (shared
    memory only in a loader worker); the per-token metadata is computed when read."""
    batch = _text_batch(tokenizer, corpus)
    tensors = _tensors(batch)
    assert set(tensors) == {
        "PackedTextBatch.tokens",
        "PackedTextBatch.labels",
        "DocumentMetadata.cu_seqlens",
        "DocumentMetadata.cu_seqlens_padded",
    }
    assert len({t.untyped_storage().data_ptr() for t in tensors.values()}) == 1
    assert not batch.tokens.is_shared()
    assert batch.metadata.computed == {}
    positions = batch.position_ids
    assert batch.metadata.computed == {"position_ids": positions}
    assert batch.position_ids is positions  # computed once


def test_small_tensors_share_one_storage_values_unchanged(tokenizer, corpus) -> None:
    batch = _text_batch(tokenizer, corpus)
    apart = {k: v.clone() for k, v in _tensors(batch).items()}  # one storage each
    batch.tokens, batch.labels = apart["PackedTextBatch.tokens"], apart["PackedTextBatch.labels"]
    meta = dataclasses.replace(
        batch.metadata,
        cu_seqlens=apart["DocumentMetadata.cu_seqlens"],
        cu_seqlens_padded=apart["DocumentMetadata.cu_seqlens_padded"],
    )
    batch.metadata = meta
    moved = one.one_storage(batch)
    assert moved is batch
    after = _tensors(batch)
    assert after.keys() == apart.keys()
    for name, value in apart.items():
        assert after[name].dtype == value.dtype and after[name].shape == value.shape, name
        assert torch.equal(after[name], value), name
    assert len({t.untyped_storage().data_ptr() for t in after.values()}) == 1
    assert not after["PackedTextBatch.tokens"].untyped_storage().is_shared()  # sent by value
    # a batch already in one storage of its size stays where it is
    tokens = batch.tokens
    assert one.one_storage(batch).tokens is tokens


def test_a_batch_is_sent_by_value_and_rebuilt_as_views_of_one_tensor(tokenizer, corpus) -> None:
    """Through the multiprocessing pickler: the values, dtypes, shapes and strides come back as
    views of one private tensor, a tensor in two fields stays one tensor, the sender's batch
    is left as it was, and no tensor goes through shared memory."""
    batch = _text_batch(tokenizer, corpus)
    batch.labels = batch.labels.clone()  # a second storage: one_storage gathers both
    batch.token_type_ids = batch.tokens  # one tensor in two fields
    before = {k: v.clone() for k, v in _tensors(batch).items()}
    plain = _sent(batch)  # not registered yet: pickled as torch does, through shared memory
    assert plain.tokens.is_shared()
    batch = _text_batch(tokenizer, corpus)
    batch.labels = batch.labels.clone()
    batch.token_type_ids = batch.tokens
    one.one_storage(batch)
    kept = dict(_tensors(batch))
    got = _sent(batch)
    assert type(got) is type(batch) and got is not batch
    assert all(_tensors(batch)[k] is v for k, v in kept.items())  # the sender's batch unchanged
    after = _tensors(got)
    assert after.keys() == before.keys()
    for name, value in before.items():
        assert after[name].dtype == value.dtype, name
        assert after[name].shape == value.shape and after[name].stride() == value.stride(), name
        assert torch.equal(after[name], value), name
    assert len({t.untyped_storage().data_ptr() for t in after.values()}) == 1
    assert not any(t.is_shared() for t in after.values())
    assert got.token_type_ids is got.tokens
    assert got.__key__ == batch.__key__ and got.counts == batch.counts
    assert torch.equal(got.position_ids, batch.position_ids)  # computed from the rebuilt views
    assert type(got.metadata) is type(batch.metadata) and got.metadata is not batch.metadata


def test_over_by_value_the_small_tensors_go_through_one_shared_storage(
    tokenizer, corpus, monkeypatch
) -> None:
    monkeypatch.setattr(one, "BY_VALUE", 0)
    batch = _text_batch(tokenizer, corpus)
    before = {k: v.clone() for k, v in _tensors(batch).items()}
    one.one_storage(batch)
    after = _tensors(batch)
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert len({t.untyped_storage().data_ptr() for t in after.values()}) == 1
    assert batch.tokens.untyped_storage().is_shared()
    assert type(batch) not in one._REGISTERED


def test_tensors_in_several_storages_at_pickling_are_pickled_as_usual(tokenizer, corpus) -> None:
    batch = _text_batch(tokenizer, corpus)
    one.one_storage(batch)
    batch.labels = batch.labels.clone()  # changed after one_storage: two storages
    rebuild, *_ = one._by_value(batch)
    assert rebuild is not one._rebuilt


def test_large_tensors_and_shared_fields_keep_their_identity(
    tokenizer_dir, image_processor, monkeypatch
) -> None:
    from megatron.energon import CaptioningSample

    from energon_pack_tools import random_png_bytes

    enc = CaptioningPackingTaskEncoder(
        tokenizer_dir, image_processor, pack_size=512, mrope=True, light_media=False
    )
    samples = [
        CaptioningSample(
            __key__=f"c{i}",
            __restore_key__=(),
            image=random_png_bytes(64, 48 + 8 * i),
            caption="a seed",
        )
        for i in range(3)
    ]
    docs = [d for s in samples for d in enc.encode_sample(s)]
    pack = pack_documents(docs, **enc.pack_options())
    batch = collate_packs([pack, copy.deepcopy(pack)], pad_to=512)
    pixels = batch.pixel_values
    monkeypatch.setattr(one, "SMALL", pixels.numel() * pixels.element_size() - 1)
    batch.labels = batch.tokens  # one tensor in two fields stays one tensor
    before = {k: v.clone() for k, v in _tensors(batch).items()}
    one.one_storage(batch)
    assert batch.pixel_values is pixels  # over SMALL: sent on its own
    assert batch.labels is batch.tokens
    for name, value in before.items():
        assert torch.equal(_tensors(batch)[name], value), name
    nonempty = {k: t for k, t in _tensors(batch).items() if t.numel()}
    storages = {k: t.untyped_storage().data_ptr() for k, t in nonempty.items()}
    assert len(set(storages.values())) == 2, storages  # the pixels', and the rest's
    assert not batch.tokens.is_shared()  # the rest goes by value


@pytest.mark.parametrize("value", [None, 3, "x", [torch.zeros(2)]])
def test_items_without_two_small_tensors_pass_unchanged(value) -> None:
    assert one.one_storage(value) is value


def test_a_worker_sends_one_storage_and_restore_sample_reproduces(text_dataset, tokenizer_dir):
    """Through a real 2-worker loader (in a subprocess: a dropped worker loader stalls the next
    ``gc.collect``): each received batch has one private storage for its small tensors (sent by
    value), and each equals ``restore_sample`` of its key, which rebuilds it in the main
    process without the move."""
    script = textwrap.dedent(
        f"""
        import json, functools
        from energon_pack.task_encoders import LLMPackingTaskEncoder
        from energon_pack.testing import assert_restore_sample_reproduces
        from energon_pack.training import make_loader
        enc = LLMPackingTaskEncoder({str(tokenizer_dir)!r}, pack_size=32, overlong="split")
        mk = functools.partial(make_loader, {str(text_dataset.path)!r}, enc, num_workers=2,
                               packing_buffer_size=6, batch_size=2)
        batches = list(mk())
        storages = [len({{t.untyped_storage().data_ptr() for t in (b.tokens, b.labels,
                     b.metadata.cu_seqlens, b.metadata.cu_seqlens_padded)}})
                    for b in batches]
        shared = [b.tokens.is_shared() for b in batches]
        assert_restore_sample_reproduces(mk, batches, order_seed=1)
        print(json.dumps({{"storages": storages, "shared": shared, "workers": sorted({{b.__restore_key__[1] for b in batches}})}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["workers"] == [0, 1]
    assert result["storages"] and set(result["storages"]) == {1}
    assert not any(result["shared"])  # sent by value, not through shared memory


def test_a_pack_of_a_split_piece_leaves_as_the_piece_alone() -> None:
    """A lone document's tokens are the pack's without a copy; a split piece's are a view of
    its whole document's, and ``one_storage`` sends only the view's bytes."""
    from energon_pack_tools import make_document

    whole = make_document("a", list(range(1, 101)))
    piece = whole.slice(0, 10, key="a#0")
    pack = pack_documents([piece])
    assert pack.tokens.data_ptr() == whole.tokens.data_ptr()  # no copy
    assert pack.tokens.untyped_storage().nbytes() == 100 * 8
    one.one_storage(pack)
    assert pack.tokens.tolist() == list(range(1, 11))
    assert pack.tokens.untyped_storage().nbytes() < 100 * 8
