# SPDX-License-Identifier: Apache-2.0
"""The loss users expect: packed training with gradient accumulation equals one big step.

A packed micro-batch holds a varying number of target tokens, so the mean per micro-batch,
averaged over accumulation steps, weights tokens unequally. Dividing each micro-batch's *sum*
by the target tokens of the whole step (``sum(batch.num_target_tokens)``, transformers'
``num_items_in_batch``) gives the token-mean of one step over all documents; per-document
weights (``batch.loss_weights("document")``) give the mean of each document's token-mean.
"""

from __future__ import annotations

import torch
from model_families import FAMILIES, build_model, packed_batch


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_four_accumulation_steps_equal_one_step_over_all_documents() -> None:
    family = next(f for f in FAMILIES if f.name.startswith("mistral"))
    model = build_model(family, "sdpa").train()
    micro = [packed_batch([[20, 12], [7, 3]], 34, seed=s) for s in range(2)]
    micro += [packed_batch([[30, 4]], 34, seed=2), packed_batch([[5], [2, 2, 2]], 8, seed=3)]
    # one step over all documents, each run alone, token-mean loss
    docs = [d for _, rows in micro for row in rows for d in row]
    total = sum(d.length - 1 for d in docs)
    model.zero_grad()
    for d in docs:
        logits = model(input_ids=d.tokens.view(1, -1)).logits[0]
        ce = torch.nn.functional.cross_entropy(logits[:-1], d.tokens[1:], reduction="sum")
        (ce / total).backward()
    expected = _grads(model).clone()
    # four packed micro-batches, each normalised by the step's target-token count
    step_tokens = sum(b.num_target_tokens for b, _ in micro)
    assert step_tokens == total
    for b, _ in micro:  # the count of what hf_kwargs' (shifted) labels hold
        assert b.num_target_tokens == int(
            (b.hf_kwargs("sdpa", config=None)["labels"] != -100).sum()
        )
    model.zero_grad()
    for batch, _ in micro:
        kwargs = batch.hf_kwargs("sdpa", config=model.config)
        model(**kwargs, num_items_in_batch=step_tokens).loss.backward()
    got = _grads(model)
    assert float((got - expected).norm() / expected.norm()) < 1e-5
    # the naive mean of per-micro-batch means is a different gradient
    model.zero_grad()
    for batch, _ in micro:
        (model(**batch.hf_kwargs("sdpa", config=model.config)).loss / len(micro)).backward()
    assert float((_grads(model) - expected).norm() / expected.norm()) > 1e-2


def test_per_document_weights_give_the_mean_of_document_means() -> None:
    """``loss_weights("document")``: each document weighs the same, whatever its length."""
    family = next(f for f in FAMILIES if f.name.startswith("mistral"))
    model = build_model(family, "sdpa").train()
    micro = [packed_batch([[20, 12], [7, 3]], 34, seed=0), packed_batch([[30, 4]], 34, seed=1)]
    docs = [d for _, rows in micro for row in rows for d in row]
    model.zero_grad()
    for d in docs:  # mean over documents of each document's token-mean, each document alone
        logits = model(input_ids=d.tokens.view(1, -1)).logits[0]
        ce = torch.nn.functional.cross_entropy(logits[:-1], d.tokens[1:])
        (ce / len(docs)).backward()
    expected = _grads(model).clone()
    counts = torch.cat([b.document_target_tokens() for b, _ in micro])
    assert counts.tolist() == [d.length - 1 for d in docs]
    model.zero_grad()
    for batch, _ in micro:
        logits = model(**batch.hf_kwargs("sdpa", config=model.config, with_labels=False)).logits
        ce = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch.labels.flatten(), reduction="none", ignore_index=-100
        )
        ((ce * batch.loss_weights("document").flatten()).sum() / len(docs)).backward()
    got = _grads(model)
    assert float((got - expected).norm() / expected.norm()) < 1e-5
    # token weights differ from document weights here (documents of 3 to 30 tokens)
    assert not torch.allclose(
        micro[0][0].loss_weights("token"), micro[0][0].loss_weights("document")
    )
