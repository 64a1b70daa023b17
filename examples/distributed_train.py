# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training on packed batches with torchrun, a global loader checkpoint and resume.

Run on CPU (gloo) with two ranks::

    torchrun --nproc-per-node 2 examples/distributed_train.py --steps 8 --save-at 4

Each rank builds its own energon loader from ``WorkerConfig.default_worker_config()`` (rank and
world size come from ``torch.distributed``), so the ranks read disjoint shards of the data.
A tiny Llama (``energon_pack_tools.tiny_causal_lm``) wrapped in DDP trains on the
packed batches through ``batch.hf_kwargs("sdpa", config=model)`` (block-causal mask, reset positions, labels
that never cross documents). At step ``--save-at`` the loader state of all ranks is gathered on
rank 0 with ``save_state_global`` and written with the model and optimizer to one checkpoint.
After ``--steps`` the script starts over from that checkpoint (fresh model, optimizer and
loader; ``restore_state_global(state, src_rank=0)`` sends each rank its part) and checks that
every rank sees the same batches and the same losses as in the uninterrupted run::

    rank 0 step 4 loss 4.1312 docs 000164,000012,...
    rank 0: resumed steps 4..7 identical to the uninterrupted run

Without ``--dataset``/``--tokenizer`` rank 0 first writes a synthetic dataset and tokenizer to
``--workdir``. For context parallelism pass ``--cp 2``: documents are then padded to a multiple
of ``2 * CP`` (``--alignment`` overrides, e.g. ``lcm(2 * CP, TP)`` with sequence parallelism).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset
from torch.nn.parallel import DistributedDataParallel

from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack_tools import tiny_causal_lm


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", help="energon dataset (default: a synthetic one in --workdir)")
    p.add_argument("--tokenizer", help="local tokenizer directory (default: a synthetic one)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "ep_dist_train"))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--save-at", type=int, default=4)
    p.add_argument("--pack-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=2, help="packs per rank and step")
    p.add_argument("--packing-buffer-size", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--cp", type=int, default=1, help="context-parallel size (alignment 2*CP)")
    p.add_argument("--alignment", type=int, help="override the document alignment")
    p.add_argument("--results-dir", help="write rank{r}.json with per-step keys and losses")
    args = p.parse_args()
    if not 0 < args.save_at < args.steps:
        p.error(f"--save-at {args.save_at} must be between 1 and --steps {args.steps} - 1")
    return args


def prepare_data(args: argparse.Namespace, rank: int) -> tuple[str, str]:
    """Rank 0 writes a synthetic dataset and tokenizer once; the other ranks wait for it."""
    if args.dataset and args.tokenizer:
        return args.dataset, args.tokenizer
    from energon_pack_tools import WORDS, make_text_dataset, make_tokenizer, synthetic_texts

    root = Path(args.workdir)
    texts = synthetic_texts(400, seed=0, min_words=1, max_words=40)
    if rank == 0 and not (root / "ds" / ".nv-meta").exists():
        make_tokenizer(root / "tok", [*texts, " ".join(WORDS)])
        make_text_dataset(root / "ds", texts, samples_per_shard=25)
    dist.barrier()
    return args.dataset or str(root / "ds"), args.tokenizer or str(root / "tok")


def build_loader(args: argparse.Namespace, dataset: str, encoder: Any) -> Any:
    # rank / world_size from torch.distributed; pass data_parallel_group= when TP/CP/PP ranks
    # share a data-parallel rank (they must then read the same data)
    worker_config = WorkerConfig.default_worker_config(num_workers=args.num_workers)
    train = get_train_dataset(
        dataset,
        worker_config=worker_config,
        batch_size=args.batch_size,
        shuffle_buffer_size=32,
        max_samples_per_sequence=8,
        packing_buffer_size=args.packing_buffer_size,
        task_encoder=encoder,
    )
    return get_savable_loader(train)


def build_model(vocab_size: int) -> tuple[DistributedDataParallel, torch.optim.Optimizer]:
    model = DistributedDataParallel(tiny_causal_lm(vocab_size, seed=0).train())
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def train(
    model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    batches: Any,
    steps: range,
    on_step_end: Any = None,
) -> list[dict[str, Any]]:
    rank = dist.get_rank()
    log = []
    for step, batch in zip(steps, batches):
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients of all ranks
        optimizer.step()
        keys = [k for row in batch.sample_keys for k in row]
        log.append({"step": step, "loss": loss.item(), "keys": keys})
        print(
            f"rank {rank} step {step} loss {loss.item():.4f} docs {','.join(keys[:3])},...",
            flush=True,
        )
        if on_step_end is not None:
            on_step_end(step)
    return log


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    dataset, tokenizer = prepare_data(args, rank)
    alignment = args.alignment or (2 * args.cp if args.cp > 1 else 1)
    pack_size = math.lcm(args.pack_size, alignment)  # pack_size must be a multiple
    encoder = LLMPackingTaskEncoder(
        tokenizer,
        pack_size=pack_size,
        alignment=alignment,
        overlong="split",
        log_every=0,
        # Each rank trains on batch_size packs per step: emit packs so that any batch_size in a
        # row cost about the same, and the ranks finish their steps together.
        step_packs=args.batch_size,
    )
    vocab_size = len(encoder.tokenizer.tokenizer)
    checkpoint = Path(args.workdir) / "checkpoint.pt"

    # 1. the uninterrupted run, saving a global checkpoint after step save_at - 1
    loader = build_loader(args, dataset, encoder)
    model, optimizer = build_model(vocab_size)

    def save(step: int) -> None:
        if step != args.save_at - 1:
            return
        loader_state = loader.save_state_global(global_dst_rank=0)  # collective: all ranks
        if rank == 0:
            state = {
                "step": args.save_at,
                "loader": loader_state,  # one entry per rank
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
            }
            torch.save(state, checkpoint)
        dist.barrier()  # the file exists before anyone reads it

    reference = train(model, optimizer, loader, range(args.steps), on_step_end=save)

    # 2. resume from the checkpoint with everything rebuilt from scratch
    saved = torch.load(checkpoint, weights_only=False)  # energon's state is not plain tensors
    loader = build_loader(args, dataset, encoder)
    loader.restore_state_global(saved["loader"] if rank == 0 else None, src_rank=0)
    model, optimizer = build_model(vocab_size)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    resumed = train(model, optimizer, loader, range(saved["step"], args.steps))

    expected = reference[args.save_at :]
    same_keys = [r["keys"] for r in resumed] == [r["keys"] for r in expected]
    same_loss = all(
        math.isclose(a["loss"], b["loss"], rel_tol=1e-5) for a, b in zip(resumed, expected)
    )
    ok = same_keys and same_loss and len(resumed) == len(expected)
    verdict = "identical to" if ok else "DIFFERENT from"
    print(
        f"rank {rank}: resumed steps {args.save_at}..{args.steps - 1} {verdict} the run", flush=True
    )
    if args.results_dir:
        result = {"rank": rank, "world_size": world_size, "alignment": alignment}
        result.update(reference=reference, resumed=resumed, resume_identical=ok)
        out = Path(args.results_dir) / f"rank{rank}.json"
        out.write_text(json.dumps(result))
    # A DDP model holds the process group: freed after destroy_process_group, the group's
    # destructor can deadlock with the GIL (torch 2.13, gloo). Free the models first.
    model = optimizer = None
    gc.collect()
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
