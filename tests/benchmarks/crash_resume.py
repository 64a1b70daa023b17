# SPDX-License-Identifier: Apache-2.0
"""Crash-resume stress: a training-loop process killed with SIGKILL, restarted from its last save.

Each trial runs a consumer process (this file with ``--consume DIR``) over a savable loader
(shuffle buffer, packing buffer, split over-long documents; ``repeat=False``: one epoch, or
``repeat=True``: 60 batches, across an epoch boundary). The consumer logs
every item it receives (member keys, restore key, counts) with fsync and saves the loader state
every ``save_every`` items atomically (``state.tmp`` written in two halves with a pause between,
then renamed to ``state.pt``). The parent kills it with SIGKILL, up to ``--kills`` times per
trial, at one of three moments: after a random number of items, right after a save, or in the
middle of a save; then restarts it, and it restores the last ``state.pt``. The consumer is told
the moment (``--hold MOMENT:N``), logs that it is there and waits until the kill lands, so that
a fast consumer cannot run past the moment (the loader's workers go on prefetching). A trial
passes when the items the run kept (each life's items up to its last save, then the next life's) equal the
uninterrupted run item for item (member keys and ``__restore_key__``) and the summed
``counts`` are equal. The matrix, cycled by trial index::

    workers      0 | 1 | 2
    carry_over   on | off
    checkpoint   every sample | energon's default (checkpoint_every_sec=60)
    repeat       False | True

Run (niced, in the background; each trial takes a few seconds per life; the consumers import
``energon_pack`` at every restart, so point ``PYTHONPATH`` at a copy that does not change)::

    nice python tests/benchmarks/crash_resume.py --trials 60 --out /tmp/crash

One JSON line per trial goes to ``OUT/trials.jsonl``; the last line printed is the tally. A
failing trial keeps its folder (logs, state) under ``OUT``.

``--blend`` runs every trial on a 1:1 ``blend:`` metadataset of two datasets instead, with
``blend_size="tokens"`` and each dataset in its own packing group (buffers 4 and 12, one with
first-fit), ``repeat=True`` (docs/howto/blends.md)::

    nice python tests/benchmarks/crash_resume.py --trials 12 --blend --out /tmp/crash_blend
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MATRIX = list(
    itertools.product((0, 1, 2), (True, False), ("every_sample", "default"), (False, True))
)
#: Batches a ``repeat=True`` consumer reads (about 1.5 epochs: it crosses an epoch boundary).
REPEAT_BATCHES = 60
NUM_SAMPLES = 150


def make_dataset(root: Path, seed: int) -> Path:
    from energon_pack_tools import make_text_dataset

    rng = random.Random(seed)
    texts = [str(rng.choice([rng.randint(1, 30), rng.randint(1, 90)])) for _ in range(NUM_SAMPLES)]
    return make_text_dataset(root / f"ds{seed}", texts, samples_per_shard=25)


def make_blend(root: Path, seed: int) -> Path:
    """Two datasets (documents of 1..30 and of 20..90 tokens) and a 1:1 ``blend:`` of them, each
    in its own ``packing_group`` (``short``, ``long``)."""
    from energon_pack_tools import make_blend_metadataset, make_text_dataset

    rng = random.Random(seed)
    short = make_text_dataset(
        root / f"short{seed}",
        [str(rng.randint(1, 30)) for _ in range(NUM_SAMPLES)],
        samples_per_shard=25,
    )
    long = make_text_dataset(
        root / f"long{seed}",
        [str(rng.randint(20, 90)) for _ in range(NUM_SAMPLES // 3)],
        samples_per_shard=10,
    )
    return make_blend_metadataset(
        root / f"blend{seed}.yaml", [(short, 1.0), (long, 1.0)], ["short", "long"]
    )


def build_loader(config: dict[str, Any]) -> Any:
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    from energon_pack.algorithms import CarryOver
    from energon_pack.task_encoders import PackingPolicy
    from energon_pack_tools import LengthTextEncoder

    carry = CarryOver() if config["carry_over"] else None
    encoder = LengthTextEncoder(pack_size=64, overlong="split", carry_over=carry)
    if config.get("blend"):
        encoder.blend_size = "tokens"
        encoder.packing_groups = {
            "short": PackingPolicy(buffer_size=12, algorithm="first_fit"),
            "long": PackingPolicy(buffer_size=4),
        }
    workers = config["workers"]
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=7)
    dataset = get_train_dataset(
        config["path"],
        worker_config=worker_config,
        batch_size=2,
        packing_buffer_size=8,
        shuffle_buffer_size=16,
        max_samples_per_sequence=None,
        task_encoder=encoder,
        repeat=config.get("repeat", False),
    )
    cadence = {}
    if config["checkpoint"] == "every_sample":
        cadence = {"checkpoint_every_sec": 0, "checkpoint_every_min_n_samples": 1}
    return get_savable_loader(dataset, **cadence)


def _write_line(log: Any, record: dict[str, Any]) -> None:
    log.write(json.dumps(record) + "\n")
    log.flush()
    os.fsync(log.fileno())


#: How long a consumer waits at its kill moment for the parent's SIGKILL before it goes on.
HOLD_SECONDS = 120


def _hold(hold: tuple[str, int] | None, moment: str, index: int, log: Any) -> None:
    """If the planned ``hold=(moment, n)`` is here (item ``index >= n``): log ``held`` (the
    parent's cue) and wait for the kill."""
    if hold is not None and hold[0] == moment and index >= hold[1]:
        _write_line(log, {"held": moment})
        time.sleep(HOLD_SECONDS)


def _save(
    folder: Path, payload: Any, pause: float, log: Any, index: int, hold: tuple[str, int] | None
) -> None:
    """Write ``state.tmp`` in two halves (a slow disk: kills land mid-save), then rename."""
    import io

    import torch

    _write_line(log, {"saving": index})
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    tmp = folder / "state.tmp"
    with tmp.open("wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        time.sleep(pause)
        _hold(hold, "mid_save", index - 1, log)
        f.write(data[len(data) // 2 :])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / "state.pt")
    _write_line(log, {"saved": index})
    _hold(hold, "after_save", index - 1, log)


def consume(folder: Path, hold: tuple[str, int] | None = None) -> None:
    """The training loop: restore the last state if any, log every item, save every N items;
    wait at ``hold`` (the moment the parent kills it at) until the kill lands."""
    import torch

    from energon_pack.testing import member_keys

    config = json.loads((folder / "config.json").read_text())
    loader = build_loader(config)
    start = 0
    if (folder / "state.pt").exists():
        saved = torch.load(folder / "state.pt", weights_only=False)
        loader.restore_state_rank(saved["loader"])
        start = saved["consumed"]
    with (folder / "log.jsonl").open("a") as log:
        _write_line(log, {"life": start})
        for index, batch in enumerate(loader, start=start):
            if config.get("repeat") and index >= REPEAT_BATCHES:
                break
            counts = {k: getattr(batch.counts, k) for k in ("samples", "documents", "packs")}
            record = {"i": index, "keys": member_keys(batch), "rk": repr(batch.__restore_key__)}
            _write_line(log, {**record, "counts": counts})
            _hold(hold, "item", index, log)
            if (index + 1) % config["save_every"] == 0:
                state = {"loader": loader.save_state_rank(), "consumed": index + 1}
                _save(folder, state, config["save_pause"], log, index + 1, hold)
        _write_line(log, {"done": True})
    os._exit(0)  # do not wait for energon's worker shutdown at interpreter exit


def kept_items(log_path: Path) -> list[dict[str, Any]]:
    """The items the run kept: each life restarts at its ``consumed`` and overrides the rest."""
    kept: dict[int, dict[str, Any]] = {}
    for line in log_path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the kill
            continue
        if "life" in record:
            kept = {i: r for i, r in kept.items() if i < record["life"]}
        elif "i" in record:
            kept[record["i"]] = record
    return [kept[i] for i in sorted(kept)]


def _run_life(folder: Path, kill: tuple[str, int] | None, timeout: float = 180) -> bool:
    """One consumer process; ``kill=(moment, n)`` kills it with SIGKILL. True if it finished."""
    log = folder / "log.jsonl"
    before = log.read_text().count("\n") if log.exists() else 0
    hold = [] if kill is None else ["--hold", f"{kill[0]}:{kill[1]}"]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--consume", str(folder), *hold],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "stderr.txt").open("a"),
    )
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if kill is not None and _held(log, before):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return False
            time.sleep(0.005)
        if proc.poll() is None:
            raise TimeoutError(f"consumer in {folder} did not finish in {timeout} s")
        if proc.returncode != 0:  # a crash of its own (not a kill) fails the trial
            last = (folder / "stderr.txt").read_text().strip().splitlines()[-1:]
            raise RuntimeError(f"consumer exited with {proc.returncode}: {last}")
        return True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the killed consumer's dataloader workers
        except ProcessLookupError:
            pass


def _held(log: Path, before: int) -> bool:
    """Whether this life's consumer logged that it waits at its kill moment."""
    lines = log.read_text().splitlines()[before:] if log.exists() else []
    return any(line.startswith('{"held"') for line in lines)


def run_trial(
    index: int,
    paths: list[Path],
    out: Path,
    kills: int = 3,
    *,
    moments: list[tuple[str, int]] | None = None,
    config: dict[str, Any] | None = None,
    blend: bool = False,
) -> dict[str, Any]:
    """Trial ``index`` (matrix cell ``index % 24``, random kills); ``moments`` and ``config``
    override the kills (item ``n < 0``: ``-n`` items before the end) and the settings."""
    workers, carry, checkpoint, repeat = MATRIX[index % len(MATRIX)]
    rng = random.Random(index)
    dataset = rng.randrange(len(paths))
    config = {
        "path": str(paths[dataset]),
        "workers": workers,
        "carry_over": carry,
        "checkpoint": checkpoint,
        "repeat": repeat,
        # at least num_workers items before the first save (energon bug 6, docs/concepts/energon.md)
        "save_every": rng.choice([1, 3, 5] if workers == 0 else [2, 3, 5]),
        "save_pause": 0.05,
        **({"blend": True, "repeat": True} if blend else {}),  # a blend repeats
        **(config or {}),
    }
    reference = _reference(out, config, dataset)
    folder = out / f"trial_{index}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    moments = [(m, n if n >= 0 else len(reference) + n) for m, n in moments or []]
    for _ in range(kills if not moments else 0):
        moment = rng.choice(["item", "item", "after_save", "mid_save"])
        # late in the epoch as often as early: the end of data is where energon replayed
        n = (
            rng.randrange(len(reference))
            if rng.random() < 0.5
            else len(reference) - rng.randint(1, 8)
        )
        moments.append((moment, max(0, n)))
    moments.sort(key=lambda m: m[1])  # each life gets further than the one before
    lives = 0
    for kill in [*moments, None]:
        lives += 1
        if _run_life(folder, kill):
            break
    got = kept_items(folder / "log.jsonl")
    error = _compare(reference, got)
    record = {"trial": index, **config, "kills": moments, "lives": lives, "error": error}
    if error is None:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    return record


def _reference(out: Path, config: dict[str, Any], dataset: int) -> list[dict[str, Any]]:
    """The uninterrupted run of ``config`` (cached per dataset and loader settings)."""
    name = (
        f"ref_{dataset}_w{config['workers']}_c{int(config['carry_over'])}_{config['checkpoint']}"
        f"_r{int(config.get('repeat', False))}{'_blend' if config.get('blend') else ''}"
    )
    folder = out / name
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({**config, "save_every": 10**9}))
        if not _run_life(folder, None):
            raise RuntimeError(f"the reference run in {folder} failed; see stderr.txt there")
        (folder / "done").touch()
    return kept_items(folder / "log.jsonl")


def _compare(reference: list[dict[str, Any]], got: list[dict[str, Any]]) -> str | None:
    if len(got) != len(reference):
        return f"{len(got)} items kept, the uninterrupted run has {len(reference)}"
    for a, b in zip(reference, got):
        for field in ("keys", "rk"):
            if a[field] != b[field]:
                return f"item {a['i']}: {field} {b[field]} != {a[field]}"
    for name in ("samples", "documents", "packs"):
        want = sum(r["counts"][name] for r in reference)
        have = sum(r["counts"][name] for r in got)
        if want != have:
            return f"summed counts.{name}: {have} != {want}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--first-trial", type=int, default=0)
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per trial")
    parser.add_argument("--out", type=Path, default=Path("crash_resume_out"))
    parser.add_argument("--blend", action="store_true", help="a blend of packing groups")
    parser.add_argument("--consume", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--hold", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consume:
        moment, _, n = (args.hold or "").partition(":")
        consume(args.consume, (moment, int(n)) if args.hold else None)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        make = make_blend if args.blend else make_dataset
        paths = [make(Path(tmp), seed) for seed in range(3)]
        with (args.out / "trials.jsonl").open("a") as log:
            for index in range(args.first_trial, args.first_trial + args.trials):
                try:
                    record = run_trial(index, paths, args.out, args.kills, blend=args.blend)
                except (TimeoutError, RuntimeError) as exc:  # a hang or a crash is a failure
                    record = {"trial": index, "error": f"{type(exc).__name__}: {exc}"}
                failures += record["error"] is not None
                log.write(json.dumps(record) + "\n")
                log.flush()
                if record["error"]:
                    print(f"trial {index} FAILED: {record['error']}", flush=True)
    minutes = (time.perf_counter() - start) / 60
    print(
        f"{args.trials} trials, {failures} failures, {minutes:.1f} min (details under {args.out})"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
