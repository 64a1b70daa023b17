# SPDX-License-Identifier: Apache-2.0
"""PackedTrainer: transformers' Trainer on a real energon loader, CPU, tiny Llama from a config.

One uninterrupted run of 6 optimizer steps (2 micro-batches each, checkpoint at steps 3 and 6);
a new Trainer on a new loader resumed from checkpoint-3 sees the same batches and the same
losses, and each step's loss is the token-mean over both micro-batches. A run killed while
saving checkpoint-6 (a real SIGKILL in a subprocess, slow tier; the folder it leaves, fast tier)
resumes from checkpoint-3, and rotation never deletes the last complete checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("accelerate")  # transformers' Trainer needs it (the test extra has it)

from packed_trainer_run import (  # noqa: E402  (tests/training/, a script too)
    ACCUMULATION,
    PACK_SIZE,
    SAVE_AT,
    STEPS,
    RecordingTrainer,
    build_trainer,
)
from transformers import TrainingArguments  # noqa: E402
from transformers.trainer_utils import rotate_checkpoints  # noqa: E402

from energon_pack.training import PackedTrainer  # noqa: E402
from energon_pack.training._checkpoints import (  # noqa: E402
    TRAINER_STATE_FILE,
    checkpoint_folders,
    incomplete_reason,
    rotate,
)
from energon_pack.training._hf_trainer import LOADER_STATE_FILE  # noqa: E402
from energon_pack_tools import tiny_causal_lm  # noqa: E402

SCRIPT = Path(__file__).with_name("packed_trainer_run.py")


def _trainer(dataset: Path, tokenizer_dir: Path, vocab: int, out: Path, **kw: Any) -> Any:
    return build_trainer(dataset, tokenizer_dir, out, **kw)


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


def _killed_mid_save(full_run: RecordingTrainer, out: Path) -> Path:
    """A copy of the full run's output with checkpoint-6 as a kill after the model weights
    leaves it (what packed_trainer_run.py --kill-at 6 does for real): the loader state (written
    first) and the weights, no optimizer, RNG states nor trainer_state.json."""
    shutil.copytree(full_run.args.output_dir, out)
    killed = out / f"checkpoint-{STEPS}"
    for f in killed.iterdir():
        if f.name != LOADER_STATE_FILE.format(rank=0) and not f.name.startswith(
            ("model", "config")
        ):
            f.unlink()
    assert (killed / LOADER_STATE_FILE.format(rank=0)).is_file()
    assert not (killed / TRAINER_STATE_FILE).exists()
    return killed


def test_an_explicit_incomplete_checkpoint_is_refused_naming_the_one_to_use(
    full_run: RecordingTrainer, text_dataset: Any, tokenizer_dir: Path, tmp_path: Path
) -> None:
    killed = _killed_mid_save(full_run, tmp_path / "out")
    trainer = _trainer(text_dataset.path, tokenizer_dir, 0, tmp_path / "out")
    complete = str(tmp_path / "out" / f"checkpoint-{SAVE_AT}")
    with pytest.raises(FileNotFoundError) as e:
        trainer.train(resume_from_checkpoint=str(killed))
    assert f"{TRAINER_STATE_FILE} is missing" in str(e.value)
    assert f"resume from {complete} " in str(e.value)
    assert trainer._newest_complete_checkpoint() == complete  # what resume=True picks


def test_rotation_keeps_the_newest_complete_checkpoint(
    full_run: RecordingTrainer, tmp_path: Path
) -> None:
    killed = _killed_mid_save(full_run, tmp_path / "out")
    rotate(tmp_path / "out", 1, 0, protect=[])
    assert [p.name for p in checkpoint_folders(tmp_path / "out")] == [f"checkpoint-{SAVE_AT}"]
    assert not killed.exists()
    # transformers' own rule keeps the most recent folder, the incomplete one
    shutil.rmtree(tmp_path / "out")
    _killed_mid_save(full_run, tmp_path / "out")
    os.utime(tmp_path / "out" / f"checkpoint-{SAVE_AT}", (0, 0))
    rotate_checkpoints(str(tmp_path / "out"), save_total_limit=1, use_mtime=True)
    assert [p.name for p in checkpoint_folders(tmp_path / "out")] == [f"checkpoint-{STEPS}"]


@pytest.mark.slow
def test_a_run_killed_while_saving_resumes_from_the_last_complete_checkpoint(
    full_run: RecordingTrainer, text_dataset: Any, tokenizer_dir: Path, tmp_path: Path
) -> None:
    """A real process SIGKILLed while writing checkpoint-6 (after its weights, with
    save_total_limit=1): resume=True restores checkpoint-3 and gives the uninterrupted run."""
    out = tmp_path / "out"
    args = [str(text_dataset.path), str(tokenizer_dir), str(out)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--kill-at", str(STEPS), "--save-total-limit", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    names = sorted(p.name for p in checkpoint_folders(out))
    assert names == [f"checkpoint-{SAVE_AT}", f"checkpoint-{STEPS}"]
    assert incomplete_reason(out / f"checkpoint-{STEPS}", 0) == f"{TRAINER_STATE_FILE} is missing"

    resumed = _trainer(text_dataset.path, tokenizer_dir, 0, out, save_total_limit=1)
    resumed.train(resume_from_checkpoint=True)
    done_batches = SAVE_AT * ACCUMULATION
    assert _seen(resumed) == _seen(full_run)[done_batches:]
    assert resumed.losses == full_run.losses[done_batches:]
    # checkpoint-6 rewritten complete, then rotation removed checkpoint-3
    assert [p.name for p in checkpoint_folders(out)] == [f"checkpoint-{STEPS}"]
    assert incomplete_reason(out / f"checkpoint-{STEPS}", 0) is None


def test_a_model_without_num_items_in_batch_is_refused(
    text_dataset: Any, tokenizer_dir: Path, tokenizer: Any, tmp_path: Path
) -> None:
    model = tiny_causal_lm(len(tokenizer), seed=0, max_position_embeddings=PACK_SIZE)
    model.accepts_loss_kwargs = False  # what Trainer reads: forward ignores num_items_in_batch
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="takes no num_items_in_batch.*compute_loss_func"):
        PackedTrainer(model=model, args=args, loader=[])
