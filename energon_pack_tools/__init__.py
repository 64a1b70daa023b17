# SPDX-License-Identifier: Apache-2.0
"""energon-pack's tooling, installed with it and never imported by it: the ``energon-pack``
command (:mod:`energon_pack_tools.cli`), dataset writers, ``analyze`` and its plot, the demo,
and the toy tokenizers, images, models and encoders the tests and examples build on.

Names are imported on first access, so the command starts without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from energon_pack_tools._analysis import analyze_dataset
    from energon_pack_tools._analysis_result import AnalysisResult
    from energon_pack_tools._blend_analysis import BlendAnalysis, analyze_blend
    from energon_pack_tools._blends import (
        BlendShares,
        make_blend_metadataset,
        make_short_long_blend,
        trained_shares,
    )
    from energon_pack_tools._dataset_check import ShardCheck, check_shards
    from energon_pack_tools._datasets import (
        make_captioning_dataset,
        make_jsonl_dataset,
        make_text_dataset,
        prepare_dataset,
        sample_key,
    )
    from energon_pack_tools._encoders import LengthTextEncoder, make_document
    from energon_pack_tools._images import (
        corrupt_png_bytes,
        make_image_processor,
        random_png_bytes,
    )
    from energon_pack_tools._models import document_logits, document_loss, tiny_causal_lm
    from energon_pack_tools._plots import plot_analysis
    from energon_pack_tools._texts import WORDS, synthetic_texts
    from energon_pack_tools._tokenizers import IMAGE_TOKEN, make_tokenizer, train_bpe_tokenizer
    from energon_pack_tools._vlm_datasets import (
        make_conversation_dataset,
        make_vqa_dataset,
        read_llava_records,
    )

#: name -> the private module that defines it (imported on first access).
_LAZY: dict[str, str] = {
    "analyze_dataset": "energon_pack_tools._analysis",
    "AnalysisResult": "energon_pack_tools._analysis_result",
    "check_shards": "energon_pack_tools._dataset_check",
    "ShardCheck": "energon_pack_tools._dataset_check",
    "make_captioning_dataset": "energon_pack_tools._datasets",
    "make_jsonl_dataset": "energon_pack_tools._datasets",
    "make_text_dataset": "energon_pack_tools._datasets",
    "BlendAnalysis": "energon_pack_tools._blend_analysis",
    "analyze_blend": "energon_pack_tools._blend_analysis",
    "BlendShares": "energon_pack_tools._blends",
    "make_blend_metadataset": "energon_pack_tools._blends",
    "make_short_long_blend": "energon_pack_tools._blends",
    "trained_shares": "energon_pack_tools._blends",
    "prepare_dataset": "energon_pack_tools._datasets",
    "sample_key": "energon_pack_tools._datasets",
    "LengthTextEncoder": "energon_pack_tools._encoders",
    "make_document": "energon_pack_tools._encoders",
    "corrupt_png_bytes": "energon_pack_tools._images",
    "make_image_processor": "energon_pack_tools._images",
    "random_png_bytes": "energon_pack_tools._images",
    "document_logits": "energon_pack_tools._models",
    "document_loss": "energon_pack_tools._models",
    "tiny_causal_lm": "energon_pack_tools._models",
    "plot_analysis": "energon_pack_tools._plots",
    "WORDS": "energon_pack_tools._texts",
    "synthetic_texts": "energon_pack_tools._texts",
    "IMAGE_TOKEN": "energon_pack_tools._tokenizers",
    "make_tokenizer": "energon_pack_tools._tokenizers",
    "train_bpe_tokenizer": "energon_pack_tools._tokenizers",
    "make_conversation_dataset": "energon_pack_tools._vlm_datasets",
    "make_vqa_dataset": "energon_pack_tools._vlm_datasets",
    "read_llava_records": "energon_pack_tools._vlm_datasets",
}

__all__ = [
    "AnalysisResult",
    "analyze_blend",
    "analyze_dataset",
    "BlendAnalysis",
    "BlendShares",
    "check_shards",
    "corrupt_png_bytes",
    "document_logits",
    "document_loss",
    "IMAGE_TOKEN",
    "LengthTextEncoder",
    "make_blend_metadataset",
    "make_captioning_dataset",
    "make_conversation_dataset",
    "make_document",
    "make_image_processor",
    "make_jsonl_dataset",
    "make_text_dataset",
    "make_short_long_blend",
    "make_tokenizer",
    "make_vqa_dataset",
    "plot_analysis",
    "prepare_dataset",
    "random_png_bytes",
    "read_llava_records",
    "sample_key",
    "ShardCheck",
    "synthetic_texts",
    "tiny_causal_lm",
    "train_bpe_tokenizer",
    "trained_shares",
    "WORDS",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
