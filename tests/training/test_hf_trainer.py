# SPDX-License-Identifier: Apache-2.0
"""PackedTrainer: transformers' Trainer on a real energon loader, CPU, tiny Llama from a config.

One uninterrupted run of 6 optimizer steps (2 micro-batches each, checkpoint at step 3); a new
Trainer on a new loader resumed from checkpoint-3 sees the same batches and the same losses, and
each step's loss is the token-mean over both micro-batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("accelerate")  # transformers' Trainer needs it (the test extra has it)

from transformers import TrainingArguments  # noqa: E402

from energon_pack.task_encoders import LLMPackingTaskEncoder  # noqa: E402
from energon_pack.training import PackedTrainer, make_loader
from energon_pack.training._hf_trainer import LOADER_STATE_FILE
from energon_pack_tools import tiny_causal_lm

PACK_SIZE, STEPS, ACCUMULATION, SAVE_AT = 32, 6, 2, 3


class RecordingTrainer(PackedTrainer):
    """Records each micro-batch (on the host), its loss, and each step's num_items_in_batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[Any] = []
        self.num_items: list[int] = []
        self.losses: list[float] = []

    def model_inputs(self, batch: Any) -> dict[str, Any]:
        self.batches.append(batch)
        return super().model_inputs(batch)

    def get_batch_samples(self, *args: Any) -> Any:
        inputs, num_items = super().get_batch_samples(*args)
        self.num_items.append(int(num_items))
        return inputs, num_items

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss.item())
        return loss


def _trainer(dataset: Path, tokenizer_dir: Path, vocab: int, out: Path) -> RecordingTrainer:
    encoder = LLMPackingTaskEncoder(
        str(tokenizer_dir), pack_size=PACK_SIZE, overlong="split", log_every=0
    )
    loader = make_loader(dataset, encoder, packing_buffer_size=8, batch_size=2, repeat=True)
    model = tiny_causal_lm(vocab, seed=0, max_position_embeddings=PACK_SIZE).train()
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=STEPS,
        gradient_accumulation_steps=ACCUMULATION,
        save_steps=SAVE_AT,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    return RecordingTrainer(model=model, args=args, loader=loader)


def _seen(trainer: RecordingTrainer) -> list[tuple[list[str], list[list[int]]]]:
    return [(b.__key__, b.tokens.tolist()) for b in trainer.batches]


@pytest.fixture(scope="module")
def full_run(
    text_dataset: Any, tokenizer_dir: Path, tokenizer: Any, tmp_path_factory: pytest.TempPathFactory
) -> RecordingTrainer:
    trainer = _trainer(
        text_dataset.path, tokenizer_dir, len(tokenizer), tmp_path_factory.mktemp("full")
    )
    trainer.train()
    return trainer


def test_resume_from_checkpoint_gives_identical_batches_and_losses(
    full_run: RecordingTrainer,
    text_dataset: Any,
    tokenizer_dir: Path,
    tokenizer: Any,
    tmp_path: Path,
) -> None:
    assert len(full_run.batches) == len(full_run.losses) == STEPS * ACCUMULATION
    checkpoint = Path(full_run.args.output_dir) / f"checkpoint-{SAVE_AT}"
    assert (checkpoint / LOADER_STATE_FILE.format(rank=0)).is_file()

    resumed = _trainer(text_dataset.path, tokenizer_dir, len(tokenizer), tmp_path)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    done = SAVE_AT * ACCUMULATION
    assert _seen(resumed) == _seen(full_run)[done:]
    assert resumed.losses == full_run.losses[done:]
    assert resumed.state.global_step == STEPS


def test_step_loss_is_the_token_mean_over_the_micro_batches(
    full_run: RecordingTrainer, tokenizer: Any
) -> None:
    first = full_run.batches[:ACCUMULATION]
    counts = [b.num_target_tokens for b in first]
    assert full_run.num_items[0] == sum(counts)
    assert counts[0] != counts[1]  # else a mean of micro-batch means would pass too
    # recompute step 1 with the initial weights: every target's CE summed, / all targets
    model = tiny_causal_lm(len(tokenizer), seed=0, max_position_embeddings=PACK_SIZE)
    sums, means = [], []
    with torch.no_grad():
        for b in first:
            logits = model(**b.hf_kwargs("sdpa", config=model, with_labels=False)).logits
            ce = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), b.labels.flatten(), ignore_index=-100, reduction="sum"
            )
            sums.append(ce.item())
            means.append(ce.item() / b.num_target_tokens)
    step_loss = sum(full_run.losses[:ACCUMULATION])
    assert step_loss == pytest.approx(sum(sums) / sum(counts), rel=1e-5)
    assert abs(step_loss - sum(means) / len(means)) > 1e-3


def test_resume_from_a_checkpoint_without_loader_state_is_refused(
    full_run: RecordingTrainer,
    text_dataset: Any,
    tokenizer_dir: Path,
    tokenizer: Any,
    tmp_path: Path,
) -> None:
    trainer = _trainer(text_dataset.path, tokenizer_dir, len(tokenizer), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="not saved by PackedTrainer"):
        trainer.train(resume_from_checkpoint=str(tmp_path))


def test_a_model_without_num_items_in_batch_is_refused(
    text_dataset: Any, tokenizer_dir: Path, tokenizer: Any, tmp_path: Path
) -> None:
    model = tiny_causal_lm(len(tokenizer), seed=0, max_position_embeddings=PACK_SIZE)
    model.accepts_loss_kwargs = False  # what Trainer reads: forward ignores num_items_in_batch
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="takes no num_items_in_batch.*compute_loss_func"):
        PackedTrainer(model=model, args=args, loader=[])
