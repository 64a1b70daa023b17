# SPDX-License-Identifier: Apache-2.0
"""Packed evaluation over a real energon val split (``energon prepare --split-ratio 0,1,0``).

The reference is each non-empty document of the corpus tokenized and run through the same tiny
Llama alone (unpacked): the packed evaluation must see every document once and give the same
token-mean loss (sum of every target's cross-entropy / number of targets) within 1e-5.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.testing import member_keys
from energon_pack.training import evaluate, make_eval_loader
from energon_pack_tools import make_text_dataset, sample_key, tiny_causal_lm

PACK_SIZE, BATCH_SIZE = 64, 2


@pytest.fixture(scope="module")
def val_dataset(tmp_path_factory: pytest.TempPathFactory, corpus: list[str]) -> Path:
    return make_text_dataset(tmp_path_factory.mktemp("val"), corpus, split_ratio="0,1,0")


@pytest.fixture(scope="module")
def encoder(tokenizer_dir: Path) -> LLMPackingTaskEncoder:
    return LLMPackingTaskEncoder(str(tokenizer_dir), pack_size=PACK_SIZE, log_every=0)


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    """Tiny Llama with its output weights x10: per-token losses spread far from log(vocab), so
    a mean of per-batch means would differ from the token-mean."""
    model = tiny_causal_lm(len(tokenizer), seed=0, max_position_embeddings=PACK_SIZE).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(10)
    return model


@pytest.fixture(scope="module")
def reference(corpus: list[str], encoder: LLMPackingTaskEncoder, model: Any) -> dict[str, Any]:
    """Each non-empty document alone through the model: its CE sum and its target count."""
    docs = {sample_key(i): encoder.tokenizer.encode(t) for i, t in enumerate(corpus) if t}
    assert max(len(d) for d in docs.values()) <= PACK_SIZE  # no document is split or truncated
    sums, counts = [], []
    with torch.no_grad():
        for ids in docs.values():
            ids_t = torch.tensor([ids])
            logits = model(input_ids=ids_t).logits[0, :-1]
            sums.append(torch.nn.functional.cross_entropy(logits, ids_t[0, 1:], reduction="sum"))
            counts.append(len(ids) - 1)
    return {"keys": sorted(docs), "loss": float(sum(sums)) / sum(counts), "targets": sum(counts)}


def _recording(loader: Any, seen: list[Any]) -> Iterator[Any]:
    for batch in loader:
        seen.append(batch)
        yield batch


def test_evaluate_sees_every_document_once_and_gives_the_unpacked_token_mean_loss(
    val_dataset: Path, encoder: LLMPackingTaskEncoder, model: Any, reference: dict[str, Any]
) -> None:
    loader = make_eval_loader(val_dataset, encoder, packing_buffer_size=8, batch_size=BATCH_SIZE)
    seen: list[Any] = []
    model.train()
    metrics = evaluate(model, _recording(loader, seen), attn_implementation="sdpa")
    assert model.training  # put back in the mode it was in
    model.eval()

    counts = Counter(k for batch in seen for k in member_keys(batch))
    assert sorted(counts) == reference["keys"] and set(counts.values()) == {1}
    assert metrics["eval_documents"] == len(reference["keys"])
    assert metrics["eval_target_tokens"] == reference["targets"]
    assert metrics["eval_batches"] == len(seen)
    assert metrics["eval_loss"] == pytest.approx(reference["loss"], abs=1e-5)

    # the test tells a token-mean from a mean of per-batch means
    with torch.no_grad():
        means = [
            torch.nn.functional.cross_entropy(
                model(**b.hf_kwargs("sdpa", config=model, with_labels=False)).logits.flatten(0, 1),
                b.labels.flatten(),
            ).item()
            for b in seen
        ]
    assert abs(sum(means) / len(means) - reference["loss"]) > 1e-3


def test_packed_trainer_evaluates_on_call_and_during_training(
    val_dataset: Path,
    text_dataset: Any,
    encoder: LLMPackingTaskEncoder,
    model: Any,
    reference: dict[str, Any],
    tmp_path: Path,
) -> None:
    """``evaluate()`` gives the reference; ``eval_strategy="steps"`` evaluates again (the loader
    read whole a second time) after a step with learning rate 0 (the same weights)."""
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments

    from energon_pack.training import PackedTrainer, make_loader

    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        learning_rate=0.0,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = PackedTrainer(
        model=model,
        args=args,
        loader=make_loader(text_dataset.path, encoder, batch_size=BATCH_SIZE, repeat=True),
        eval_loader=make_eval_loader(val_dataset, encoder, batch_size=BATCH_SIZE),
    )
    first = trainer.evaluate(metric_key_prefix="val")
    assert first["val_loss"] == pytest.approx(reference["loss"], abs=1e-5)
    assert first["val_documents"] == len(reference["keys"])
    assert first["val_target_tokens"] == reference["targets"]
    trainer.train()
    during = [log for log in trainer.state.log_history if "eval_loss" in log]
    assert len(during) == 1 and during[0]["step"] == 1
    assert during[0]["eval_loss"] == pytest.approx(first["val_loss"], abs=1e-6)
    assert during[0]["eval_documents"] == first["val_documents"]


def test_packed_trainer_evaluate_without_an_eval_loader_says_what_to_pass(
    model: Any, tmp_path: Path
) -> None:
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments

    from energon_pack.training import PackedTrainer

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match=r"PackedTrainer\(eval_loader=make_eval_loader"):
        PackedTrainer(model=model, args=args, loader=[]).evaluate()
    with pytest.raises(ValueError, match=r"eval_loader=make_eval_loader.*instead of eval_dataset"):
        PackedTrainer(model=model, args=args, loader=[], eval_dataset=[1])
