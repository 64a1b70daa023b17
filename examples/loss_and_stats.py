# SPDX-License-Identifier: Apache-2.0
"""Log packing figures from each batch and train with the loss users expect, at 2 workers.

Runs in under a minute on a CPU, with no arguments, on tiny data it makes in a temp dir:

1. a 160-document ``TextSample`` dataset and a word-level tokenizer (``energon_pack_tools``);
2. ``LLMPackingTaskEncoder`` (pack size 64, over-long documents split) in a 2-worker loader;
3. every batch carries ``batch.counts``: what its worker packed since its previous batch (fill,
   documents, split / truncated / dropped / skipped samples). The loop logs them per step and
   sums them; the workers' ``encoder.stats`` never reach the main process, the counts do;
4. gradient accumulation over 4 micro-batches with transformers' ``num_items_in_batch`` = the
   step's target tokens (``sum(batch.num_target_tokens)``): the step's loss is the token-mean
   over all its documents, however the packs split them (docs/howto/loss.md). The per-document
   variant (each document weighs the same) uses ``batch.loss_weights("document")``;
5. after the epoch, the summed counts equal what a 0-worker run counts.

    python examples/loss_and_stats.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from energon_pack.encoding import load_tokenizer  # noqa: E402
from energon_pack.samples import PackingCounts  # noqa: E402
from energon_pack.task_encoders import LLMPackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader
from energon_pack_tools import make_text_dataset, make_tokenizer, synthetic_texts, tiny_causal_lm

PACK_SIZE, ACCUMULATION = 64, 4


def per_document_loss(model: torch.nn.Module, batch, documents: int) -> torch.Tensor:
    """This micro-batch's share of the mean over the step's ``documents`` of each document's
    token-mean loss (SFT recipes that weigh every example the same)."""
    logits = model(**batch.hf_kwargs("sdpa", config=model, with_labels=False)).logits
    ce = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1).float(), batch.labels.flatten(), reduction="none", ignore_index=-100
    )
    return (ce * batch.loss_weights("document").flatten()).sum() / documents


def train_epoch(loader, model, optimizer, per_document: bool = False) -> PackingCounts:
    """One epoch, ACCUMULATION micro-batches per step; returns the summed batch counts."""
    totals, micro = PackingCounts(), []
    for batch in loader:
        totals = totals + batch.counts
        c = batch.counts
        print(
            f"batch: fill {c.fill:.1%}, {c.pack_documents} documents in {c.packs} packs, "
            f"split {c.split_overlong}, truncated {c.truncated_overlong}, dropped {c.dropped}, skipped {c.skipped}"
        )
        micro.append(batch)
        if len(micro) == ACCUMULATION:
            step(model, optimizer, micro, per_document)
            micro = []
    if micro:
        step(model, optimizer, micro, per_document)
    return totals


def step(model, optimizer, micro: list, per_document: bool) -> None:
    """One optimizer step over the micro-batches (with data parallelism, also all-reduce the
    step's target tokens / documents over the ranks before dividing)."""
    if per_document:
        documents = sum(int((b.document_target_tokens() > 0).sum()) for b in micro)
        for b in micro:
            per_document_loss(model, b, documents).backward()
    else:
        num_items = sum(b.num_target_tokens for b in micro)
        for b in micro:
            model(**b.hf_kwargs("sdpa", config=model), num_items_in_batch=num_items).loss.backward()
        print(f"step: {len(micro)} micro-batches, {num_items} target tokens")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        texts = synthetic_texts(160, seed=0, min_words=2, max_words=90)
        tokenizer = make_tokenizer(Path(tmp) / "tokenizer", texts)
        dataset = make_text_dataset(Path(tmp) / "dataset", texts, samples_per_shard=50)
        model = tiny_causal_lm(len(load_tokenizer(tokenizer)), seed=0).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def encoder() -> LLMPackingTaskEncoder:
            return LLMPackingTaskEncoder(str(tokenizer), pack_size=PACK_SIZE, overlong="split")

        def loader(enc: LLMPackingTaskEncoder, workers: int):
            # one epoch (repeat=False); a training loader repeats: log the counts per step
            return make_loader(
                dataset, enc, num_workers=workers, packing_buffer_size=16, batch_size=2
            )

        workers_encoder = encoder()
        totals = train_epoch(loader(workers_encoder, 2), model, optimizer)
        print(f"main-process stats with 2 workers: {workers_encoder.stats.summary()}")
        print(f"summed from batches: {totals.as_dict()}")

        # The same epoch at 0 workers (trained with the per-document loss, for the example).
        reference = encoder()
        train_epoch(loader(reference, 0), model, optimizer, per_document=True)
        ref = reference.stats.counts()
        # Each worker packs its own share: pack counts may differ, per-sample counts may not.
        fields = ["samples", "documents", "split_overlong", "split_pieces", "truncated_overlong"]
        fields += ["dropped_empty", "dropped_overlong", "skipped", "pack_tokens", "pack_documents"]
        same = all(getattr(totals, f) == getattr(ref, f) for f in fields)
        print(f"totals from 2-worker batches equal the 0-worker run: {same}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
