# SPDX-License-Identifier: Apache-2.0
"""energon task encoders that pack: a generic base and ready encoders for text, captioning, SFT,
VQA and conversations with images and videos.

Drop one into energon and set a packing buffer::

    encoder = LLMPackingTaskEncoder(tokenizer_dir, pack_size=4096, overlong="split")
    ds = get_train_dataset(path, task_encoder=encoder, packing_buffer_size=256,
                           batch_size=8, shuffle_buffer_size=100, max_samples_per_sequence=100,
                           worker_config=worker_config)
    for batch in get_savable_loader(ds):
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss

A new task subclasses :class:`PackingTaskEncoder` and implements ``encode_document`` only.
Randomness inside it is seeded per sample (:func:`seeded_stateless`), so ``restore_sample`` and
resumed loaders reproduce augmentations; ``encoder.stats`` counts fill and over-long events per
process.
"""

from energon_pack.task_encoders._base import PackingConfig, PackingTaskEncoder
from energon_pack.task_encoders._captioning import CaptioningPackingTaskEncoder
from energon_pack.task_encoders._conversation import (
    ConversationPackingTaskEncoder,
    ConversationSample,
    cook_conversation,
    interleaved_conversation,
    normalize_conversation,
)
from energon_pack.task_encoders._llm import LLMPackingTaskEncoder, cook_text
from energon_pack.task_encoders._multimodal import (
    TEXT_ROLE,
    Message,
    MultimodalPackingTaskEncoder,
)
from energon_pack.task_encoders._sft import (
    PromptResponseSample,
    SFTPackingTaskEncoder,
    cook_prompt_response,
)
from energon_pack.task_encoders._vqa import VQAPackingTaskEncoder, vqa_conversations, vqa_media

__all__ = [
    "CaptioningPackingTaskEncoder",
    "ConversationPackingTaskEncoder",
    "ConversationSample",
    "LLMPackingTaskEncoder",
    "Message",
    "MultimodalPackingTaskEncoder",
    "PackingConfig",
    "PackingTaskEncoder",
    "PromptResponseSample",
    "SFTPackingTaskEncoder",
    "TEXT_ROLE",
    "VQAPackingTaskEncoder",
    "cook_conversation",
    "cook_prompt_response",
    "cook_text",
    "interleaved_conversation",
    "normalize_conversation",
    "vqa_conversations",
    "vqa_media",
]
