# SPDX-License-Identifier: Apache-2.0
"""Train a small byte-level BPE tokenizer offline and save it as a transformers tokenizer.

A word-level vocabulary explodes on real text (every identifier in Python's sources is a new
word); byte-level BPE never meets an unknown character and stays small. Training starts from
the 256 byte symbols and merges the most frequent adjacent pair until ``vocab_size`` is reached::

    "def def define"  ->  bytes  d e f Ġ d e f Ġ d e f i n e      (Ġ marks a leading space)
    merge 1: (d, e) -> de     merge 2: (de, f) -> def    merge 3: (Ġ, def) -> Ġdef  ...
    tokenize("def define") == ["def", "Ġdef", "ine"]   (with a few more merges)

``train_bpe_tokenizer(dir, texts, vocab_size=2048)`` trains with the ``tokenizers`` library in
about a second on a few MB of text, adds ``<pad>``, ``<s>`` (BOS), ``</s>`` (EOS) as special
tokens (ids 0, 1, 2), wraps it in ``PreTrainedTokenizerFast`` and calls ``save_pretrained``: the
directory loads with ``AutoTokenizer.from_pretrained(dir, local_files_only=True)`` and can be
passed to any energon-pack task encoder as ``tokenizer``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["BPE_SPECIAL_TOKENS", "train_bpe_tokenizer"]

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
