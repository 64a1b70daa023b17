# SPDX-License-Identifier: Apache-2.0
"""The end-to-end demo behind ``energon-pack demo``: real text, packed, trained on, resumed.

Offline on a CPU: standard-library text (:mod:`energon_pack_tools._texts`) -> a byte-level BPE
tokenizer -> an energon ``TextSample`` dataset -> ``LLMPackingTaskEncoder`` (carry-over,
``overlong="split"``) -> a tiny Llama trained through ``batch.hf_kwargs`` -> the loader saved
half-way and restored, which must give the same batches. The report compares fill with naive
padding (one document per row). See docs/quickstart.md.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from energon_pack_tools._texts import stdlib_documents, write_corpus

__all__ = [
    "DemoConfig",
    "DemoReport",
    "compare_continuation",
    "naive_padding_fill",
    "run_demo",
]


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What the demo builds and runs.

    Attributes:
        out: Directory for the tokenizer, dataset and loader state (``None``: a temporary
            directory, removed at the end).
        steps: Training steps (batches); the loader state is saved after ``steps // 2``.
        pack_size: Tokens per pack (row).
        buffer_size: energon ``packing_buffer_size`` (samples).
        batch_size: Packs per batch.
        documents: Number of standard-library documents to use.
        vocab_size: BPE vocabulary size.
        seed: Seed of the model initialisation and of energon's shuffle.
        progress: Show tqdm progress bars (on stderr).
    """

    out: Path | None = None
    steps: int = 40
    pack_size: int = 512
    buffer_size: int = 64
    batch_size: int = 4
    documents: int = 2000
    vocab_size: int = 2048
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise ValueError(f"steps={self.steps} must be >= 2 (the state is saved half-way).")
        for name in ("pack_size", "buffer_size", "batch_size", "documents"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1.")
        if self.pack_size < 16:
            raise ValueError(f"pack_size={self.pack_size} is too small for the demo; use >= 16.")


@dataclass(frozen=True, kw_only=True)
class DemoReport:
    """Figures of one demo run (see :meth:`lines` for the printed report)."""

    config: DemoConfig
    out: Path
    documents: int
    corpus_tokens: int
    naive_fill: float  #: each document alone in a row of pack_size (over-long ones split)
    packed_fill: float  #: real tokens / pack slots of the packs trained on
    documents_per_pack: float
    samples_read: int  #: documents the training loader read (with repeats), buffered included
    truncated: int
    split: int
    split_pieces: int
    dropped: int
    packs: int
    loss_first: float
    loss_last: float
    train_tokens_per_s: float
    loader_first_batch_s: float  #: start-up: reading-buffer fill, shards opened
    loader_ms_per_pack: float  #: steady state, after the first batch
    resume_checked: int  #: batches compared after the restore
    resume_ok: bool
    resume_detail: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """The resume check passed."""
        return self.resume_ok

    def lines(self) -> list[str]:
        """The report, one line per figure."""
        c = self.config
        rows_ratio = self.packed_fill / self.naive_fill if self.naive_fill else float("nan")
        verdict = "PASS" if self.resume_ok else "FAIL"
        detail = f": {self.resume_detail}" if self.resume_detail else ""
        return [
            f"energon-pack demo: {self.documents} standard-library documents "
            f"({self.corpus_tokens:,} tokens), BPE vocab {c.vocab_size}, pack size {c.pack_size}, "
            f"buffer {c.buffer_size}, carry-over on",
            f"  fill            {self.packed_fill:.1%} packed vs {self.naive_fill:.1%} naive "
            f"padding (one document per row): {rows_ratio:.1f}x fewer rows",
            f"  pieces/pack     {self.documents_per_pack:.2f} over {self.packs} packs, from "
            f"{self.samples_read:,} documents read ({self.samples_read / self.documents:.2f} "
            f"epochs of {self.documents:,}: training repeats the dataset; counts are per read)",
            f"  over-long       split {self.split} (into {self.split_pieces} pieces), "
            f"truncated {self.truncated}, dropped {self.dropped}",
            f"  training        {c.steps} steps x {c.batch_size} packs, loss "
            f"{self.loss_first:.2f} -> {self.loss_last:.2f} (last-5 mean), "
            f"{self.train_tokens_per_s:,.0f} real tokens/s",
            f"  loader          first batch {self.loader_first_batch_s:.2f} s, then "
            f"{self.loader_ms_per_pack:.1f} ms/pack",
            f"  resume          {verdict}: {self.resume_checked} batches after the saved state "
            f"{'identical (keys and tokens)' if self.resume_ok else 'differ'}{detail}",
            "  phases          "
            + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.timings.items()),
            f"  files           {self.out}"
            + (
                ": corpus.jsonl, tokenizer/, dataset/, loader_state.pt"
                if c.out is not None
                else " (temporary, removed; pass --out DIR to keep)"
            ),
        ]


def naive_padding_fill(lengths: list[int], pack_size: int) -> float:
    """Fill when each document gets its own row(s) of ``pack_size``: ``[100, 600]`` at 512 ->
    700 tokens in 3 rows -> 700 / 1536 = 45.6%."""
    rows = sum(-(-n // pack_size) for n in lengths if n > 0)
    return sum(lengths) / (rows * pack_size) if rows else 0.0


def _progress(enabled: bool) -> Callable[..., Any]:
    from tqdm import tqdm

    def bar(iterable: Any = None, **kwargs: Any) -> Any:
        return tqdm(iterable, disable=not enabled, file=sys.stderr, leave=False, **kwargs)

    return bar


def _make_loader(dataset: Path, tokenizer: Path, config: DemoConfig) -> tuple[Any, Any]:
    from energon_pack.algorithms import CarryOver
    from energon_pack.task_encoders import LLMPackingTaskEncoder
    from energon_pack.training import make_loader

    encoder = LLMPackingTaskEncoder(
        str(tokenizer),
        pack_size=config.pack_size,
        overlong="split",
        carry_over=CarryOver(),
        log_every=0,
    )
    loader = make_loader(
        dataset,
        encoder,
        packing_buffer_size=config.buffer_size,
        batch_size=config.batch_size,
        repeat=True,
        shuffle_buffer_size=config.buffer_size,
        seed_offset=config.seed,
    )
    return encoder, loader


#: Written into ``--out`` so that a rerun may replace what an earlier demo wrote there.
MARKER = ".energon-pack-demo"


def _claim_output_dir(out: Path) -> None:
    """Create ``out``; clear an earlier demo's files there, refuse anything else."""
    ours = ("corpus.jsonl", "dataset", "tokenizer", "loader_state.pt")
    found = [name for name in ours if (out / name).exists()]
    if found:
        if not (out / MARKER).exists():
            raise ValueError(
                f"{out} already holds {', '.join(found)}, not written by the demo; "
                "pass a new or empty --out directory."
            )
        for name in ours:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by energon-pack demo; safe to delete\n")


def compare_continuation(
    reference: list[tuple[list[str], Any]], resumed: Iterator[Any]
) -> tuple[int, str]:
    """Compare the batches of ``resumed`` with ``reference`` (``(keys, tokens)`` per batch).

    Returns ``(len(reference), "")`` when every batch matches, else ``(index of the first
    mismatch, what differs)``.
    """
    import torch

    for i, (keys, tokens) in enumerate(reference):
        batch = next(resumed, None)
        if batch is None:
            return i, f"batch {i}: the restored loader ended early"
        if list(batch.__key__) != keys:
            return i, f"batch {i}: keys {list(batch.__key__)[:2]}... != {keys[:2]}..."
        if not torch.equal(batch.tokens, tokens):
            return i, f"batch {i}: same keys but different tokens"
    return len(reference), ""


@dataclass
class _Corpus:
    """Phases 1-3: the documents, their encoded lengths, the tokenizer and the dataset."""

    texts: list[str]
    lengths: list[int]  #: BOS + text + EOS, as the encoder builds each document
    vocab_size: int
    tokenizer_dir: Path
    dataset: Path


@dataclass
class _Training:
    """Phase 4: what the training loop measured, and the batches after the saved state."""

    stats: Any
    losses: list[float]
    reference: list[tuple[list[str], Any]]
    real_tokens: int
    loader_s: float
    model_s: float
    first_batch_s: float
    state_file: Path


def _build_corpus(config: DemoConfig, out: Path, echo: Callable[[str], None]) -> _Corpus:
    from transformers import AutoTokenizer

    from energon_pack_tools._datasets import make_text_dataset
    from energon_pack_tools._tokenizers import train_bpe_tokenizer

    echo(f"[1/5] reading standard-library sources ({config.documents} documents)")
    texts = stdlib_documents(config.documents)
    write_corpus(out / "corpus.jsonl", texts)
    echo(f"[2/5] training a byte-level BPE tokenizer (vocab {config.vocab_size})")
    tok_dir = train_bpe_tokenizer(out / "tokenizer", texts, vocab_size=config.vocab_size)
    tokenizer = AutoTokenizer.from_pretrained(
        str(tok_dir), local_files_only=True, trust_remote_code=False
    )
    ids = tokenizer(texts, add_special_tokens=False, verbose=False).input_ids
    echo("[3/5] writing an energon TextSample dataset (tar shards + energon prepare)")
    dataset = make_text_dataset(out / "dataset", texts, samples_per_shard=500)
    return _Corpus(
        texts=texts,
        lengths=[len(doc) + 2 for doc in ids],
        vocab_size=len(tokenizer),
        tokenizer_dir=tok_dir,
        dataset=dataset,
    )


def _train(config: DemoConfig, corpus: _Corpus, out: Path, bar: Callable[..., Any]) -> _Training:
    """Train on packed batches; save the loader state half-way and keep what follows it."""
    import torch

    from energon_pack_tools._models import tiny_causal_lm

    torch.manual_seed(config.seed)
    model = tiny_causal_lm(
        corpus.vocab_size, seed=config.seed, max_position_embeddings=config.pack_size
    ).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    encoder, loader = _make_loader(corpus.dataset, corpus.tokenizer_dir, config)
    save_at = config.steps // 2
    run = _Training(encoder.stats, [], [], 0, 0.0, 0.0, 0.0, out / "loader_state.pt")
    it = iter(loader)
    for step in bar(range(config.steps), desc="train", unit="step"):
        if step == save_at:
            torch.save(loader.save_state_rank(), run.state_file)
        t = time.perf_counter()
        batch = next(it)
        run.loader_s += time.perf_counter() - t
        if step == 0:
            run.first_batch_s = run.loader_s
        if step >= save_at:
            run.reference.append((list(batch.__key__), batch.tokens.clone()))
        t = time.perf_counter()
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        run.model_s += time.perf_counter() - t
        run.losses.append(float(loss.detach()))
        run.real_tokens += int(batch.cu_seqlens[-1])
    return run


def _check_resume(
    config: DemoConfig, corpus: _Corpus, run: _Training, bar: Callable[..., Any]
) -> tuple[int, str]:
    """Restore a fresh loader from the saved file and compare its batches with the reference."""
    import torch

    _, fresh = _make_loader(corpus.dataset, corpus.tokenizer_dir, config)
    fresh.restore_state_rank(torch.load(run.state_file, weights_only=False))
    resumed = bar(fresh, desc="resume", unit="batch", total=len(run.reference))
    return compare_continuation(run.reference, iter(resumed))


def _report(
    config: DemoConfig,
    out: Path,
    corpus: _Corpus,
    run: _Training,
    resume: tuple[int, str],
    timings: dict[str, float],
) -> DemoReport:
    stats, packs = run.stats, config.steps * config.batch_size
    checked, detail = resume
    return DemoReport(
        config=config,
        out=out,
        documents=len(corpus.texts),
        corpus_tokens=sum(corpus.lengths),
        naive_fill=naive_padding_fill(corpus.lengths, config.pack_size),
        packed_fill=stats.fill,
        documents_per_pack=stats.documents_per_pack,
        samples_read=stats.samples,
        truncated=stats.truncated_overlong,
        split=stats.split_overlong,
        split_pieces=stats.split_pieces,
        dropped=stats.dropped,
        packs=stats.packs,
        loss_first=run.losses[0],
        loss_last=sum(run.losses[-5:]) / len(run.losses[-5:]),
        train_tokens_per_s=run.real_tokens / (run.loader_s + run.model_s),
        loader_first_batch_s=run.first_batch_s,
        loader_ms_per_pack=1e3 * (run.loader_s - run.first_batch_s) / (packs - config.batch_size),
        resume_checked=checked,
        resume_ok=not detail and checked == len(run.reference),
        resume_detail=detail,
        timings=timings,
    )


def run_demo(config: DemoConfig, *, echo: Callable[[str], None] = print) -> DemoReport:
    """Run the demo's phases (see the module docstring) and return its report."""
    import torch

    bar = _progress(config.progress)
    threads = torch.get_num_threads()
    timings: dict[str, float] = {}
    out = Path(config.out) if config.out is not None else Path(tempfile.mkdtemp(prefix="ep-demo-"))
    _claim_output_dir(out)
    try:
        t0 = time.perf_counter()
        corpus = _build_corpus(config, out, echo)
        timings["corpus"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        echo(f"[4/5] training a tiny Llama for {config.steps} steps on packed batches")
        # One intra-op thread: the loader runs in this process too (num_workers=0).
        torch.set_num_threads(1)
        run = _train(config, corpus, out, bar)
        timings["train"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        echo(
            f"[5/5] restoring a fresh loader from {run.state_file.name}, comparing the continuation"
        )
        resume = _check_resume(config, corpus, run, bar)
        timings["resume"] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
        if config.out is None:
            shutil.rmtree(out, ignore_errors=True)
    return _report(config, out, corpus, run, resume, timings)
