# SPDX-License-Identifier: Apache-2.0
"""megatron_batch on real packed Qwen2-VL / Qwen2.5-VL batches (documents with 0, 1 and 3
images and a video, encoded by ConversationPackingTaskEncoder with the Qwen2-VL image processor
built offline) against the padded/alone reference: each document's THD mRoPE rows equal its
positions computed alone, pixels and grids follow pack order, cu_seqlens match, and the parts of
megatron-core that run on CPU take the batch (PackedSeqParams, THD RoPE's CP slicing,
MultimodalRotaryEmbedding). Families that declare no Megatron layout are refused by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from vlm_helpers import chat_sample, png
from vlm_models import FAMILIES, INTERNVL_TOKENS, TOKENS_PER_SECOND, internvl_processor, tiny_vlm

from energon_pack.attention import cp_partition_indices, mrope_position_ids
from energon_pack.samples import (
    MediaFamily,
    MegatronVLMBatch,
    attention_flops,
    bridge_vlm_batch,
    collate_packs,
    megatron_batch,
    pack_documents,
)
from energon_pack.task_encoders import ConversationPackingTaskEncoder
from energon_pack_tools import make_image_processor

PATCH = 14
#: Bridge's get_rope_index order: image, video, vision start token.
VLM_TOKEN_NAMES = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>")
SIZE = 2 * PATCH


def _samples(size: int = SIZE) -> list[Any]:
    frames = [png(size, size, seed=50 + i) for i in range(3)]
    video = chat_sample("video", ["<video> is it", "a batch"], videos=[frames])
    video.video_fps = [1.0]
    return [
        chat_sample("text", ["is it a token", "it is"]),
        chat_sample("one", ["<image> is it", "a seed"], images=[png(size, 2 * size, 1)]),
        chat_sample(
            "three",
            ["<image> <image> which", "the one", "<image> and this", "a random seed"],
            images=[png(size, size, 2), png(2 * size, size, 3), png(size, 3 * size, 4)],
        ),
        video,
    ]


def _build(family: str, tokenizer_dir: Path, alignment: int = 1) -> tuple[Any, list[Any], Any]:
    """(encoder, documents, batch of two packs: [text, one] and [three, video])."""
    processor = make_image_processor(
        patch_size=PATCH, min_pixels=SIZE * SIZE, max_pixels=9 * SIZE * SIZE
    )
    tps = TOKENS_PER_SECOND if family == "qwen2_5_vl" else None
    enc = ConversationPackingTaskEncoder(
        tokenizer_dir, processor, pack_size=512, mrope=True, tokens_per_second=tps
    )
    docs = [enc.materialize(d) for s in _samples() for d in enc.encode_sample(s)]
    options = enc.pack_options() | {"alignment": alignment}
    packs = [pack_documents(docs[:2], **options), pack_documents(docs[2:], **options)]
    return enc, docs, collate_packs(packs, pad_to=max(p.length for p in packs) + 2 * alignment)


def _alone(doc: Any, tps: float | None) -> torch.Tensor:
    """The document's (3, n) mRoPE positions computed alone (images and videos by span)."""
    spans = [doc.image_spans.view(-1, 2), doc.video_spans.view(-1, 2)]
    grids = [doc.image_grid_thw.view(-1, 3), doc.video_grid_thw.view(-1, 3)]
    steps = [1.0] * len(grids[0]) + (
        [1.0] * len(grids[1]) if tps is None else (tps * doc.video_second_per_grid).tolist()
    )
    spans_all, grids_all = torch.cat(spans), torch.cat(grids)
    order = spans_all[:, 0].argsort().tolist()
    return mrope_position_ids(
        doc.length, spans_all[order], grids_all[order], time_intervals=[steps[i] for i in order]
    )


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_thd_batch_equals_each_document_alone(family: str, vlm_tokenizer_dir, vlm_tokenizer):
    from megatron.core.packed_seq_params import PackedSeqParams

    _, docs, batch = _build(family, vlm_tokenizer_dir)
    assert batch.family == MediaFamily("qwen2-vl", "mrope_patch_rows")  # what the family declares
    mb = megatron_batch(batch)
    assert isinstance(mb, MegatronVLMBatch)
    assert isinstance(mb.packed_seq_params, PackedSeqParams)
    total = batch.tokens.numel()
    assert mb.position_ids.shape == (3, 1, total) and mb.tokens.shape == (1, total)
    assert torch.equal(mb.tokens[0], batch.tokens.view(-1))
    image_id = vlm_tokenizer.convert_tokens_to_ids("<|image_pad|>")
    video_id = vlm_tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert torch.equal(mb.image_token_mask, mb.tokens == image_id)
    assert torch.equal(mb.video_token_mask, mb.tokens == video_id)
    tps = TOKENS_PER_SECOND if family == "qwen2_5_vl" else None
    cu = mb.packed_seq_params.cu_seqlens_q.tolist()
    cu_padded = mb.packed_seq_params.cu_seqlens_q_padded.tolist()
    assert len(cu) == len(docs) + 1
    assert [b - a for a, b in zip(cu, cu[1:])] == [d.length for d in docs]
    for doc, start in zip(docs, cu_padded):
        n = doc.length
        assert torch.equal(mb.position_ids[:, 0, start : start + n], _alone(doc, tps)), doc.__key__
        assert torch.equal(mb.tokens[0, start : start + n], doc.tokens)
        targets = torch.where(doc.loss_mask[1:], doc.tokens[1:], 0)
        assert torch.equal(mb.labels[0, start : start + n - 1], targets)
    imaged = [d for d in docs if len(d.image_grid_thw)]
    assert torch.equal(mb.pixel_values, torch.cat([d.pixel_values for d in imaged]))
    assert torch.equal(mb.image_grid_thw, torch.cat([d.image_grid_thw for d in imaged]))
    assert torch.equal(mb.pixel_values_videos, docs[-1].pixel_values_videos)
    assert torch.equal(mb.video_grid_thw, docs[-1].video_grid_thw)
    assert mb.pixel_values.shape[0] == int(mb.image_grid_thw.prod(-1).sum())
    cost = mb.vision_cost
    for row, members in enumerate([docs[:2], docs[2:]]):
        grids = [g for d in members for g in (*d.image_grid_thw, *d.video_grid_thw)]
        assert cost.patches[row] == sum(int(g.prod()) for g in grids)
        assert cost.text_attention_pairs[row] == sum(d.length**2 for d in members)
        assert cost.text_attention_pairs[row] < cost.padded_attention_pairs[row]
    hidden, layers = 64, 2
    assert attention_flops(cost.text_attention_pairs[1], hidden, layers) == (
        4 * hidden * layers * sum(d.length**2 for d in docs[2:])
    )


def test_cp_shares_are_megatrons_thd_rope_slices(vlm_tokenizer_dir) -> None:
    """With CP 2 each rank's mRoPE rows are what megatron-core's THD RoPE takes from the whole
    batch's rows (``_get_thd_freqs_on_this_cp_rank`` with offsets), and the ranks' tokens and
    image masks together are the batch's."""
    from megatron.core.models.common.embeddings.rope_utils import _get_thd_freqs_on_this_cp_rank

    _, _, batch = _build("qwen2_vl", vlm_tokenizer_dir, alignment=4)
    whole = megatron_batch(batch)
    cu = batch.cu_seqlens_padded.tolist()
    for rank in range(2):
        mb = megatron_batch(batch, cp_size=2, cp_rank=rank)
        assert mb.position_ids.shape == (3, 1, batch.tokens.numel() // 2)
        rows = whole.position_ids[:, 0].T  # (T, 3): one "frequency" row per position
        theirs = torch.cat(
            [
                _get_thd_freqs_on_this_cp_rank(rank, 2, torch.empty((e - s) // 2), rows, s)
                for s, e in zip(cu, cu[1:])
            ]
        )
        assert torch.equal(mb.position_ids[:, 0].T, theirs)
        assert torch.equal(mb.pixel_values, whole.pixel_values)  # the ViT sees every image
    shares = [megatron_batch(batch, cp_size=2, cp_rank=r) for r in (0, 1)]
    for name in ("tokens", "image_token_mask", "video_token_mask"):
        together = torch.cat([getattr(mb, name)[0] for mb in shares])
        index = torch.cat([cp_partition_indices(batch.cu_seqlens_padded, 2, r) for r in (0, 1)])
        assert torch.equal(together, getattr(whole, name)[0, index]), name
    assert int(sum(mb.image_token_mask.sum() for mb in shares)) == int(whole.image_token_mask.sum())


def test_megatron_cores_multimodal_rope_takes_the_rows(vlm_tokenizer_dir) -> None:
    """megatron-core's ``MultimodalRotaryEmbedding.forward`` (its __init__ asks for CUDA: the
    module is built by hand on CPU) on the (3, 1, T) rows gives, per document, the embedding of
    that document's rows alone."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import (
        MultimodalRotaryEmbedding,
    )

    rope = MultimodalRotaryEmbedding.__new__(MultimodalRotaryEmbedding)
    torch.nn.Module.__init__(rope)
    rope.inv_freq = 1.0 / (10000 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    rope.rotary_interleaved, rope.seq_len_interpolation_factor, rope.cp_group = False, None, None
    _, docs, batch = _build("qwen2_vl", vlm_tokenizer_dir)
    mb = megatron_batch(batch)
    emb = rope(mb.position_ids, [2, 3, 3])
    assert emb.shape == (batch.tokens.numel(), 1, 1, 16)
    cu_padded = mb.packed_seq_params.cu_seqlens_q_padded.tolist()
    for doc, start in zip(docs, cu_padded):
        alone = rope(_alone(doc, None).unsqueeze(1), [2, 3, 3])
        torch.testing.assert_close(emb[start : start + doc.length], alone, rtol=0, atol=0)


def test_families_without_a_megatron_layout_are_refused_by_name(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    """InternVL declares no Megatron layout: its batch is refused naming the family and the
    layouts built; the same batch without its family (documents built by hand) is refused by
    what the layout cannot carry (its tiles); packs of two families never share a batch."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(list(INTERNVL_TOKENS.values()), special_tokens=True)
    tok.save_pretrained(tmp_path)
    enc = ConversationPackingTaskEncoder(tmp_path, internvl_processor(tmp_path), pack_size=448)
    sample = chat_sample("one", ["<image> is it", "a seed"], images=[png(56, 56, 1)])
    docs = [enc.materialize(d) for d in enc.encode_sample(sample)]
    batch = collate_packs([pack_documents(docs, **enc.pack_options())])
    assert batch.family == MediaFamily("internvl", None)
    declared = "internvl family, which declares no Megatron layout.*'mrope_patch_rows' .*hf_kwargs"
    with pytest.raises(ValueError, match=declared):
        megatron_batch(batch)
    by_hand = dataclasses.replace(batch, family=None)
    with pytest.raises(ValueError, match=r"pixel_values of shape \(\d+, 3, \d+, \d+\), not patch"):
        megatron_batch(by_hand)
    pack = pack_documents(docs, **enc.pack_options())
    mixed = dataclasses.replace(pack, family=MediaFamily("qwen2-vl", "mrope_patch_rows"))
    with pytest.raises(ValueError, match="packs of one batch come from different VLM families"):
        collate_packs([pack, mixed])


def test_qwen_batch_without_mrope_is_refused(vlm_tokenizer_dir) -> None:
    processor = make_image_processor(patch_size=PATCH)
    enc = ConversationPackingTaskEncoder(vlm_tokenizer_dir, processor, pack_size=512)
    docs = [enc.materialize(d) for d in enc.encode_sample(_samples()[1])]
    batch = collate_packs([pack_documents(docs, **enc.pack_options())])
    with pytest.raises(ValueError, match="mrope=True"):
        megatron_batch(batch)


def _qwen3_batch(tokenizer_dir: Path) -> tuple[list[Any], Any]:
    """Qwen3-VL documents (text; 1 and 3 images; a 3-frame video; an image and a 5-frame video
    at 2 fps) and their batch of two packs."""
    size = 2 * FAMILIES["qwen3_vl"]
    processor = make_image_processor(
        patch_size=FAMILIES["qwen3_vl"], min_pixels=size * size, max_pixels=9 * size * size
    )
    enc = ConversationPackingTaskEncoder(
        tokenizer_dir, processor, pack_size=512, mrope=True, video_timestamps=True
    )
    mixed = chat_sample(
        "mixed",
        ["<image> and <video>", "the seed", "and then", "a token"],
        images=[png(size, 2 * size, 6)],
        videos=[[png(size, size, seed=70 + i) for i in range(5)]],
        video_fps=[2.0],
    )
    docs = [enc.materialize(d) for s in [*_samples(size), mixed] for d in enc.encode_sample(s)]
    packs = [
        pack_documents(docs[:3], **enc.pack_options()),
        pack_documents(docs[3:], **enc.pack_options()),
    ]
    batch = collate_packs(packs, pad_to=max(p.length for p in packs) + 3)
    return docs, batch


def test_qwen3_vl_thd_batch_equals_each_document_alone(vlm_tokenizer_dir, vlm_tokenizer) -> None:
    """Qwen3-VL (patch 16, per-frame ``<t seconds>`` timestamps between a video's frame groups):
    each document's THD mRoPE rows equal the tiny Qwen3-VL model's own ``get_rope_index`` of the
    document alone, and the video mask holds only the video placeholders (not the timestamp
    text and vision start/end tokens between a video's groups)."""
    docs, batch = _qwen3_batch(vlm_tokenizer_dir)
    mb = megatron_batch(batch)
    names = ("image", "video", "vision_start", "vision_end")
    tokens = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    ids = {n: vlm_tokenizer.convert_tokens_to_ids(t) for n, t in zip(names, tokens)}
    model = tiny_vlm("qwen3_vl", len(vlm_tokenizer), ids).model
    assert torch.equal(mb.image_token_mask, mb.tokens == ids["image"])
    assert torch.equal(mb.video_token_mask, mb.tokens == ids["video"])
    cu = mb.packed_seq_params.cu_seqlens_q_padded.tolist()
    for doc, start in zip(docs, cu):
        n, input_ids = doc.length, doc.tokens.view(1, -1)
        types = (input_ids == ids["image"]).int() + 2 * (input_ids == ids["video"]).int()
        grids = {"image_grid_thw": doc.image_grid_thw, "video_grid_thw": doc.video_grid_thw}
        grids = {k: v for k, v in grids.items() if len(v)}
        theirs, _ = model.get_rope_index(input_ids, types, **grids)
        assert torch.equal(mb.position_ids[:, 0, start : start + n], theirs[:, 0]), doc.__key__
        assert torch.equal(mb.tokens[0, start : start + n], doc.tokens)
    videos = [d for d in docs if len(d.video_grid_thw)]
    assert torch.equal(mb.video_grid_thw, torch.cat([d.video_grid_thw for d in videos]))
    assert torch.equal(mb.pixel_values_videos, torch.cat([d.pixel_values_videos for d in videos]))
    assert mb.pixel_values_videos.shape[0] == int(mb.video_grid_thw.prod(-1).sum())


def _bridge_root() -> Path:
    """Where Megatron-Bridge's ``megatron/bridge`` sources are. Bridge requires Python 3.12 and
    transformers <= 5.12.1 (its package ``__init__`` fails on this transformers), so it is not
    installed here: CI puts its wheel (0.6.2) beside megatron-core 0.19.2 in the
    newest-megatron-core tier, and the tests load single modules of it by path."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("megatron.bridge")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-bridge is not on the path (CI's newest-megatron-core tier has it)")
    return Path(spec.submodule_search_locations[0])


def _bridge_module(name: str) -> Any:
    """Megatron-Bridge's ``training/utils/<name>.py``, loaded by path (these modules need only
    torch and megatron-core 0.18+)."""
    import importlib.util
    import sys

    path = _bridge_root() / f"training/utils/{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"_bridge_{name}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # its dataclasses look their module up
    module_spec.loader.exec_module(module)
    return module


def test_bridge_vlm_batch_is_what_bridges_vlm_step_reads(vlm_tokenizer_dir) -> None:
    """The names Megatron-Bridge 0.6.2's ``vlm_step.get_batch_from_iterator`` reads (the
    ``PackedSeqParams`` fields as keys, the media in ``visual_inputs``); a CP share is refused
    (Bridge's Qwen-VL models split the sequence themselves)."""
    _, _, batch = _build("qwen2_5_vl", vlm_tokenizer_dir, alignment=4)
    mb = megatron_batch(batch)
    out = bridge_vlm_batch(mb)
    assert out["tokens"] is mb.tokens and out["position_ids"] is mb.position_ids
    assert out["attention_mask"] is None
    for name in ("cu_seqlens_q", "cu_seqlens_kv_padded", "max_seqlen_q"):
        assert out[name] is getattr(mb.packed_seq_params, name)
    assert set(out["visual_inputs"]) == {
        "pixel_values",
        "image_grid_thw",
        "pixel_values_videos",
        "video_grid_thw",
        "second_per_grid_ts",
    }
    assert out["visual_inputs"]["image_grid_thw"] is mb.image_grid_thw
    with pytest.raises(ValueError, match="context-parallel share.*cp_size=1"):
        bridge_vlm_batch(megatron_batch(batch, cp_size=2, cp_rank=0))


def test_bridges_own_packed_seq_functions_take_the_batch(vlm_tokenizer_dir, vlm_tokenizer) -> None:
    """Megatron-Bridge's own code (0.6.2, ``packed_seq_utils.py``, ``visual_inputs.py``) on the
    dict: ``GenericVisualInputs`` carries the media unchanged to the model, ``get_packed_seq_params`` rebuilds the same ``PackedSeqParams``; its Qwen2.5-VL model's
    mRoPE path (``unpack_mcore_thd_tensor_for_position_ids`` -> transformers' ``get_rope_index``
    per document -> ``repack_mcore_thd_position_ids``) gives our rows on every real token."""
    bridge = _bridge_module("packed_seq_utils")
    generic = _bridge_module("visual_inputs").GenericVisualInputs
    _, docs, batch = _build("qwen2_5_vl", vlm_tokenizer_dir, alignment=4)
    mb = megatron_batch(batch)
    out = bridge_vlm_batch(mb)
    media = bridge_vlm_batch(mb, generic)["visual_inputs"].normalized_for_model()
    assert media.keys() == out["visual_inputs"].keys()
    assert all(media[k] is v for k, v in out["visual_inputs"].items())  # passed through as is
    params = bridge.get_packed_seq_params(out)
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        assert torch.equal(getattr(params, name), getattr(mb.packed_seq_params, name)), name
    assert params.max_seqlen_q == mb.packed_seq_params.max_seqlen_q
    rows, mask, starts, lengths = bridge.unpack_mcore_thd_tensor_for_position_ids(
        out["tokens"], params
    )
    assert lengths == [d.length for d in docs]
    names = ("image", "video", "vision_start", "vision_end")
    tokens = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    ids = {n: vlm_tokenizer.convert_tokens_to_ids(t) for n, t in zip(names, tokens)}
    model = tiny_vlm("qwen2_5_vl", len(vlm_tokenizer), ids).model
    types = (rows == ids["image"]).int() + 2 * (rows == ids["video"]).int()
    visual = out["visual_inputs"]
    positions, _ = model.get_rope_index(
        rows,
        types,
        visual["image_grid_thw"],
        visual["video_grid_thw"],
        second_per_grid_ts=visual["second_per_grid_ts"],
        attention_mask=mask.long(),
    )
    theirs = bridge.repack_mcore_thd_position_ids(
        positions, padded_starts=starts, lengths=lengths, total_length=mb.tokens.shape[1]
    )
    real = torch.zeros(mb.tokens.shape[1], dtype=torch.bool)
    for start, n in zip(starts, lengths):
        real[start : start + n] = True
    assert torch.equal(theirs[:, 0, real], mb.position_ids[:, 0, real])


def _recipe_blocks() -> dict[str, str]:
    """docs/howto/trainers.md's Megatron blocks, by the function each defines."""
    import re

    page = Path(__file__).resolve().parents[2] / "docs" / "howto" / "trainers.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    names = ("def loss_func", "def vlm_forward_step", "def bridge_batches")
    return {name: next(b for b in blocks if name in b) for name in names}


@pytest.mark.parametrize("cp_size", [1, 2])
def test_docs_megatron_vlm_recipe_runs(vlm_tokenizer_dir, cp_size: int) -> None:
    """The trainers page's Megatron-LM VLM recipe (with its text recipe's ``loss_func``) runs
    on a real packed Qwen2.5-VL batch; only the CP calls and the device are swapped for CPU
    values. The model it calls gets this rank's micro-batch, and the loss it returns sums the
    rank's targets; the Bridge block yields ``bridge_vlm_batch`` of each batch."""
    blocks = _recipe_blocks()
    code = blocks["def loss_func"] + blocks["def vlm_forward_step"]
    swaps = {
        "parallel_state.get_context_parallel_world_size()": "CP_SIZE",
        "parallel_state.get_context_parallel_rank()": "CP_RANK",
        "torch.cuda.current_device()": '"cpu"',
    }
    for old, new in swaps.items():
        assert old in code, old
        code = code.replace(old, new)
    _, _, batch = _build("qwen2_5_vl", vlm_tokenizer_dir, alignment=2 * cp_size)
    seen: dict[str, Any] = {}

    def model(**kwargs: Any) -> torch.Tensor:
        """Per-token losses of ones: the loss function then counts the rank's targets."""
        seen.update(kwargs)
        return torch.ones(kwargs["input_ids"].shape)

    total = 0
    for rank in range(cp_size):
        scope: dict[str, Any] = {"CP_SIZE": cp_size, "CP_RANK": rank}
        exec(compile(code, "trainers.md", "exec"), scope)
        output, loss_fn = scope["vlm_forward_step"](iter([batch]), model)
        mb = megatron_batch(batch, cp_size=cp_size, cp_rank=rank)
        assert torch.equal(seen["input_ids"], mb.tokens)
        assert torch.equal(seen["position_ids"], mb.position_ids)
        assert seen["position_ids"].shape == (3, 1, batch.tokens.numel() // cp_size)
        assert torch.equal(seen["pixel_values_videos"], mb.pixel_values_videos)
        loss, count, _ = loss_fn(output)
        assert float(loss) == int(count) == mb.num_tokens
        total += mb.num_tokens
    assert total == batch.num_target_tokens
    scope = {}
    exec(compile(blocks["def bridge_batches"], "trainers.md", "exec"), scope)
    (out,) = scope["bridge_batches"]([batch], dict)
    assert out.keys() == bridge_vlm_batch(megatron_batch(batch)).keys()
    assert torch.equal(out["position_ids"], megatron_batch(batch).position_ids)


def _bridge_qwen3_vl_rope_index() -> Any:
    """Megatron-Bridge 0.6.2's Qwen3-VL ``get_rope_index`` (``models/qwen_vl/modelling_qwen3_vl/
    rope.py``) and the two functions it calls, compiled from that file's source: the module
    itself imports Bridge's package (its trainer), which needs Python 3.12."""
    import ast

    utils = _bridge_module("packed_seq_utils")  # skips without Bridge
    path = _bridge_root() / "models/qwen_vl/modelling_qwen3_vl/rope.py"
    wanted = {"_get_flat_packed_ranges", "_build_llm_rope_positions", "get_rope_index"}
    tree = ast.parse(path.read_text())
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    from typing import Optional

    from megatron.core.packed_seq_params import PackedSeqParams

    scope = {
        "torch": torch,
        "Optional": Optional,
        "PackedSeqParams": PackedSeqParams,
        "get_packed_seq_q_cu_seqlens": utils.get_packed_seq_q_cu_seqlens,
    }
    exec(compile(tree, str(path), "exec"), scope)
    return scope["get_rope_index"]


def test_bridges_qwen3_vl_rope_index_gives_our_rows(vlm_tokenizer_dir, vlm_tokenizer) -> None:
    """Bridge's Qwen3-VL model uses (3, 1, T) ``position_ids`` as given, else computes them
    with its THD ``get_rope_index`` (per document, by ``packed_seq_params``): on a real
    Qwen3-VL batch the two agree on every real token."""
    get_rope_index = _bridge_qwen3_vl_rope_index()
    docs, batch = _qwen3_batch(vlm_tokenizer_dir)
    mb = megatron_batch(batch)
    ids = [vlm_tokenizer.convert_tokens_to_ids(t) for t in VLM_TOKEN_NAMES]
    theirs, _ = get_rope_index(
        2,
        *ids,
        mb.tokens,
        image_grid_thw=mb.image_grid_thw,
        video_grid_thw=mb.video_grid_thw.clone(),
        packed_seq_params=mb.packed_seq_params,
    )
    real = torch.zeros(mb.tokens.shape[1], dtype=torch.bool)
    for start, doc in zip(mb.packed_seq_params.cu_seqlens_q_padded.tolist(), docs):
        real[start : start + doc.length] = True
    assert torch.equal(theirs[:, 0, real], mb.position_ids[:, 0, real])
