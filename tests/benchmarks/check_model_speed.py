# SPDX-License-Identifier: Apache-2.0
"""Time ``check_model`` on 7B/8B-shaped configs (no weights): cold, from disk, from memory.

Run: ``python tests/benchmarks/check_model_speed.py``. Each config is checked three times:
cold (an empty verdict cache; transformers and energon-pack already imported), after the
in-memory verdicts are dropped (what a new process finds: the per-version disk cache), and
again (memory). Configs the family matrix proved on the installed versions are answered from
``verified.json``; the rest by the experiment on a small copy, which a 7B config never leaves.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["ENERGON_PACK_CACHE"] = tempfile.mkdtemp(prefix="energon-pack-bench-")

import transformers  # noqa: E402

from energon_pack.attention import _verify, check_model  # noqa: E402

_MROPE = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}
_QWEN2_VL_7B = dict(
    vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
    num_attention_heads=28, num_key_value_heads=4, rope_parameters=_MROPE,
)  # fmt: skip
CASES = [
    ("Llama 7B (LlamaConfig())", lambda: transformers.LlamaConfig(), "sdpa"),
    ("Mistral 7B (MistralConfig())", lambda: transformers.MistralConfig(), "sdpa"),
    ("Llama 7B + attention_bias", lambda: transformers.LlamaConfig(attention_bias=True), "sdpa"),
    (
        "Mistral 7B + attention_bias",
        lambda: transformers.MistralConfig(attention_bias=True),
        "flash_attention_2",
    ),
    (
        "Qwen2-VL 7B",
        lambda: transformers.Qwen2VLConfig(text_config=_QWEN2_VL_7B),
        "sdpa",
    ),
    (
        "Qwen2.5-VL 7B",
        lambda: transformers.Qwen2_5_VLConfig(text_config=_QWEN2_VL_7B),
        "flash_attention_2",
    ),
    ("Qwen3-VL 8B (Qwen3VLConfig())", lambda: transformers.Qwen3VLConfig(), "sdpa"),
    ("GLM-4V (Glm4vConfig())", lambda: transformers.Glm4vConfig(), "sdpa"),
]


def main() -> None:
    warnings.filterwarnings("ignore")
    print("| config | impl | verified by | cold (s) | new process: disk (ms) | memory (ms) |")
    print("|---|---|---|---|---|---|")
    for name, make, impl in CASES:
        config = make()
        start = time.perf_counter()
        report = check_model(config, impl, pack_size=8192)
        cold = time.perf_counter() - start
        _verify._VERDICTS.clear()
        start = time.perf_counter()
        check_model(config, impl, pack_size=8192)
        disk = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        check_model(config, impl, pack_size=8192)
        memory = (time.perf_counter() - start) * 1e3
        print(
            f"| {name} | {impl} | {report.verified_by} | {cold:.2f} | {disk:.1f} | {memory:.2f} |"
        )


if __name__ == "__main__":
    main()
