# SPDX-License-Identifier: Apache-2.0
"""energon task encoders that pack: :class:`PackingTaskEncoder` (a new task implements
``encode_document`` only) and ready encoders for text, SFT, captioning, VQA and conversations
with images and videos. See docs/howto/custom-task.md::

    encoder = LLMPackingTaskEncoder(tokenizer_dir, pack_size=4096, overlong="split")
    ds = get_train_dataset(path, task_encoder=encoder, packing_buffer_size=256, ...)
"""

from energon_pack.task_encoders._base import PackingConfig, PackingTaskEncoder
from energon_pack.task_encoders._captioning import CaptioningPackingTaskEncoder
from energon_pack.task_encoders._conversation import (
    ConversationPackingTaskEncoder,
    ConversationSample,
    cook_conversation,
    normalize_conversation,
)
from energon_pack.task_encoders._llm import LLMPackingTaskEncoder
from energon_pack.task_encoders._multimodal import MultimodalPackingTaskEncoder
from energon_pack.task_encoders._packing_groups import PackingPolicy
from energon_pack.task_encoders._sft import SFTPackingTaskEncoder
from energon_pack.task_encoders._vqa import VQAPackingTaskEncoder

__all__ = [
    "CaptioningPackingTaskEncoder",
    "ConversationPackingTaskEncoder",
    "ConversationSample",
    "LLMPackingTaskEncoder",
    "MultimodalPackingTaskEncoder",
    "PackingConfig",
    "PackingPolicy",
    "PackingTaskEncoder",
    "SFTPackingTaskEncoder",
    "VQAPackingTaskEncoder",
    "cook_conversation",
    "normalize_conversation",
]
