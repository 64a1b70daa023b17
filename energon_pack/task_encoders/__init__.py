# SPDX-License-Identifier: Apache-2.0
"""Energon task encoders that pack: a generic base and ready encoders for text, captioning, SFT.

Drop one into energon and set a packing buffer::

    encoder = LLMPackingTaskEncoder(tokenizer_dir, pack_size=4096, overlong="split")
    ds = get_train_dataset(path, task_encoder=encoder, packing_buffer_size=256,
                           batch_size=8, shuffle_buffer_size=100, max_samples_per_sequence=100,
                           worker_config=worker_config)
    for batch in get_savable_loader(ds):
        loss = model(**batch.hf_kwargs("sdpa")).loss

A new task subclasses :class:`PackingTaskEncoder` and implements ``encode_document`` only.
Randomness inside it is seeded per sample (:func:`seeded_stateless`), so ``restore_sample`` and
resumed loaders reproduce augmentations; ``encoder.stats`` counts fill and over-long events per
process.
"""

from energon_pack.algorithms import OverlongPolicy
from energon_pack.task_encoders.base import PackingConfig, PackingTaskEncoder
from energon_pack.task_encoders.buffer_size import SmallPackingBufferWarning
from energon_pack.task_encoders.captioning import CaptioningPackingTaskEncoder, to_pil_image
from energon_pack.task_encoders.llm import LLMPackingTaskEncoder, cook_text
from energon_pack.task_encoders.overlong import (
    OverlongSampleError,
    apply_overlong_policy,
    slice_document,
)
from energon_pack.task_encoders.sft import (
    PromptResponseSample,
    SFTPackingTaskEncoder,
    cook_prompt_response,
)
from energon_pack.task_encoders.stateless import SeedSource, current_seed_args, seeded_stateless
from energon_pack.task_encoders.stats import PackingStats
from energon_pack.task_encoders.tokenization import DocumentTokenizer, load_tokenizer

__all__ = [
    "CaptioningPackingTaskEncoder",
    "DocumentTokenizer",
    "LLMPackingTaskEncoder",
    "OverlongPolicy",
    "OverlongSampleError",
    "PackingConfig",
    "PackingStats",
    "PackingTaskEncoder",
    "PromptResponseSample",
    "SFTPackingTaskEncoder",
    "SeedSource",
    "SmallPackingBufferWarning",
    "apply_overlong_policy",
    "cook_prompt_response",
    "cook_text",
    "current_seed_args",
    "load_tokenizer",
    "seeded_stateless",
    "slice_document",
    "to_pil_image",
]
