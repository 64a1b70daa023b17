# SPDX-License-Identifier: Apache-2.0
"""The PackedTrainer run that test_hf_trainer.py compares, importable and as a script.

As a script it trains the same run in a fresh process and kills itself with SIGKILL while
saving ``checkpoint-<kill-at>``: after the loader state and the model weights are written,
before the optimizer, the RNG states and ``trainer_state.json`` (a crash mid-save)::

    python packed_trainer_run.py DATASET TOKENIZER_DIR OUT --kill-at 6 --save-total-limit 1
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments

from energon_pack.encoding import load_tokenizer
from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.training import PackedTrainer, make_loader
from energon_pack_tools import tiny_causal_lm

PACK_SIZE, STEPS, ACCUMULATION, SAVE_AT = 32, 6, 2, 3


class RecordingTrainer(PackedTrainer):
    """Records each micro-batch (on the host), its loss, and each step's num_items_in_batch;
    with ``kill_at``, kills the process while saving that step's checkpoint."""

    def __init__(self, *args: Any, kill_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kill_at = kill_at
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

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        # transformers calls this right after writing the model weights
        if self.state.global_step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        super()._save_optimizer_and_scheduler(output_dir)


def build_trainer(
    dataset: Path,
    tokenizer_dir: Path,
    out: Path,
    *,
    save_total_limit: int | None = None,
    kill_at: int | None = None,
) -> RecordingTrainer:
    encoder = LLMPackingTaskEncoder(
        str(tokenizer_dir), pack_size=PACK_SIZE, overlong="split", log_every=0
    )
    loader = make_loader(dataset, encoder, packing_buffer_size=8, batch_size=2, repeat=True)
    vocab = len(load_tokenizer(tokenizer_dir))
    model = tiny_causal_lm(vocab, seed=0, max_position_embeddings=PACK_SIZE).train()
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=STEPS,
        gradient_accumulation_steps=ACCUMULATION,
        save_steps=SAVE_AT,
        save_total_limit=save_total_limit,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    return RecordingTrainer(model=model, args=args, loader=loader, kill_at=kill_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("tokenizer_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--kill-at", type=int, required=True)
    parser.add_argument("--save-total-limit", type=int)
    a = parser.parse_args()
    trainer = build_trainer(
        a.dataset, a.tokenizer_dir, a.out, save_total_limit=a.save_total_limit, kill_at=a.kill_at
    )
    trainer.train()
    raise SystemExit(f"not killed: step {a.kill_at} saved no checkpoint")


if __name__ == "__main__":
    main()
