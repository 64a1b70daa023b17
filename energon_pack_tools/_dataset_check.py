# SPDX-License-Identifier: Apache-2.0
"""Check an energon webdataset's shards the way energon will read them (``energon-pack check``).

Per shard: it opens and walks every tar member (a 0-byte or truncated tar is named), checks that
each member name is UTF-8 text without control characters (``energon prepare`` dies on one
that is not), groups adjacent members by key as energon does, and reports a member repeated in
one sample (energon keeps the last copy: a sample lost silently), a key used by two samples of
the shard, and a sample count that differs from ``.nv-meta/.info.json`` (the shard changed after
``energon prepare``). A directory of tar shards not yet prepared is checked too::

    report = check_shards("data")
    report.problems  # ['data/shard_000001.tar: damaged (unexpected end of data at member ...']
"""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from energon_pack_tools._datasets import check_dataset, member_name_problem

__all__ = ["ShardCheck", "check_shards"]

#: How energon splits a member name into key and extension (flavors/webdataset/config.py).
_SPLIT = r"^((?:.*/|)[^.]+)[.]([^/]*)$"


@dataclass
class ShardCheck:
    """What :func:`check_shards` found: counts, and one line per problem (shard, member, fix)."""

    path: Path  #: the dataset directory
    prepared: bool  #: whether ``.nv-meta/.info.json`` lists the shards
    shards: int = 0  #: shards checked
    samples: int = 0  #: samples found (adjacent members sharing a key)
    problems: list[str] = field(default_factory=list)  #: one line each, naming shard and fix

    @property
    def ok(self) -> bool:
        return not self.problems


def _shard_list(path: Path) -> tuple[dict[str, int] | None, list[str]]:
    """``(sample counts from .info.json or None, shard names)``."""
    info = path / ".nv-meta" / ".info.json"
    if info.is_file():
        counts = json.loads(info.read_text()).get("shard_counts", {})
        return counts, list(counts)
    if path.is_dir():
        return None, sorted(p.relative_to(path).as_posix() for p in path.rglob("*.tar"))
    return None, []


def _walk(shard: Path) -> tuple[list[str], str | None]:
    """Member names of ``shard`` in order (file members only), and a read problem if any."""
    if shard.stat().st_size == 0:
        return [], "damaged: the file is empty (0 bytes)"
    names: list[str] = []
    try:
        with tarfile.open(shard, "r:") as tar:
            for member in tar:
                if member.isfile():
                    end = member.offset_data + member.size
                    if end > shard.stat().st_size:
                        return names, f"damaged: member {member.name!r} is cut off (truncated)"
                    names.append(member.name)
    except (tarfile.TarError, EOFError, OSError) as exc:
        after = f" after member {names[-1]!r}" if names else ""
        return names, f"damaged: cannot read it as a tar ({exc}){after}"
    return names, None


def _key_problems(names: list[str]) -> tuple[int, list[str]]:
    """``(samples, problems)`` of one shard's member names, grouped as energon groups them."""
    import re

    split = re.compile(_SPLIT)
    problems: list[str] = []
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        bad = member_name_problem(name)
        if bad is not None:
            problems.append(f"member {name!r}: {bad}")
            continue
        m = split.match(name)
        if m is None or name.split("/")[-1].startswith("__"):
            continue
        key = m.group(1)
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append(name)
    for key, members in groups:
        twice = sorted(n for n, c in Counter(members).items() if c > 1)
        if twice:
            problems.append(
                f"member {twice[0]!r} appears twice in sample {key!r}: energon keeps only the "
                "last copy and loses a sample silently"
            )
    for key, n in Counter(key for key, _ in groups).items():
        if n > 1:
            problems.append(f"key {key!r} is used by {n} samples (keys must be unique)")
    return len(groups), problems


def check_shards(path: Path | str) -> ShardCheck:
    """Check every shard of the webdataset at ``path`` (prepared, or a folder of tar shards).

    Raises:
        ValueError: ``path`` is neither an energon dataset nor a folder holding tar shards
            (as :func:`energon_pack_tools.check_dataset` says, with the fix).
    """
    path = Path(path)
    counts, shards = _shard_list(path)
    if counts is None and not shards:
        check_dataset(path)  # raises with the fix; a prepared JSONL dataset passes
        return ShardCheck(path=path, prepared=True)
    report = ShardCheck(path=path, prepared=counts is not None)
    fix = (
        "re-create the dataset (energon-pack make-dataset from the sources, or rewrite the "
        "shard and re-run `energon prepare`)"
    )
    for name in shards:
        shard = path / name
        report.shards += 1
        if not shard.is_file():
            report.problems.append(f"{shard}: missing (listed in .nv-meta/.info.json); {fix}")
            continue
        names, read_problem = _walk(shard)
        samples, problems = _key_problems(names)
        report.samples += samples
        if read_problem is not None:
            problems.append(read_problem)
        elif counts is not None and counts[name] != samples:
            problems.append(
                f"holds {samples} samples but .nv-meta/.info.json says {counts[name]}: it "
                "changed after `energon prepare`"
            )
        report.problems.extend(f"{shard}: {p}; {fix}" for p in problems)
    return report
