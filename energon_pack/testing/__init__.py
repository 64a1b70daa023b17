# SPDX-License-Identifier: Apache-2.0
"""Test helpers shipped for users: tiny real datasets, tokenizers, image processors and models,
and the contract checks (each sample once, resume identical, ``restore_sample``) to run against
your own encoder. Depends on the product, never the reverse.
"""

from energon_pack.testing._contracts import (
    assert_each_sample_once,
    assert_restore_sample_reproduces,
    assert_resume_identical,
    assert_same_item,
    member_keys,
)
from energon_pack.testing._datasets import WORDS, synthetic_texts
from energon_pack.testing._distributed import (
    RESULTS_DIR_ENV,
    TorchrunError,
    free_port,
    init_torchrun_process_group,
    item_digest,
    item_record,
    read_rank_results,
    run_torchrun,
    write_rank_result,
)
from energon_pack.testing._documents import make_document
from energon_pack.testing._encoders import (
    LengthTextEncoder,
)
from energon_pack.testing._images import (
    corrupt_png_bytes,
    make_image_processor,
    random_png_bytes,
)
from energon_pack.testing._models import document_logits, document_loss
from energon_pack.testing._tokenizers import (
    CHAT_TEMPLATE,
    IMAGE_TOKEN,
    SPECIAL_TOKENS,
    make_tokenizer,
)
from energon_pack.tools import (
    make_captioning_dataset,
    make_jsonl_dataset,
    make_loader,
    make_text_dataset,
    prepare_dataset,
    sample_key,
    tiny_causal_lm,
)

__all__ = [
    "assert_each_sample_once",
    "assert_restore_sample_reproduces",
    "assert_resume_identical",
    "assert_same_item",
    "CHAT_TEMPLATE",
    "corrupt_png_bytes",
    "document_logits",
    "document_loss",
    "free_port",
    "IMAGE_TOKEN",
    "init_torchrun_process_group",
    "item_digest",
    "item_record",
    "LengthTextEncoder",
    "make_captioning_dataset",
    "make_document",
    "make_image_processor",
    "make_jsonl_dataset",
    "make_loader",
    "make_text_dataset",
    "make_tokenizer",
    "member_keys",
    "prepare_dataset",
    "random_png_bytes",
    "read_rank_results",
    "RESULTS_DIR_ENV",
    "run_torchrun",
    "sample_key",
    "SPECIAL_TOKENS",
    "synthetic_texts",
    "tiny_causal_lm",
    "TorchrunError",
    "WORDS",
    "write_rank_result",
]
