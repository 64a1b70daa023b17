# SPDX-License-Identifier: Apache-2.0
"""One rank of the multi-rank contract runs (launched by torchrun from test_multi_rank.py).

Global rank ``g`` of ``world = dp * cp`` ranks is data-parallel rank ``g // cp`` and
context-parallel rank ``g % cp``: the ``cp`` ranks of one DP rank must see the same packs, so the
loader's ``WorkerConfig`` uses a data-parallel process group (ranks ``c, c + cp, c + 2 cp, ...``)
and documents are aligned to ``2 * cp``. For each ``--num-workers`` value the rank:

1. iterates one epoch (``repeat=False``) and records every item (keys + digest); after
   ``--save-after`` items it calls ``save_state_global`` (the state goes through ``torch.save``
   on the group's first rank, as a training job would checkpoint it);
2. builds a fresh loader, ``restore_state_global(state, src_rank=0)`` (only the group's first
   rank reads the file) and records the continuation.

It writes ``{"rank", "world_size", "dp_rank", "cp_rank", "runs": {num_workers: {...}}}``.

With ``--blend META`` (a 1:1 blend of short and long documents, ``make_short_long_blend``) the
same launch also trains a token-weighted blend (``blend_size="tokens"``, ``LengthTextEncoder``,
``repeat=True``) for each ``--blend-workers`` value: it reads packs until they hold
``--blend-tokens`` real tokens on this rank (an epoch-sized run), saves with
``save_state_global`` after ``--blend-save-after`` packs, and resumes a fresh loader from it
for the rest of the run; ``"blend": {num_workers: {"tokens", "documents", "reference",
"resumed", ...}}`` holds the tokens and documents per dataset and both streams.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch
from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.testing import init_torchrun_process_group, item_record, write_rank_result


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--num-workers", default="0", help="comma-separated, one run each")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size")
    p.add_argument("--pack-size", type=int, default=32)
    p.add_argument("--buffer", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=0, help="0: one pack per item")
    p.add_argument("--save-after", type=int, default=3)
    p.add_argument("--blend", default=None, help="a short/long blend metadataset to train too")
    p.add_argument("--blend-workers", default="0", help="comma-separated, one blend run each")
    p.add_argument("--blend-tokens", type=int, default=100_000, help="per rank")
    p.add_argument("--blend-save-after", type=int, default=36)
    return p.parse_args()


def blend_runs(args: argparse.Namespace, rank: int, world_size: int) -> dict[str, Any]:
    """The token-weighted blend's runs (module docstring); one data-parallel group."""
    from energon_pack.samples import PackingCounts
    from energon_pack_tools import LengthTextEncoder, trained_shares

    checkpoint = Path(os.environ["ENERGON_PACK_RESULTS_DIR"]) / "blend_loader.pt"

    def make_loader(num_workers: int) -> Any:
        encoder = LengthTextEncoder(pack_size=2048, overlong="split", log_every=0)
        encoder.blend_size = "tokens"
        dataset = get_train_dataset(
            args.blend,
            worker_config=WorkerConfig(rank=rank, world_size=world_size, num_workers=num_workers),
            batch_size=None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            packing_buffer_size=32,
            task_encoder=encoder,
            repeat=True,
        )
        return get_savable_loader(dataset, checkpoint_every_sec=0, checkpoint_every_min_n_samples=1)

    runs: dict[str, Any] = {}
    for num_workers in (int(n) for n in args.blend_workers.split(",")):
        start = time.perf_counter()
        loader = make_loader(num_workers)
        packs, tokens, state = [], 0, None
        for pack in loader:
            packs.append(pack)
            tokens += int(sum(pack.doc_lengths))
            if len(packs) == args.blend_save_after:  # every rank reaches it: a collective
                state = loader.save_state_global(global_dst_rank=0)
                if rank == 0:
                    torch.save(state, checkpoint)
            if tokens >= args.blend_tokens and len(packs) > args.blend_save_after:
                break
        torch.distributed.barrier()
        read = time.perf_counter()
        resumed_loader = make_loader(num_workers)
        saved = torch.load(checkpoint, weights_only=False) if rank == 0 else None
        resumed_loader.restore_state_global(saved, src_rank=0)
        rest = len(packs) - args.blend_save_after
        resumed = [item_record(p) for _, p in zip(range(rest), resumed_loader)]
        shares = trained_shares(packs)
        runs[str(num_workers)] = {
            "save_after": args.blend_save_after,
            "tokens": list(shares.tokens),
            "documents": list(shares.documents),
            "dataset_tokens": list(PackingCounts.total(p.counts for p in packs).dataset_tokens),
            "reference": [item_record(p) for p in packs[args.blend_save_after :]],
            "resumed": resumed,
            "seconds": [read - start, time.perf_counter() - read],
        }
        torch.distributed.barrier()
    return runs


def main() -> None:
    args = parse_args()
    rank, world_size = init_torchrun_process_group("gloo")
    cp = args.cp
    if world_size % cp:
        raise ValueError(f"world size {world_size} is not a multiple of --cp {cp}")
    dp, dp_rank, cp_rank = world_size // cp, rank // cp, rank % cp
    # every rank creates every group, in the same order (torch.distributed requires it)
    groups = [torch.distributed.new_group(list(range(c, world_size, cp))) for c in range(cp)]
    dp_group = groups[cp_rank] if cp > 1 else None
    group_first = cp_rank  # global rank of DP rank 0 in this rank's DP group
    alignment = 2 * cp if cp > 1 else 1
    encoder = LLMPackingTaskEncoder(
        args.tokenizer, pack_size=args.pack_size, alignment=alignment, log_every=0
    )
    checkpoint = Path(os.environ["ENERGON_PACK_RESULTS_DIR"]) / f"loader_cp{cp_rank}.pt"

    def make_loader(num_workers: int) -> Any:
        worker_config = WorkerConfig(
            rank=dp_rank, world_size=dp, num_workers=num_workers, data_parallel_group=dp_group
        )
        dataset = get_train_dataset(
            args.dataset,
            worker_config=worker_config,
            batch_size=args.batch_size or None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            packing_buffer_size=args.buffer,
            task_encoder=encoder,
            repeat=False,
        )
        return get_savable_loader(dataset, checkpoint_every_sec=0, checkpoint_every_min_n_samples=1)

    runs: dict[str, Any] = {}
    for num_workers in (int(n) for n in args.num_workers.split(",")):
        loader = make_loader(num_workers)
        iterator = iter(loader)
        reference = [item_record(next(iterator)) for _ in range(args.save_after)]
        state = loader.save_state_global(global_dst_rank=group_first)
        if rank == group_first:
            torch.save(state, checkpoint)
        reference += [item_record(item) for item in iterator]
        torch.distributed.barrier()

        resumed_loader = make_loader(num_workers)
        saved = torch.load(checkpoint, weights_only=False) if rank == group_first else None
        resumed_loader.restore_state_global(saved, src_rank=0)
        resumed = [item_record(item) for item in resumed_loader]
        runs[str(num_workers)] = {
            "save_after": args.save_after,
            "reference": reference,
            "resumed": resumed,
        }
        torch.distributed.barrier()

    if args.blend and cp > 1:
        raise ValueError("--blend runs data parallel only (--cp 1)")
    blend = blend_runs(args, rank, world_size) if args.blend else None
    write_rank_result(
        {
            "blend": blend,
            "rank": rank,
            "world_size": world_size,
            "dp_rank": dp_rank,
            "cp_rank": cp_rank,
            "alignment": alignment,
            "runs": runs,
        }
    )
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
