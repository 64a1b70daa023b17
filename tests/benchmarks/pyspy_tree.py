# SPDX-License-Identifier: Apache-2.0
"""Print the call tree under one frame of a ``py-spy record --format raw`` profile: inclusive
samples per path, children by size (``--min`` drops the small ones). Used in
docs/benchmarks/loader.md to see where a loader's epoch goes::

    py-spy record -r 200 --format raw -o ep.raw -- \\
        python -W ignore tests/benchmarks/loader_vs_energon.py --docs 1500 --rounds 4 \\
        --cached-tokens --loaders energon-pack
    python tests/benchmarks/pyspy_tree.py ep.raw --root GcDataset.__iter__ --depth 12 --min 20
"""

from __future__ import annotations

import argparse
import collections
import re


def tree(path: str, root: str) -> collections.Counter[tuple[str, ...]]:
    """Inclusive samples of every call path that starts at ``root`` (function names only)."""
    paths: collections.Counter[tuple[str, ...]] = collections.Counter()
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            frames = [re.sub(r" \(.*", "", frame) for frame in stack.split(";")]
            if root not in frames:
                continue
            below = frames[frames.index(root) :]
            for depth in range(1, len(below) + 1):
                paths[tuple(below[:depth])] += int(count)
    return paths


def show(
    paths: collections.Counter[tuple[str, ...]], key: tuple[str, ...], depth: int, least: int
) -> None:
    children = [k for k in paths if len(k) == len(key) + 1 and k[: len(key)] == key]
    for child in sorted(children, key=lambda k: -paths[k]):
        if paths[child] >= least and len(child) <= depth:
            print(f"{'  ' * (len(child) - 1)}{paths[child]:6d} {child[-1]}")
            show(paths, child, depth, least)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("raw", help="py-spy record --format raw output")
    parser.add_argument("--root", default="GcDataset.__iter__")
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--min", type=int, default=20, dest="least")
    args = parser.parse_args()
    paths = tree(args.raw, args.root)
    print(f"{paths[(args.root,)]:6d} {args.root}")
    show(paths, (args.root,), args.depth, args.least)


if __name__ == "__main__":
    main()
