# SPDX-License-Identifier: Apache-2.0
"""What the command line runs: dataset writing, ``analyze``, the demo, a loader helper and a
tiny model builder. Needs the training stack (torch, energon, transformers).

``PackedTrainer`` (transformers' ``Trainer`` on an energon loader) is imported on first access:
``Trainer`` needs accelerate, which the rest of the package does not.
"""

from typing import Any

from energon_pack.tools._analysis import (
    BUFFER_CANDIDATES,
    analyze_dataset,
    recommend_buffer_size,
)
from energon_pack.tools._analysis_result import AnalysisResult
from energon_pack.tools._corpus import stdlib_documents, write_corpus
from energon_pack.tools._datasets import (
    check_dataset,
    make_captioning_dataset,
    make_jsonl_dataset,
    make_text_dataset,
    prepare_dataset,
    sample_key,
)
from energon_pack.tools._demo import (
    DemoConfig,
    DemoReport,
    compare_continuation,
    naive_padding_fill,
    run_demo,
)
from energon_pack.tools._loader import (
    make_loader,
    pin_memory_for_device,
)
from energon_pack.tools._models import (
    tiny_causal_lm,
)
from energon_pack.tools._plots import (
    buffer_fill_curves,
    plot_analysis,
)
from energon_pack.tools._tokenizer_training import (
    BPE_SPECIAL_TOKENS,
    train_bpe_tokenizer,
)
from energon_pack.tools._vlm_datasets import (
    ConversationCounts,
    iter_llava_records,
    make_conversation_dataset,
    make_vqa_dataset,
    read_llava_records,
)

__all__ = [
    "AnalysisResult",
    "analyze_dataset",
    "BPE_SPECIAL_TOKENS",
    "BUFFER_CANDIDATES",
    "buffer_fill_curves",
    "check_dataset",
    "compare_continuation",
    "ConversationCounts",
    "DemoConfig",
    "DemoReport",
    "iter_llava_records",
    "make_captioning_dataset",
    "make_conversation_dataset",
    "make_jsonl_dataset",
    "make_loader",
    "make_text_dataset",
    "make_vqa_dataset",
    "naive_padding_fill",
    "PackedTrainer",
    "pin_memory_for_device",
    "plot_analysis",
    "prepare_dataset",
    "read_llava_records",
    "recommend_buffer_size",
    "run_demo",
    "sample_key",
    "stdlib_documents",
    "write_corpus",
    "tiny_causal_lm",
    "train_bpe_tokenizer",
]


def __getattr__(name: str) -> Any:
    if name == "PackedTrainer":
        from energon_pack.tools._hf_trainer import PackedTrainer

        return PackedTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
