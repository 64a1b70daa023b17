# SPDX-License-Identifier: Apache-2.0
"""energon's own VLM sample types through the conversation and VQA encoders, on real energon
datasets: ``InterleavedSample`` (texts and images: one text document, loss on the text) and
``VidQASample`` (a video, a question, answers: loss on the answer), built by energon's
``sample_loader`` from tar members; a ``VidQASample`` from an encoded video file where PyAV is
installed."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from megatron.energon import InterleavedSample, VidQASample
from vlm_helpers import png

from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.task_encoders._conversation import interleaved_conversation
from energon_pack.testing import assert_each_sample_once
from energon_pack.training import make_loader
from energon_pack_tools import IMAGE_TOKEN, prepare_dataset, sample_key
from energon_pack_tools._datasets import _write_shards

#: Texts the test tokenizer knows word by word.
WORDS = ["a seed", "the token", "is it a batch", "the seed", "a token is it"]

#: energon's ``sample_loader`` for the interleaved dataset: ``json`` lists texts and image names.
INTERLEAVED_LOADER = """
import json

def sample_loader(raw):
    record = json.loads(raw["json"])
    return {"sequence": [raw[i["image"]] if isinstance(i, dict) else i for i in record["sequence"]]}

def part_filter(part):
    return True
"""

#: energon's ``sample_loader`` for the VidQA dataset: the video is the frame files f0000.png...
VIDQA_LOADER = """
import json

def sample_loader(raw):
    record = json.loads(raw["json"])
    frames = [raw[f"f{i:04d}.png"] for i in range(record["frames"])]
    return {"video": frames, "context": record["context"], "answers": record["answers"]}

def part_filter(part):
    return True
"""


def loader_dataset(path: Path, samples: list[dict[str, bytes]], sample_type: str, loader: str):
    """A webdataset of energon's ``sample_type`` whose fields energon's
    ``sample_loader`` (in ``.nv-meta/sample_loader.py``) builds from the tar members."""
    _write_shards(path, samples, samples_per_shard=5)  # sample i: {sample_key(i)}.{ext}
    args = ("--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset")
    prepare_dataset(path, *args)
    meta = path / ".nv-meta"
    (meta / "sample_loader.py").write_text(loader)
    (meta / "dataset.yaml").write_text(
        f"sample_type:\n  __module__: megatron.energon\n  __class__: {sample_type}\n"
        "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n"
    )
    return path


@pytest.fixture(scope="module")
def interleaved_dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """12 interleaved documents: text only, image first, images between texts."""
    shapes = [["t"], ["i", "t"], ["t", "i", "t", "i"], ["t", "t", "i"]]
    samples, sequences = [], {}
    for n in range(12):
        record, members, seq = [], {}, []
        for j, kind in enumerate(shapes[n % 4]):
            if kind == "t":
                text = WORDS[(n + j) % len(WORDS)]
                record.append(text)
                seq.append(text)
            else:
                name = f"img{j}.png"
                members[name] = png(28 * (1 + j % 2), 56, seed=10 * n + j)
                record.append({"image": name})
                seq.append(None)
        samples.append({"json": json.dumps({"sequence": record}).encode(), **members})
        sequences[sample_key(n)] = seq
    path = tmp_path_factory.mktemp("interleaved") / "ds"
    return loader_dataset(path, samples, "InterleavedSample", INTERLEAVED_LOADER), sequences


@pytest.fixture(scope="module")
def vidqa_dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """8 video questions of 2..5 frames of 28x56 PNGs, one answer each."""
    samples, answers = [], {}
    for n in range(8):
        frames = 2 + n % 4
        record = {"frames": frames, "context": "is it a seed", "answers": [WORDS[n % 5]]}
        members = {f"f{i:04d}.png": png(28, 56, seed=100 * n + i) for i in range(frames)}
        samples.append({"json": json.dumps(record).encode(), **members})
        answers[sample_key(n)] = (frames, record["answers"][0])
    path = tmp_path_factory.mktemp("vidqa") / "ds"
    return loader_dataset(path, samples, "VidQASample", VIDQA_LOADER), answers


def test_interleaved_worked_example(vlm_tokenizer_dir, vlm_tokenizer, image_processor) -> None:
    """<s> a cat <vs> <img>*4 <ve> on a mat </s>: the loss on the text (and </s>) only, with or
    without a chat template (an interleaved document is text, not a chat)."""
    sample = InterleavedSample(
        __key__="il", __restore_key__=(), sequence=["a seed", png(64, 48, seed=1), "the token"]
    )
    messages, images = interleaved_conversation(sample)
    assert messages == [{"role": "text", "content": "a seed\n<image>\nthe token"}] and images
    for template in (True, False):
        enc = ConversationPackingTaskEncoder(
            vlm_tokenizer_dir, image_processor, pack_size=64, use_chat_template=template
        )
        (doc,) = enc.encode_sample(sample)
        words = vlm_tokenizer.convert_ids_to_tokens(doc.tokens.tolist())
        assert words == [
            "<s>", "a", "seed", "<|vision_start|>", *[IMAGE_TOKEN] * 4, "<|vision_end|>",
            "the", "token", "</s>",
        ]  # fmt: skip
        assert doc.loss_mask.tolist() == [False, True, True] + [False] * 6 + [True] * 3
        assert doc.image_spans.tolist() == [[4, 8]] and doc.video_grid_thw.shape == (0, 3)
    bad = InterleavedSample(__key__="b", __restore_key__=(), sequence=["an <image> tag"])
    with pytest.raises(ValueError, match="'b'.*contains"):
        list(enc.encode_sample(bad))


def test_interleaved_dataset_epoch(
    interleaved_dataset, vlm_tokenizer_dir, vlm_tokenizer, image_processor
):
    path, sequences = interleaved_dataset
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir, image_processor, pack_size=64, mrope=True
    )
    packs = list(make_loader(path, enc, packing_buffer_size=6))
    assert_each_sample_once(packs, list(sequences))
    image = vlm_tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    wrap = vlm_tokenizer.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>"])
    images = 0
    for pack in packs:
        per_image = (pack.image_grid_thw.prod(dim=1) // 4).tolist()
        assert [e - s for s, e in pack.image_spans.tolist()] == per_image
        assert int((pack.tokens == image).sum()) == sum(per_image) == pack.num_media_tokens
        targets = pack.labels[pack.labels != -100]
        assert not torch.isin(targets, torch.tensor([image, *wrap])).any()
        images += len(per_image)
        # every text word of each document is a target: the texts decode back from the labels
        starts = [0, *torch.tensor(pack.doc_lengths).cumsum(0).tolist()]
        for key, start, end in zip(pack.sample_keys, starts, starts[1:]):
            labels = pack.labels[start:end]
            texts = [t for t in sequences[key] if t is not None]
            assert vlm_tokenizer.decode(labels[labels != -100][:-1]) == " ".join(texts)
    assert images == sum(t is None for seq in sequences.values() for t in seq)


@pytest.mark.parametrize("timestamps", [False, True])
def test_vidqa_dataset_epoch(
    vidqa_dataset, vlm_tokenizer_dir, vlm_tokenizer, image_processor, timestamps: bool
) -> None:
    """Every VidQA sample once, loss on its answer only, one video per document with the grid
    of its frames (Qwen3-VL's timestamped layout too), through both encoders."""
    path, answers = vidqa_dataset
    video = vlm_tokenizer.convert_tokens_to_ids("<|video_pad|>")
    for cls in (ConversationPackingTaskEncoder, VQAPackingTaskEncoder):
        enc = cls(
            vlm_tokenizer_dir,
            image_processor,
            pack_size=96,
            mrope=True,
            video_timestamps=timestamps,
        )
        packs = list(make_loader(path, enc, packing_buffer_size=8))
        assert_each_sample_once(packs, list(answers))
        for pack in packs:
            frames = [answers[k][0] for k in pack.sample_keys]
            assert pack.video_grid_thw.tolist() == [[(f + 1) // 2, 4, 2] for f in frames]
            assert int((pack.tokens == video).sum()) == pack.num_media_tokens
            assert pack.num_media_tokens == sum(2 * ((f + 1) // 2) for f in frames)
            starts = [0, *torch.tensor(pack.doc_lengths).cumsum(0).tolist()]
            for key, start, end in zip(pack.sample_keys, starts, starts[1:]):
                labels = pack.labels[start:end]
                assert vlm_tokenizer.decode(labels[labels != -100][:-1]) == answers[key][1]


def encoded_video(frames: list[bytes], fps: int) -> bytes:
    """A lossless (PNG codec) Matroska-free .mov of the PNG frames, written with PyAV."""
    import av
    import numpy as np
    from PIL import Image

    arrays = [np.asarray(Image.open(io.BytesIO(f)).convert("RGB")) for f in frames]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mov") as container:
        stream = container.add_stream("png", rate=fps)
        stream.height, stream.width = arrays[0].shape[:2]
        stream.pix_fmt = "rgb24"
        for a in arrays:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(a, format="rgb24")))
        container.mux(stream.encode())
    return buf.getvalue()


def test_vidqa_from_an_encoded_video_file(tmp_path, vlm_tokenizer_dir, image_processor) -> None:
    """A standard ``VidQASample`` dataset (``energon prepare`` field map, a .mov member):
    energon decodes the file (PyAV); the document equals the one from the same frames given as
    a list at the file's fps."""
    pytest.importorskip("av", reason="energon decodes video files with PyAV (av_decode extra)")
    frames = [png(28, 56, seed=i) for i in range(3)]
    sample = {"mov": encoded_video(frames, fps=4), "txt": b"is it", "json": b'["a seed"]'}
    path = tmp_path / "vidqa_file"
    _write_shards(path, [sample], samples_per_shard=5)
    fields = json.dumps({"video": "mov", "context": "txt", "answers": "json"})
    prepare_dataset(path, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type",
                    "VidQASample", "--field-map", fields)  # fmt: skip
    enc = VQAPackingTaskEncoder(vlm_tokenizer_dir, image_processor, pack_size=64, mrope=True)
    (pack,) = list(make_loader(path, enc, packing_buffer_size=2))
    ref = VidQASample(
        __key__="r", __restore_key__=(), video=frames, context="is it", answers=["a seed"]
    )
    enc_ref = VQAPackingTaskEncoder(
        vlm_tokenizer_dir, image_processor, pack_size=64, default_fps=4.0
    )
    (doc,) = [enc_ref.materialize(d) for d in enc_ref.encode_sample(ref)]
    assert torch.equal(pack.tokens[: doc.length], doc.tokens)
    torch.testing.assert_close(pack.pixel_values_videos, doc.pixel_values_videos, rtol=0, atol=0)
    assert pack.video_second_per_grid.tolist() == [0.5]  # 2 frames per patch at 4 fps
