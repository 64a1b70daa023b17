# SPDX-License-Identifier: Apache-2.0
"""Tokenizers trained offline, saved as transformers tokenizer directories: a word-level one for
tests (:func:`make_tokenizer`: specials ``<pad> <unk> <s> </s> <|image_pad|> <|user|>
<|assistant|>`` and a minimal chat template) and a byte-level BPE for the demo
(:func:`train_bpe_tokenizer`: it never meets an unknown character).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "BPE_SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "IMAGE_TOKEN",
    "SPECIAL_TOKENS",
    "make_tokenizer",
    "train_bpe_tokenizer",
]

#: The image placeholder token (named like Qwen2-VL's).
IMAGE_TOKEN = "<|image_pad|>"

#: Special tokens in id order: pad=0, unk=1, bos=2, eos=3, image=4, user=5, assistant=6.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    IMAGE_TOKEN,
    "<|user|>",
    "<|assistant|>",
)

#: A minimal Jinja chat template: each message is ``<|role|> content`` and assistant turns end
#: in ``</s>``; ``add_generation_prompt`` appends ``<|assistant|>``.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|> ' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ ' </s>' }}{% endif %}{{ ' ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def make_tokenizer(path: Path | str, texts: Sequence[str], *, chat_template: bool = True) -> Path:
    """Train a word-level tokenizer on ``texts`` and save it (transformers format) to ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS), min_frequency=1)
    tok.train_from_iterator(list(texts), trainer=trainer)
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=[IMAGE_TOKEN, "<|user|>", "<|assistant|>"],
    )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return path


#: Special tokens in id order: pad=0, bos=1, eos=2.
BPE_SPECIAL_TOKENS: tuple[str, str, str] = ("<pad>", "<s>", "</s>")


def train_bpe_tokenizer(
    path: Path | str,
    texts: Iterable[str],
    *,
    vocab_size: int = 2048,
    min_frequency: int = 2,
) -> Path:
    """Train a byte-level BPE tokenizer on ``texts`` and save it (transformers format) to ``path``.

    Args:
        path: Output directory (created).
        texts: Training text, one document per item.
        vocab_size: Target vocabulary size including the 256 byte symbols and the specials;
            must be at least 260.
        min_frequency: Merge only pairs seen at least this often.

    Returns:
        ``path``, loadable with ``AutoTokenizer.from_pretrained(path, local_files_only=True)``.
    """
    if vocab_size < 256 + len(BPE_SPECIAL_TOKENS) + 1:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for a byte-level BPE: use at least 260 "
            "(256 byte symbols + 3 special tokens + 1 merge)."
        )
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(BPE_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    pad, bos, eos = BPE_SPECIAL_TOKENS
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=pad, bos_token=bos, eos_token=eos
    )
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return path
