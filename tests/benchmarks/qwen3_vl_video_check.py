# SPDX-License-Identifier: Apache-2.0
"""Check: Qwen3-VL video documents against transformers' own ``Qwen3VLProcessor`` call.

For a few clips (frame size, frame count, fps), the conversation encoder with
``video_timestamps=True`` is compared with ``Qwen3VLProcessor(text, videos, video_metadata,
do_sample_frames=False)`` on the same chat-rendered text: token ids, ``video_grid_thw`` and
``pixel_values_videos`` (max absolute difference). Two encoder set-ups: given the processor's
``Qwen3VLVideoProcessor``, and frames through the image processor (no video processor). The
video processor needs torchvision; without it the script says so and exits 1 (the test suite
checks the token expansion without torchvision, ``tests/task_encoders/test_video.py``). Run::

    python tests/benchmarks/qwen3_vl_video_check.py

Result (transformers 5.23, torchvision 0.28 CPU, patch 16, 1,024..65,536 pixels, image
processor mean/std 0.5): with the video processor every row is equal (pixels 0.0 apart);
through the image processor tokens and grids are equal and pixels within 6e-8 where neither
resize rule changes the size, and the 320x240 8-frame clip differs (image rule per frame
``(4, 12, 18)`` vs the video rule over all frames ``(4, 4, 6)``).
"""

from __future__ import annotations

import io
import sys
import tempfile
import warnings
from pathlib import Path

#: (width, height, frames, fps) of the clips checked.
CLIPS = [(32, 64, 3, 1.0), (64, 64, 4, 2.0), (96, 64, 5, 2.0), (320, 240, 8, 4.0)]
PIXELS = (32 * 32, 64 * 32 * 32)


def main() -> int:
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("torchvision is not installed: Qwen3VLVideoProcessor cannot run here.")
        return 1
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    from energon_pack.task_encoders import ConversationPackingTaskEncoder, ConversationSample
    from energon_pack_tools import make_tokenizer, random_png_bytes, synthetic_texts

    warnings.simplefilter("ignore")
    tok_dir = Path(tempfile.mkdtemp()) / "tok"
    make_tokenizer(tok_dir, [*synthetic_texts(100, seed=1), "< 0 1 2 3 4 5 6 7 8 9 . seconds >"])
    tok = AutoTokenizer.from_pretrained(tok_dir)
    tok.add_tokens(["<|video_pad|>", "<|vision_start|>", "<|vision_end|>"], special_tokens=True)
    tok.save_pretrained(tok_dir)
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=16, min_pixels=PIXELS[0], max_pixels=PIXELS[1], image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )  # fmt: skip
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16,
        size={"shortest_edge": PIXELS[0], "longest_edge": PIXELS[1]},
        do_sample_frames=False,
        cap_pixels_per_frame=False,
    )
    processor = Qwen3VLProcessor(image_processor, tok, video_processor)
    turns = [{"role": "user", "content": "<video> is it"}, {"role": "assistant", "content": "a"}]
    placeholder = "<|vision_start|><|video_pad|><|vision_end|>"
    text = tok.apply_chat_template(
        [{"role": "user", "content": f"{placeholder} is it"}, turns[1]], tokenize=False
    )
    print(f"{'clip':22s} {'encoder':14s} tokens grid   max |pixel diff|")
    for w, h, n, fps in CLIPS:
        frames = [random_png_bytes(w, h, seed=i) for i in range(n)]
        pil = [Image.open(io.BytesIO(f)).convert("RGB") for f in frames]
        meta = VideoMetadata(total_num_frames=n, fps=fps, frames_indices=list(range(n)))
        ref = processor(text=[text], videos=[pil], video_metadata=[meta], return_tensors="pt")
        sample = ConversationSample(
            __key__="k", __restore_key__=(), conversation=turns, videos=[frames], video_fps=[fps]
        )
        for name, extra in (("video proc.", {"video_processor": video_processor}), ("frames", {})):
            enc = ConversationPackingTaskEncoder(
                tok_dir, image_processor, pack_size=4096, video_timestamps=True, **extra
            )
            (doc,) = [enc.materialize(d) for d in enc.encode_sample(sample)]
            tokens = doc.tokens.tolist() == ref["input_ids"][0].tolist()
            grid = doc.video_grid_thw.tolist() == ref["video_grid_thw"].tolist()
            a, b = doc.pixel_values_videos, ref["pixel_values_videos"]
            diff = f"{float((a - b).abs().max()):.2g}" if a.shape == b.shape else "shapes differ"
            clip = f"{w}x{h} {n} frames @{fps:g}"
            print(f"{clip:22s} {name:14s} {tokens!s:6s} {grid!s:6s} {diff}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
