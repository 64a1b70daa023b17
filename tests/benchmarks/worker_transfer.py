"""Benchmark: what a loader worker's text batch costs to reach the main process, three ways.

A forked producer collates a text batch as the README's loader makes it (``--batch-size`` packs
of ``--pack-size`` tokens, two documents each: tokens, labels and ``cu_seqlens*``, collated
anew each time from the same packs) and puts it on a multiprocessing queue, ``--batches``
times; the main process takes each one and reads its tokens. The producer's batch leaves:

* ``by value`` (energon-pack's workers now): ``one_storage`` makes the item's type go by value
  through the multiprocessing pickler, the buffer's bytes in the pipe;
* ``shared arena`` (energon-pack before): the batch written into one buffer in shared memory
  (one segment, one file descriptor per batch);
* ``stock``: each tensor in a private storage of its own, as a stock encoder's batch leaves a
  worker (torch copies each storage into a new shared-memory segment).

Prints the CPU per batch of the producer (all its threads) and of the main process, medians of
``--rounds`` (the three ways take turns in each round), and each way's total against
``by value``. Run::

    python -W ignore tests/benchmarks/worker_transfer.py [--batches 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch

import energon_pack.energon._one_storage as one
from energon_pack.samples import Arena, collate_packs, pack_documents
from energon_pack_tools import make_document

WAYS = ("by value", "shared arena", "stock")


def _packs(pack_size: int, batch_size: int) -> list[object]:
    half = pack_size // 2
    return [
        pack_documents(
            [
                make_document(f"{r}a", torch.randint(5, 30000, (half,)).tolist()),
                make_document(f"{r}b", torch.randint(5, 30000, (pack_size - half,)).tolist()),
            ]
        )
        for r in range(batch_size)
    ]


def _batch(packs: list[object], pack_size: int, way: str) -> object:
    """The batch of ``packs`` as it leaves a worker ``way``."""
    if way == "shared arena":
        for_item = Arena.for_item
        Arena.for_item = classmethod(lambda cls, n: cls(n, shared=True))  # type: ignore[method-assign]
        try:
            return collate_packs(packs, pad_to=pack_size)
        finally:
            Arena.for_item = for_item  # type: ignore[method-assign]
    batch = collate_packs(packs, pad_to=pack_size)
    if way == "by value":
        return one.one_storage(batch)
    batch.tokens, batch.labels = batch.tokens.clone(), batch.labels.clone()  # stock: apart
    meta = batch.metadata
    object.__setattr__(meta, "cu_seqlens", meta.cu_seqlens.clone())
    object.__setattr__(meta, "cu_seqlens_padded", meta.cu_seqlens_padded.clone())
    return batch


def _produce(queue: mp.Queue, done: mp.Event, way: str, args: argparse.Namespace) -> None:
    packs = _packs(args.pack_size, args.batch_size)
    start = time.process_time()
    for _ in range(args.batches):
        queue.put(_batch(packs, args.pack_size, way))
    queue.put(None)
    done.wait()  # the main process has every batch (their file descriptors handed over)
    queue.put(time.process_time() - start)


def _round(way: str, args: argparse.Namespace) -> tuple[float, float]:
    """CPU seconds per batch of the producer and of the main process."""
    queue: mp.Queue = mp.Queue(maxsize=4)
    done = mp.Event()
    producer = mp.Process(target=_produce, args=(queue, done, way, args))
    producer.start()
    main = 0.0
    while True:
        start = time.process_time()
        batch = queue.get()
        if batch is None:
            break
        int(batch.tokens[:, ::512].sum())  # read it
        del batch
        main += time.process_time() - start
    done.set()
    produced = queue.get()
    producer.join()
    return produced / args.batches, main / args.batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pack-size", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    mp.set_start_method("fork")
    torch.set_num_threads(1)
    rows: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            rows[way].append(_round(way, args))
    batch = _batch(_packs(args.pack_size, args.batch_size), args.pack_size, "by value")
    size = batch.tokens.untyped_storage().nbytes()
    print(f"{args.batch_size} packs of {args.pack_size}: {size / 1024:.0f} KiB per batch")
    print("| way | producer CPU us / batch | main CPU us / batch | total | x by value |")
    print("|---|---:|---:|---:|---:|")
    base = [p + m for p, m in rows["by value"]]
    for way in WAYS:
        prod = statistics.median(p for p, _ in rows[way]) * 1e6
        got = statistics.median(m for _, m in rows[way]) * 1e6
        ratio = statistics.median((p + m) / b for (p, m), b in zip(rows[way], base))
        print(f"| {way} | {prod:,.0f} | {got:,.0f} | {prod + got:,.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
