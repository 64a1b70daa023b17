# SPDX-License-Identifier: Apache-2.0
"""Packed LLM training with a transformers model, then an exact resume.

Runs in a few seconds on a CPU, with no arguments, on tiny data it makes in a temp dir:

1. a 200-document ``TextSample`` dataset and a word-level tokenizer (``energon_pack_tools``);
2. ``LLMPackingTaskEncoder`` (pack size 64, carry-over on, over-long documents split);
3. a tiny Llama trained on ``batch.hf_kwargs("sdpa", config=model)``: block-causal mask, positions reset per
   document, labels that never cross a document border;
4. at step 4, save model + optimizer + loader state (``loader.save_state_rank()``); train to
   step 8; then rebuild everything from the checkpoint and re-run steps 4..8: the losses match.

Replace the helpers with your dataset path, your tokenizer directory and your model.

    python examples/train_llm.py
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from energon_pack.algorithms import CarryOver  # noqa: E402
from energon_pack.encoding import load_tokenizer  # noqa: E402
from energon_pack.task_encoders import LLMPackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader
from energon_pack_tools import make_text_dataset, make_tokenizer, synthetic_texts, tiny_causal_lm

PACK_SIZE = 64
STEPS, SAVE_AT = 8, 4


def build(dataset: Path, tokenizer: Path, vocab_size: int):
    """A fresh encoder, loader, model and optimizer (the same every time: seeded)."""
    encoder = LLMPackingTaskEncoder(
        str(tokenizer), pack_size=PACK_SIZE, overlong="split", carry_over=CarryOver()
    )
    # make_loader = get_train_dataset(...) + get_savable_loader(...), num_workers=0.
    loader = make_loader(
        dataset, encoder, packing_buffer_size=16, batch_size=4, repeat=True, shuffle_buffer_size=16
    )
    model = tiny_causal_lm(vocab_size, seed=0, max_position_embeddings=PACK_SIZE).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return encoder, loader, model, optimizer


def train_step(model, optimizer, batch) -> float:
    loss = model(**batch.hf_kwargs("sdpa", config=model)).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        texts = synthetic_texts(200, seed=0, min_words=2, max_words=80)
        tokenizer = make_tokenizer(Path(tmp) / "tokenizer", texts)
        dataset = make_text_dataset(Path(tmp) / "dataset", texts, samples_per_shard=50)
        vocab_size = len(load_tokenizer(tokenizer))

        encoder, loader, model, optimizer = build(dataset, tokenizer, vocab_size)
        losses, checkpoint = [], None
        for step, batch in zip(range(STEPS), loader):
            losses.append(train_step(model, optimizer, batch))
            print(
                f"step {step}: batch {tuple(batch.tokens.shape)}, "
                f"{len(batch.cu_seqlens) - 1} documents, loss {losses[-1]:.4f}"
            )
            if step == SAVE_AT - 1:  # after SAVE_AT batches were consumed and trained on
                checkpoint = {
                    "loader": loader.save_state_rank(),
                    "model": copy.deepcopy(model.state_dict()),
                    "optimizer": copy.deepcopy(optimizer.state_dict()),
                }
        print(f"packing: {encoder.stats.summary()}")

        # Resume: a fresh loader/model/optimizer restored from the checkpoint.
        _, loader2, model2, optimizer2 = build(dataset, tokenizer, vocab_size)
        loader2.restore_state_rank(checkpoint["loader"])
        model2.load_state_dict(checkpoint["model"])
        optimizer2.load_state_dict(checkpoint["optimizer"])
        resumed = [
            train_step(model2, optimizer2, b) for _, b in zip(range(STEPS - SAVE_AT), loader2)
        ]
        same = resumed == losses[SAVE_AT:]
        print("resumed losses " + ", ".join(f"{x:.4f}" for x in resumed))
        print(f"resume: {'losses identical' if same else 'MISMATCH'} after step {SAVE_AT}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
