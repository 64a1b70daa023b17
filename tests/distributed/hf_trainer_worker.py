# SPDX-License-Identifier: Apache-2.0
"""One rank of PackedTrainer under torchrun (launched by test_hf_trainer_ranks.py).

``TrainingArguments`` starts torch.distributed (gloo on CPU); each rank builds its energon
loader from it (``default_worker_config``), trains a tiny Llama with DDP for ``--steps`` steps
of 2 micro-batches (checkpoint every ``--save-at`` steps), then a new PackedTrainer on a new
loader resumes from ``checkpoint-<save-at>``. Each rank writes what both runs saw.
"""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path
from typing import Any

import torch
from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset
from transformers import TrainingArguments

from energon_pack.encoding import load_tokenizer
from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.testing import item_record, write_rank_result
from energon_pack.training import PackedTrainer
from energon_pack_tools import tiny_causal_lm

PACK_SIZE, ACCUMULATION = 32, 2


class Recording(PackedTrainer):
    """Records each micro-batch, its target count, each step's num_items_in_batch and losses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record: dict[str, list[Any]] = {
            "items": [],
            "counts": [],
            "num_items": [],
            "losses": [],
        }

    def model_inputs(self, batch: Any) -> dict[str, Any]:
        self.record["items"].append(item_record(batch))
        self.record["counts"].append(batch.num_target_tokens)
        return super().model_inputs(batch)

    def get_batch_samples(self, *args: Any) -> Any:
        inputs, num_items = super().get_batch_samples(*args)
        self.record["num_items"].append(int(num_items))
        return inputs, num_items

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        loss = super().training_step(*args, **kwargs)
        self.record["losses"].append(loss.item())
        return loss


def train(args: argparse.Namespace, out: Path, resume: str | None) -> Recording:
    training_args = TrainingArguments(
        output_dir=str(out),
        max_steps=args.steps,
        gradient_accumulation_steps=ACCUMULATION,
        save_steps=args.save_at,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )  # starts torch.distributed: the loader's WorkerConfig reads rank and world size from it
    encoder = LLMPackingTaskEncoder(
        args.tokenizer, pack_size=PACK_SIZE, overlong="split", log_every=0
    )
    dataset = get_train_dataset(
        args.dataset,
        worker_config=WorkerConfig.default_worker_config(num_workers=0),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        packing_buffer_size=8,
        task_encoder=encoder,
    )
    loader = get_savable_loader(dataset, checkpoint_every_sec=0, checkpoint_every_min_n_samples=1)
    vocab = len(load_tokenizer(args.tokenizer))
    model = tiny_causal_lm(vocab, seed=0, max_position_embeddings=PACK_SIZE).train()
    trainer = Recording(model=model, args=training_args, loader=loader)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--save-at", type=int, default=2)
    args = p.parse_args()
    out = Path(os.environ["ENERGON_PACK_RESULTS_DIR"]) / "trainer"
    full = train(args, out, None)
    resumed = train(args, out, str(out / f"checkpoint-{args.save_at}"))
    write_rank_result(
        {"rank": full.args.process_index, "full": full.record, "resumed": resumed.record}
    )
    # Trainer leaves the process group open. Left to interpreter exit, gloo's threads can abort
    # the process (SIGABRT, "terminate called without an active exception"); destroyed while a
    # DDP model still holds it, the group's destructor can deadlock with the GIL when the model
    # is freed. So: the DDP models first, then the group.
    del full, resumed
    gc.collect()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
