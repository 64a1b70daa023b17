# SPDX-License-Identifier: Apache-2.0
"""Time ``check_model`` on 7B-sized configs (no weights): cold and cached.

Run: ``python tests/benchmarks/check_model_speed.py``. Each config is checked once cold (first
call in this process for it; transformers and energon-pack already imported) and once more
(the cached verdict). Llama 7B and Mistral 7B are cells of the family matrix (answered from
``verified.json``); the others have an attention flag the matrix has not seen, so they are
answered by the experiment on a tiny copy (the point: a 7B config is never built at size).
"""

from __future__ import annotations

import os
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers  # noqa: E402

from energon_pack.attention import check_model  # noqa: E402

CASES = [
    ("Llama 7B (LlamaConfig())", lambda: transformers.LlamaConfig(), "sdpa"),
    ("Mistral 7B (MistralConfig())", lambda: transformers.MistralConfig(), "sdpa"),
    ("Llama 7B + attention_bias", lambda: transformers.LlamaConfig(attention_bias=True), "sdpa"),
    ("Llama 7B + attention_bias", lambda: transformers.LlamaConfig(attention_bias=True), "eager"),
    (
        "Mistral 7B + attention_bias",
        lambda: transformers.MistralConfig(attention_bias=True),
        "flash_attention_2",
    ),
]


def main() -> None:
    warnings.filterwarnings("ignore")
    print("| config | impl | verified by | cold (s) | cached (ms) |")
    print("|---|---|---|---|---|")
    for name, make, impl in CASES:
        config = make()
        start = time.perf_counter()
        report = check_model(config, impl, pack_size=8192)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        check_model(config, impl, pack_size=8192)
        cached = (time.perf_counter() - start) * 1e3
        print(f"| {name} | {impl} | {report.verified_by} | {cold:.3f} | {cached:.2f} |")


if __name__ == "__main__":
    main()
