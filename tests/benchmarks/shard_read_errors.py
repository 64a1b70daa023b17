# SPDX-License-Identifier: Apache-2.0
"""Benchmark: what naming damaged shards costs a read that succeeds.

``energon_pack.energon`` wraps energon's ``ITarReader._get_item_by_sample_pointer`` so a 0-byte
or truncated shard, or a member repeated in one sample, raises ``DamagedShardError`` naming the
shard (see ``_shard_errors``). This times the raw sample read (energon's reader, no loader) with
energon's own method and with the wrapper, on the same real dataset, and prints microseconds
per sample (median of interleaved rounds).
Run: ``python tests/benchmarks/shard_read_errors.py [--samples 2000] [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _reader(path: Path):
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.itar_reader import ShardInfosITarReader
    from megatron.energon.flavors.webdataset.metadata import WebdatasetMeta

    meta = WebdatasetMeta.from_config(path=EPath(str(path)), split_part="train")
    return ShardInfosITarReader(EPath(str(path)), meta.shards)


def _per_sample_us(reader, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        reader[i]
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    from megatron.energon.flavors.webdataset.itar_reader import ITarReader

    from energon_pack.energon import _shard_errors
    from energon_pack_tools import make_text_dataset

    wrapped = ITarReader._get_item_by_sample_pointer
    plain = wrapped.__wrapped__
    with tempfile.TemporaryDirectory() as tmp:
        texts = [f"document {i} " + "word " * (i % 200) for i in range(args.samples)]
        path = make_text_dataset(Path(tmp) / "d", texts, samples_per_shard=500)
        reader = _reader(path)
        methods = {"energon": plain, "energon-pack (named)": wrapped}
        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):  # interleaved: a busy machine slows both alike
            for name, method in methods.items():
                ITarReader._get_item_by_sample_pointer = method
                times[name].append(_per_sample_us(reader, args.samples))
        ITarReader._get_item_by_sample_pointer = wrapped
        rows = [(name, statistics.median(t)) for name, t in times.items()]
    assert _shard_errors.install_shard_errors()
    print(f"raw sample read, {args.samples} samples x {args.rounds} rounds (median)")
    print(f"{'reader':<22} {'us/sample':>10}")
    for name, us in rows:
        print(f"{name:<22} {us:>10.1f}")
    print(f"{'overhead':<22} {rows[1][1] - rows[0][1]:>10.1f}")


if __name__ == "__main__":
    main()
