# SPDX-License-Identifier: Apache-2.0
"""The GPU proof (issues 30 and 31): every kernel route packed vs alone, and training speed.

``python tests/benchmarks/gpu_check.py`` on a CUDA machine (torch, triton, transformers; no
internet needed) writes ``docs/benchmarks/gpu.md`` (``--no-write``: print only); the page says
how to carry the wheels and what each column means. ``--cpu-dry-run`` runs the same code on CPU
with tiny shapes in float32 in a few seconds, and never writes the page (CI runs it).

1. Routes: per kernel route and dtype, a tiny model with real head shapes (random weights) runs
   rows built by ``pack_documents`` / ``collate_packs`` through ``batch.hf_kwargs(impl,
   config=model)``; each document's logits are compared with the model on it alone, same dtype.
2. Throughput: a Llama of a few hundred million parameters (random weights, bf16) trains on the
   same documents (the shipped manpages lengths sample, capped at the pack size) packed by
   ``pack_lengths`` vs padded to each batch's longest document, at most as many real tokens
   per step either way; forward + backward + AdamW, timed after warmup; with flash-attn (or
   torch's varlen_attn) and with sdpa.

A time guard stops starting new measurements after ``--budget`` seconds (default 420).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import energon_pack  # noqa: E402
from energon_pack.algorithms import PackingSpec, pack_lengths  # noqa: E402
from energon_pack.attention import PackingNotExactError, cpu_route  # noqa: E402
from energon_pack.samples import EncodedSample, collate_packs, pack_documents  # noqa: E402

HERE = Path(__file__).resolve().parent
PAGE = HERE.parents[1] / "docs" / "benchmarks" / "gpu.md"
LENGTHS = HERE / "data" / "manpages-sample.lengths.txt"
#: PASS: max |logit diff| packed vs alone <= this x max(1, max |logit| alone). float32: rounding;
#: bfloat16 (eps 2**-8): about 5 ulps, since kernels tile a packed row and a lone document
#: differently (both runs in bfloat16).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16"}
#: The page's status block, which the first GPU run rewrites.
STATUS = ("<!-- status: rewritten by gpu_check.py -->", "<!-- /status -->")
CLASSES = {"llama": "LlamaForCausalLM", "qwen3_next": "Qwen3NextForCausalLM",
           "qwen3_5": "Qwen3_5ForCausalLM"}  # fmt: skip


@dataclass(frozen=True)
class Shapes:
    """What differs between the GPU run and the CPU dry run."""

    device: str
    dtypes: tuple[torch.dtype, ...]
    rows: list[list[int]]  # route check: document lengths per row
    pack_size: int
    llama: dict  # route models (real head dims on the GPU)
    hybrid: dict
    train: dict  # throughput model
    train_pack: int
    train_rows: int  # packed rows per step
    shrink: int  # document lengths divided by this (the dry run's rows are short)
    warmup: int
    steps: int


_GQA = dict(num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
GPU = Shapes(
    device="cuda", dtypes=(torch.float32, torch.bfloat16),
    rows=[[200, 133, 179], [347, 1, 90]],  # across flex's 128-blocks, a 1-token one, tail pad
    pack_size=512,
    llama=dict(vocab_size=4096, hidden_size=512, intermediate_size=1024, head_dim=128, **_GQA),
    hybrid=dict(vocab_size=4096, hidden_size=512, intermediate_size=1024, head_dim=128,
                linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=2,
                linear_num_value_heads=4, **_GQA),
    train=dict(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=16,
               num_attention_heads=8, num_key_value_heads=8, head_dim=128),  # ~335M params
    train_pack=2048, train_rows=4, shrink=1, warmup=3, steps=40,
)  # fmt: skip
CPU = Shapes(
    device="cpu", dtypes=(torch.float32,), rows=[[20, 12], [7, 3]], pack_size=34,
    llama=dict(vocab_size=97, hidden_size=64, intermediate_size=128, head_dim=16, **_GQA),
    hybrid=dict(vocab_size=97, hidden_size=32, intermediate_size=64, head_dim=8,
                linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                linear_num_value_heads=4, **_GQA),
    train=dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=2, head_dim=16),
    train_pack=256, train_rows=2, shrink=16, warmup=1, steps=3,
)  # fmt: skip


class Skip(Exception):  # noqa: N818 - a verdict, not an error
    """A route that cannot run here; the message says why."""


@dataclass(frozen=True)
class Route:
    """One kernel route: a label, its model ("llama", "qwen3_next", "qwen3_5"), the
    ``attn_implementation``, and the kernel (sdpa, eager, flex, flash_attn, torch_varlen, linear)."""

    name: str
    model: str
    impl: str
    kernel: str


ROUTES = [  # FlexAttention last: its compiles take longest, and the time guard may cut it
    Route("SDPA, bool mask", "llama", "sdpa", "sdpa"),
    Route("eager, additive mask", "llama", "eager", "eager"),
    Route("flash-attn varlen", "llama", "flash_attention_2", "flash_attn"),
    Route("torch varlen_attn", "llama", "flash_attention_2", "torch_varlen"),
    Route("Qwen3-Next: delta rule + conv1d", "qwen3_next", "sdpa", "linear"),
    Route("Qwen3.5 text: delta rule + conv1d", "qwen3_5", "sdpa", "linear"),
    Route("FlexAttention BlockMask", "llama", "flex_attention", "flex"),
]


@dataclass
class Result:
    """One row of the routes table: PASS, FAIL, INCONCLUSIVE, SKIPPED (why) or ERROR (what)."""

    route: str
    dtype: str
    verdict: str
    kernel: str = ""
    diff: float = float("nan")
    leak: float = float("nan")
    bound: float = float("nan")


# -- kernels: which ran, and the contexts that select them --------------------------------------


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def has_torch_varlen() -> bool:
    return importlib.util.find_spec("torch.nn.attention.varlen") is not None


def importable(module: str) -> bool:
    """Whether ``module`` imports (a wheel built for another torch fails here, not mid-run)."""
    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - any failure means the route cannot run
        return False
    return True


def linear_kernels(model_class: type) -> str:
    """What ``model_class``'s linear-attention and conv layers run: transformers binds fla's
    and causal-conv1d's kernels at import time where they import (:class:`Skip` otherwise)."""
    missing = [d for m, d in (("fla", "fla"), ("causal_conv1d", "causal-conv1d"))
               if not importable(m)]  # fmt: skip
    if missing:
        raise Skip(
            f"{' and '.join(missing)} not importable (transformers' fallback refuses borders)"
        )
    module, ran = sys.modules[model_class.__module__], []
    for name in ("causal_conv1d_fn", "torch_chunk_gated_delta_rule"):
        bound = inspect.getclosurevars(getattr(module, name)).nonlocals.get("implementation")
        ran.append(f"{getattr(bound, '__module__', '?')}.{getattr(bound, '__name__', name)}")
    if any(r.startswith("transformers") for r in ran):
        raise Skip(f"transformers bound its PyTorch fallback: {', '.join(ran)}")
    return " + ".join(ran)


@contextlib.contextmanager
def torch_varlen(model_class: type) -> Iterator[None]:
    """transformers' flash route with ``torch.nn.attention.varlen.varlen_attn`` as its kernel:
    the package's CPU route of flash (``cpu_route``), its reference kernel swapped for torch's."""
    from torch.nn.attention.varlen import varlen_attn

    def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
               deterministic=False, s_aux=None):  # fmt: skip
        if dropout_p or softcap or s_aux is not None:
            raise NotImplementedError("torch varlen_attn: no dropout, softcap or sinks")
        window = (window_size[0], 0 if causal else window_size[1])
        return varlen_attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           scale=softmax_scale, window_size=window,
                           enable_gqa=q.shape[1] != k.shape[1])  # fmt: skip

    def dense(q, k, v, **kw):  # (B, S, H, D): each row one sequence
        b, s = q.shape[:2]
        cu = torch.arange(b + 1, dtype=torch.int32, device=q.device) * s
        flat = (x.flatten(0, 1) for x in (q, k, v))
        return varlen(*flat, cu, cu, s, s, **kw).view(b, s, q.shape[2], -1)

    fa = importlib.import_module("transformers.modeling_flash_attention_utils")
    names = ("_flash_fn", "_flash_varlen_fn", "_process_flash_kwargs_fn")
    with cpu_route("flash_attention_2", model_class):
        saved = {n: getattr(fa, n) for n in names}
        for n, value in zip(names, (dense, varlen, fa._lazy_define_process_function(varlen))):
            setattr(fa, n, value)
        try:
            yield
        finally:
            for n, value in saved.items():
                setattr(fa, n, value)


def kernel_route(route: Route, dtype: torch.dtype, model_class: type, cpu: bool):
    """(context manager, the kernel that runs) for ``route``; :class:`Skip` where it can't."""
    if route.kernel in ("sdpa", "eager"):
        return contextlib.nullcontext(), f"torch {route.kernel}"
    if route.kernel == "flex":
        if cpu:
            return cpu_route(route.impl, model_class), "flex_attention uncompiled (CPU)"
        return contextlib.nullcontext(), "flex_attention compiled by transformers"
    if route.kernel == "flash_attn":
        if cpu:
            return cpu_route(route.impl, model_class), "PyTorch reference kernel (CPU)"
        if not importable("flash_attn"):
            raise Skip("flash_attn not importable")
        if dtype == torch.float32:
            raise Skip("flash-attn takes fp16/bf16 only")
        return contextlib.nullcontext(), f"flash_attn {_version('flash-attn')}"
    if route.kernel == "torch_varlen":
        if cpu or not has_torch_varlen():
            raise Skip("needs CUDA" if cpu else f"no varlen_attn in torch {torch.__version__}")
        if dtype == torch.float32:
            raise Skip("varlen_attn takes fp16/bf16 only")
        return torch_varlen(model_class), "torch.nn.attention.varlen.varlen_attn"
    if cpu:
        return cpu_route(route.impl, model_class), "PyTorch references of the kernels (CPU)"
    return contextlib.nullcontext(), linear_kernels(model_class)


# -- the routes: packed vs alone ----------------------------------------------------------------


def build(route: Route, shapes: Shapes, dtype: torch.dtype) -> torch.nn.Module:
    """The route's tiny model, seeded random weights, eval mode, on the device."""
    if route.model == "llama":
        config = transformers.LlamaConfig(**shapes.llama)
    elif route.model == "qwen3_next":
        config = transformers.Qwen3NextConfig(
            **shapes.hybrid, layer_types=["linear_attention", "full_attention"], num_experts=2,
            num_experts_per_tok=1, moe_intermediate_size=64, shared_expert_intermediate_size=64,
        )  # fmt: skip
    else:
        layer_types = ["linear_attention", "full_attention"]
        config = transformers.Qwen3_5TextConfig(**shapes.hybrid, layer_types=layer_types)
    torch.manual_seed(0)
    cls = getattr(transformers, CLASSES[route.model])
    model = cls._from_config(config, attn_implementation=route.impl, dtype=dtype)
    return model.to(shapes.device).eval()


def pack(rows: list[list[int]], vocab: int, gen: torch.Generator, pad_to: int):
    """Random documents of the given lengths per row, packed by ``pack_documents`` and collated
    by ``collate_packs``: (the batch, the documents' tokens per row)."""
    docs = [[torch.randint(3, vocab, (n,), generator=gen) for n in row] for row in rows]
    packs = [
        pack_documents([
            EncodedSample(__key__=f"r{r}d{i}", __restore_key__=(), tokens=t,
                          loss_mask=torch.ones(len(t), dtype=torch.bool))
            for i, t in enumerate(row)
        ])
        for r, row in enumerate(docs)
    ]  # fmt: skip
    return collate_packs(packs, pad_to=pad_to), docs


@torch.no_grad()
def packed_vs_alone(model, impl: str, batch, docs, dtype) -> tuple[float, float, float]:
    """(max |logit diff| packed vs alone, the same for plain rows without packing metadata
    (what a leak gives), the logit scale max(1, max |logit| alone))."""
    kwargs = batch.hf_kwargs(impl, config=model, with_labels=False, mask_dtype=dtype)
    packed = model(**kwargs).logits.view(len(docs), batch.tokens.shape[1], -1).float()
    plain = model(input_ids=batch.tokens).logits.float()
    diff = leak = scale = 0.0
    for r, row in enumerate(docs):
        start = 0
        for tokens, slot in zip(row, batch.doc_lengths_padded[r]):
            alone = model(input_ids=tokens.view(1, -1).to(batch.tokens.device)).logits[0].float()
            span = slice(start, start + len(tokens))
            diff = max(diff, float((packed[r, span] - alone).abs().max()))
            leak = max(leak, float((plain[r, span] - alone).abs().max()))
            scale = max(scale, float(alone.abs().max()))
            start += slot
    return diff, leak, max(1.0, scale)


def check_route(route: Route, dtype: torch.dtype, shapes: Shapes) -> Result:
    """One cell: PASS (within the bound, and a leak would exceed it), FAIL, or why not."""
    kernel = ""
    try:
        cls = getattr(transformers, CLASSES[route.model])
        context, kernel = kernel_route(route, dtype, cls, shapes.device == "cpu")
        with context:
            model = build(route, shapes, dtype)
            gen = torch.Generator().manual_seed(1)
            batch, docs = pack(shapes.rows, model.config.vocab_size, gen, shapes.pack_size)
            diff, leak, scale = packed_vs_alone(
                model, route.impl, batch.to(shapes.device), docs, dtype
            )
    except Skip as why:
        return Result(route.name, NAMES[dtype], f"SKIPPED ({why})")
    except PackingNotExactError as err:
        return Result(route.name, NAMES[dtype], f"REFUSED ({err.feature})", kernel)
    except Exception as err:  # noqa: BLE001 - a kernel that cannot run is a cell, not a crash
        what = " ".join(f"{type(err).__name__}: {err}".split()).replace("|", "/")[:100]
        return Result(route.name, NAMES[dtype], f"ERROR ({what})")
    bound = TOLERANCE[dtype] * scale
    verdict = "PASS" if diff <= bound < leak else "FAIL" if diff > bound else "INCONCLUSIVE"
    return Result(route.name, NAMES[dtype], verdict, kernel, diff, leak, bound)


# -- throughput: packed vs padded ---------------------------------------------------------------


@dataclass
class Speed:
    """One layout's run over the documents: its steps (per step: rows of document lengths)."""

    layout: str
    steps: list[list[list[int]]]
    attention: str = ""
    ms_per_step: float = float("nan")
    tokens_per_s: float = float("nan")
    note: str = ""

    def real(self) -> int:
        return sum(n for step in self.steps for row in step for n in row)

    def slots(self, length: int | None) -> int:  # rows x row length (padded: the longest)
        return sum(len(s) * (length or max(map(sum, s))) for s in self.steps)

    def row_pairs(self, length: int | None) -> int:  # sum of row length**2: a mask-blind kernel
        return sum(len(s) * (length or max(map(sum, s))) ** 2 for s in self.steps)


def workload(shapes: Shapes) -> tuple[Speed, Speed]:
    """The first documents of the shipped sample (capped at the pack size) that fill ``warmup +
    steps`` packed steps: packed by ``pack_lengths``, and padded in file order, a step closed
    before it exceeds the packed step's real tokens (or 3x its slots, padding included)."""
    size, rows = shapes.train_pack, shapes.train_rows
    lengths = -(-np.loadtxt(LENGTHS, dtype=np.int64) // shapes.shrink)
    capped = np.minimum(lengths, size)
    count = int(np.searchsorted(np.cumsum(capped), size * rows * (shapes.warmup + shapes.steps)))
    docs = [int(n) for n in capped[: count + 1]]
    bins = [[docs[i] for i in b] for b in pack_lengths(docs, PackingSpec(pack_size=size))]
    packed = [bins[i : i + rows] for i in range(0, len(bins), rows)]
    padded, step = [], []
    for n in docs:
        longest = max([n, *step])
        if step and (sum(step) + n > size * rows or (len(step) + 1) * longest > 3 * size * rows):
            padded.append([[m] for m in step])
            step = []
        step.append(n)
    padded.append([[m] for m in step])
    return Speed("packed", packed), Speed("padded", padded)


def train_batch(step, packed: bool, shapes: Shapes, gen: torch.Generator) -> dict:
    """Kwargs of one step: packed rows through ``batch.hf_kwargs`` (made by the caller, for the
    model), or rows padded to the longest with transformers' own 2-D padding mask."""
    vocab = shapes.train["vocab_size"]
    if packed:
        return pack(step, vocab, gen, shapes.train_pack)[0].to(shapes.device)
    longest = max(row[0] for row in step)
    tokens = torch.zeros(len(step), longest, dtype=torch.int64)
    mask = torch.zeros(len(step), longest, dtype=torch.int64)
    for r, (n,) in enumerate(step):
        tokens[r, :n] = torch.randint(3, vocab, (n,), generator=gen)
        mask[r, :n] = 1
    labels = torch.where(mask.bool(), tokens, -100)
    batch = dict(input_ids=tokens, attention_mask=mask, labels=labels)
    return {k: v.to(shapes.device) for k, v in batch.items()}


def train(model, impl: str, speed: Speed, shapes: Shapes) -> None:
    """Warm up on the largest steps, then time every step: forward, backward, AdamW."""
    cuda = shapes.device == "cuda"
    optim = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=cuda)
    gen = torch.Generator().manual_seed(0)
    packed = speed.layout == "packed"
    batches = [train_batch(s, packed, shapes, gen) for s in speed.steps]
    batches = [b.hf_kwargs(impl, config=model) if packed else b for b in batches]
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step(kwargs: dict) -> None:
        model(**kwargs).loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)

    by_size = sorted(batches, key=lambda kwargs: kwargs["input_ids"].numel())
    for kwargs in by_size[-shapes.warmup :]:
        step(kwargs)
    sync()
    start = time.perf_counter()
    for kwargs in batches:
        step(kwargs)
    sync()
    seconds = time.perf_counter() - start
    speed.ms_per_step = 1e3 * seconds / len(batches)
    speed.tokens_per_s = speed.real() / seconds


def train_routes(cpu: bool) -> list[tuple[str, Callable, str]]:
    """(implementation, context factory, label) of each attention the model trains with:
    flash-attn varlen, else torch's varlen_attn through transformers' flash route; and sdpa
    (dense masks)."""
    routes: list[tuple[str, Callable, str]] = [("sdpa", contextlib.nullcontext, "sdpa")]
    if not cpu and importable("flash_attn"):
        routes.insert(0, ("flash_attention_2", contextlib.nullcontext, "flash-attn varlen"))
    elif not cpu and has_torch_varlen():
        llama = transformers.LlamaForCausalLM
        routes.insert(0, ("flash_attention_2", lambda: torch_varlen(llama), "torch varlen_attn"))
    return routes


def measure_throughput(shapes: Shapes, deadline: float) -> tuple[list[Speed], str]:
    """Packed vs padded on the same documents, per attention; (the runs, the model's line)."""
    dtype = torch.bfloat16 if shapes.device == "cuda" else torch.float32
    config, runs = transformers.LlamaConfig(**shapes.train), []
    for impl, context, label in train_routes(shapes.device == "cpu"):
        with context():
            torch.manual_seed(0)
            with torch.device(shapes.device):
                model = transformers.LlamaForCausalLM._from_config(
                    config, attn_implementation=impl, dtype=dtype
                ).train()
            params = sum(p.numel() for p in model.parameters())
            for speed in workload(shapes):
                speed.attention = label
                runs.append(speed)
                if time.monotonic() > deadline:
                    speed.note = "not run (time guard)"
                    continue
                try:
                    train(model, impl, speed, shapes)
                except torch.OutOfMemoryError:
                    speed.note = "out of memory"
        del model
        if shapes.device == "cuda":
            torch.cuda.empty_cache()
    return runs, f"Llama, {params / 1e6:.3g}M parameters, {NAMES[dtype]}, AdamW"


# -- report -------------------------------------------------------------------------------------


def environment(shapes: Shapes) -> list[str]:
    """Device, versions, and which optional kernels import."""
    device = torch.cuda.get_device_name() if shapes.device == "cuda" else "CPU (dry run)"
    dists = ("flash-attn", "flash-linear-attention", "causal-conv1d", "triton")
    kernels = ", ".join(f"{d} {_version(d) or 'not importable'}" for d in dists)
    varlen = "yes" if has_torch_varlen() else "no"
    return [
        f"- device: {device}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- torch {torch.__version__}, transformers {transformers.__version__}, "
        f"energon-pack {energon_pack.__version__} ({Path(energon_pack.__file__).parent})",
        f"- kernels: {kernels}, torch varlen_attn {varlen}",
    ]


def _num(x: float, fmt: str) -> str:
    return format(x, fmt) if x == x else ""


def routes_table(results: list[Result]) -> list[str]:
    lines = [
        "| route | dtype | verdict | max diff | bound | leak | kernel that ran |",
        "|---" * 7 + "|",
    ]
    for r in results:
        nums = " | ".join(_num(x, ".1e") for x in (r.diff, r.bound, r.leak))
        lines.append(f"| {r.route} | {r.dtype} | {r.verdict} | {nums} | {r.kernel} |")
    return lines


def speed_table(runs: list[Speed], model: str, size: int) -> list[str]:
    """The runs (packed, padded per attention) and the packed / padded ratios."""
    lines = [f"Model: {model}; pack size {size}.", ""]
    lines += ["| attention | layout | steps | real tokens | fill | ms / step | real tokens/s | "
              "sum of row length² |", "|---" * 8 + "|"]  # fmt: skip
    for s in runs:
        length = size if s.layout == "packed" else None
        rate = _num(s.tokens_per_s, ",.0f") or s.note
        lines.append(f"| {s.attention} | {s.layout} | {len(s.steps)} | {s.real():,} | "
                     f"{s.real() / s.slots(length):.1%} | {_num(s.ms_per_step, '.1f')} | {rate} "
                     f"| {s.row_pairs(length):.3g} |")  # fmt: skip
    pairs = list(zip(runs[::2], runs[1::2]))  # (packed, padded) per attention
    ratios = [f"**{_num(a.tokens_per_s / b.tokens_per_s, '.2f') or 'n/a'}x** ({a.attention})"
              for a, b in pairs]  # fmt: skip
    docs = sum(n * n for step in runs[0].steps for row in step for n in row)
    return lines + [
        "",
        f"Packed / padded real tokens/s: {', '.join(ratios)}. Sum of document length²: "
        f"{docs:.3g}, {docs / runs[0].row_pairs(size):.1%} of the packed rows' (a kernel that "
        "skips the blocks the document mask removes, flash varlen or flex, saves the rest; sdpa "
        "with a dense mask computes them all).",
    ]


def run(args: argparse.Namespace) -> str:
    """Both parts, within the time guard; the report (Markdown)."""
    start = time.monotonic()
    shapes = CPU if args.cpu_dry_run else GPU
    print("\n".join(environment(shapes)), flush=True)
    results = []
    for route in ROUTES:  # new routes start until 2 minutes before the end: throughput's time
        for dtype in shapes.dtypes:
            if time.monotonic() > start + args.budget - 120:
                results.append(Result(route.name, NAMES[dtype], "SKIPPED (time guard)"))
            else:
                results.append(check_route(route, dtype, shapes))
            print(routes_table(results[-1:])[-1], flush=True)
    speeds, model = measure_throughput(shapes, start + args.budget)
    lines = environment(shapes) + ["", "### Routes: packed vs alone", ""] + routes_table(results)
    lines += ["", "### Training throughput: packed vs padded", ""]
    lines += speed_table(speeds, model, shapes.train_pack)
    return "\n".join([*lines, "", f"Whole run: {time.monotonic() - start:.0f} s.", ""])


def write_page(report: str) -> None:
    """The report replaces the page's results, and its status block says a GPU run exists."""
    head, _ = PAGE.read_text().split("## Results")
    status = f"{STATUS[0]}\nThe results below were measured by the script on a GPU.\n{STATUS[1]}"
    head = re.sub(f"{re.escape(STATUS[0])}.*{re.escape(STATUS[1])}", status, head, flags=re.S)
    PAGE.write_text(f"{head}## Results\n\n{report}")
    print(f"wrote {PAGE}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny shapes, fp32, CPU")
    parser.add_argument("--no-write", action="store_true", help=f"print only, not {PAGE.name}")
    parser.add_argument("--budget", type=float, default=420.0, help="then start nothing new (s)")
    args = parser.parse_args(argv)
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print("no CUDA device here: run with --cpu-dry-run", file=sys.stderr)
        return 2
    verbosity, threads = transformers.logging.get_verbosity(), torch.get_num_threads()
    transformers.logging.set_verbosity_error()
    if args.cpu_dry_run:
        torch.set_num_threads(1)  # tiny matrices; CI runners are oversubscribed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = run(args)
    finally:
        transformers.logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)
    print(report)
    if not (args.cpu_dry_run or args.no_write):
        write_page(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
