# SPDX-License-Identifier: Apache-2.0
"""Benchmark: peak worker memory and samples/s of a captioning packing buffer, stock vs light.

Generated images (0.3-2 MP, random aspect ratios, half JPEG quality 90, half PNG; smooth
gradients, rectangles and noise so they compress like photos, not like noise) with captions,
through :class:`~energon_pack.task_encoders.CaptioningPackingTaskEncoder` and a Qwen2-VL image
processor with the common training setting ``min_pixels=56*56, max_pixels=1280*28*28`` (a 1 MP
image is ~5,000 patch rows, 24 MB of float32). Modes:

* ``stock`` (``light_media=False``): the buffer holds processed pixels.
* ``light`` (default): the buffer holds tokens planned from the headers and the encoded bytes;
  images are decoded and processed for packed members only.

Each configuration runs in a fresh subprocess with ``num_workers=0`` (the process is the
worker) and ``repeat=True`` (training: the buffer stays full). Reported: peak RSS of that
process (``ru_maxrss``) and its growth over the RSS before iterating, seconds to the first pack
(filling the buffer), steady samples/s (documents packed after the first pack / time), the
process CPU time per packed document over the same window (less sensitive to other load than
wall time), minor page faults per packed document, fill (real tokens / pack slots) and the
1-minute load average at the end of the run (the machine is shared: the highest over repeats).
A guard stops a run above ``--max-rss-gb`` (reported as such).
``--megapixels 1`` makes every image 1 MP (the issue's bar; aspect ratios still vary).
``--task vqa`` packs the same images as VQA samples (a question, the caption as the answer)
through :class:`~energon_pack.task_encoders.VQAPackingTaskEncoder` instead.
``--repeats N`` runs each cell N times, alternating the modes (stock, light, stock, light) so
that a drifting machine load hits both; the row keeps the best samples/s and first pack (the
minimum time: the least disturbed run), the medians of samples/s and CPU ms/doc over the runs,
and the highest peak RSS. ``--profile`` adds a table of CPU ms per packed document by stage
(decode, the light planner's data check, resize, rows, copies; cProfile on process CPU time,
median over runs); ``--breakdown`` adds, per run, the RSS after the interpreter, torch,
transformers, the other imports (energon, energon-pack), the encoder, the loader, at the first pack, at the end and after
``malloc_trim``, and the most bytes the buffer, a pack's tensors and a pack's resized images
held. Run::

    python tests/benchmarks/media_buffer.py [--buffers 32 128 512] [--images 256] [--docs 96]
        [--megapixels 1] [--repeats 2] [--task captioning|vqa] [--profile] [--breakdown]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MIN_PIXELS, MAX_PIXELS = 56 * 56, 1280 * 28 * 28


def make_image(rng: object, megapixels: float) -> bytes:
    """A photo-like image of about ``megapixels`` MP, JPEG or PNG bytes."""
    import numpy as np
    from PIL import Image, ImageDraw

    aspect = float(rng.uniform(0.5, 2.0))
    w = int((megapixels * 1e6 * aspect) ** 0.5)
    h = int(megapixels * 1e6 / w)
    x, y = np.linspace(0, 1, w)[None, :, None], np.linspace(0, 1, h)[:, None, None]
    base = np.concatenate([x * 200 + 0 * y, y * 180 + 0 * x, (x + y) * 100], axis=2)
    base = base + rng.normal(0, 8, (h, w, 3))
    image = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(20):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        size = (x0 + int(rng.integers(10, w // 3)), y0 + int(rng.integers(10, h // 3)))
        draw.rectangle([x0, y0, *size], fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
    buf = io.BytesIO()
    if rng.random() < 0.5:
        image.save(buf, format="JPEG", quality=90)
    else:
        image.save(buf, format="PNG")
    return buf.getvalue()


def build(
    root: Path, n_images: int, megapixels: float | None = None, task: str = "captioning"
) -> tuple[Path, Path]:
    """The dataset (``n_images`` images of ``megapixels`` MP, or 0.3-2 MP) and a tokenizer;
    ``task="vqa"``: VQA samples (a question each, the caption as the answer)."""
    import numpy as np

    from energon_pack_tools import (
        make_captioning_dataset,
        make_tokenizer,
        make_vqa_dataset,
        synthetic_texts,
    )

    rng = np.random.default_rng(0)
    images = [make_image(rng, megapixels or float(rng.uniform(0.3, 2.0))) for _ in range(n_images)]
    captions = synthetic_texts(n_images, seed=1, min_words=5, max_words=60)
    questions = synthetic_texts(n_images, seed=2, min_words=3, max_words=15)
    tokenizer = make_tokenizer(root / "tok", captions + (questions if task == "vqa" else []))
    mb = sum(len(b) for b in images) / 1e6
    print(f"dataset: {n_images} images, {mb:.0f} MB encoded ({mb / n_images:.2f} MB/image)")
    if task == "vqa":
        return make_vqa_dataset(
            root / "data", images, questions, [[c] for c in captions]
        ), tokenizer
    data = make_captioning_dataset(root / "data", images, captions, image_ext="img")
    return data, tokenizer


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def run_one(
    data: str,
    tokenizer: str,
    mode: str,
    buffer: int,
    docs: int,
    cap: float,
    task: str,
    *,
    profile: bool = False,
    breakdown: bool = False,
) -> dict:
    """One configuration in this process: the measurements as a dict; ``profile``: CPU ms per
    document by stage (:func:`stages`, under cProfile); ``breakdown``: RSS at each stage and the
    bytes the buffer and the packs hold (:func:`held_bytes`)."""
    rss = {"python": rss_gb()}
    import torch  # noqa: F401  (imported below anyway: measured one at a time)

    rss["torch"] = rss_gb()
    import transformers  # noqa: F401

    rss["transformers"] = rss_gb()
    from energon_pack.task_encoders import CaptioningPackingTaskEncoder, VQAPackingTaskEncoder
    from energon_pack.training import make_loader
    from energon_pack_tools import make_image_processor

    rss["imports"] = rss_gb()
    proc = make_image_processor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    pack_size = 4096
    cls = VQAPackingTaskEncoder if task == "vqa" else CaptioningPackingTaskEncoder
    enc = cls(tokenizer, proc, pack_size=pack_size, light_media=(mode == "light"), overlong="drop")
    rss["encoder"] = rss_gb()
    loader = make_loader(Path(data), enc, packing_buffer_size=buffer, repeat=True)
    base = rss["loader"] = rss_gb()
    start = time.perf_counter()
    first = None
    packed = real = slots = 0
    stopped = ""
    held: dict[str, list[float]] = {"buffer": [], "pack": [], "pack_images": []}
    profiler = None
    for pack in loader:
        if first is None:
            first = time.perf_counter()
            rss["first_pack"] = rss_gb()
            if profile:
                import cProfile

                profiler = cProfile.Profile(time.process_time)  # CPU, not wall: shared machine
                profiler.enable()
            cpu0, usage0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
            continue
        packed += len(pack.sample_keys)
        real += len(pack.tokens)
        slots += pack_size
        if breakdown:
            for name, value in held_bytes(loader, pack).items():
                held[name].append(value)
        if rss_gb() > cap:
            stopped = f"stopped above {cap} GB"
            break
        if packed >= docs:
            break
    end, cpu = time.perf_counter(), time.process_time() - cpu0
    if profiler is not None:
        profiler.disable()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss * 1024 / 1e9  # KiB -> GB (10^9 bytes, as rss_gb)
    extra: dict[str, Any] = {}
    if profiler is not None:
        extra["stages_ms"] = stages(profiler, packed)
    if breakdown:
        import ctypes
        import gc

        del pack
        gc.collect()
        rss["end"] = rss_gb()
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the allocator kept but nothing used
        rss["end_trimmed"] = rss_gb()
        extra["rss_gb"] = rss
        extra["held_gb"] = {k: max(v) / 1e9 if v else 0.0 for k, v in held.items()}
    return {
        **extra,
        "mode": mode,
        "buffer": buffer,
        "peak_gb": peak,
        "growth_gb": peak - base,
        "first_s": first - start,
        "docs_per_s": packed / (end - first),
        "cpu_ms_per_doc": 1000 * cpu / packed,
        "faults_per_doc": (usage.ru_minflt - usage0.ru_minflt) / packed,
        "fill": real / slots if slots else 0.0,
        "load": os.getloadavg()[0],
        "note": stopped,
    }


def held_bytes(loader: Any, pack: Any) -> dict[str, float]:
    """Bytes the packing buffer holds now (every tensor and encoded image of its documents: the
    processed pixels in stock mode, the encoded bytes and row maps in light mode), the pack's
    tensors, and the uint8 pixels of the pack's images once decoded (original size) and resized
    (light mode holds the resized ones until the pack writes its rows)."""
    import dataclasses

    import torch

    def size(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            return value.nbytes
        if isinstance(value, (bytes, bytearray)):
            return len(value)
        if isinstance(value, (list, tuple)):
            return sum(size(v) for v in value)
        return 0

    def doc_bytes(doc: Any) -> int:
        return sum(size(getattr(doc, f.name)) for f in dataclasses.fields(doc))

    dataset, buffered = loader.dataset, 0
    while dataset is not None:
        if hasattr(dataset, "_reading_buffer"):  # energon's PackingDataset: both its buffers
            docs = dataset._reading_buffer.buffer + dataset._pre_packing_buffer.buffer
            buffered = sum(doc_bytes(d) for d in docs)
            break
        dataset = getattr(dataset, "dataset", None)
    grids = pack.image_grid_thw.view(-1, 3)
    resized = int(grids.prod(dim=1).sum()) * 14 * 14 * 3  # patch 14: rows * 196 pixels, RGB
    return {"buffer": buffered, "pack": doc_bytes(pack), "pack_images": resized}


#: Stages of a packed document's CPU time: (label, function name as cProfile lists it, time).
STAGES = (
    ("decode", "<method 'decode' of 'ImagingDecoder' objects>", "tottime"),
    ("data check", "check_image_data", "cumtime"),
    ("resize", "<method 'resize' of 'ImagingCore' objects>", "tottime"),
    ("rows", "write", "cumtime"),
    ("copy", "<method 'copy_' of 'torch._C.TensorBase' objects>", "tottime"),
)


def stages(profiler: Any, docs: int) -> dict[str, float]:
    """CPU ms per packed document in each of :data:`STAGES` (``decode``: PIL's decoders;
    ``data check``: the light planner's header check, a PNG inflated; ``resize``: PIL's
    resample; ``rows``: ``FastPixels.write``, the rescale/normalize table into patch rows;
    ``copy``: tensor copies, a stock document's rows into its pack), ``total`` and ``other``."""
    import pstats

    table = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, tottime, cumtime, ..)
    out = {}
    for label, name, kind in STAGES:
        hits = [
            v for (f, _, n), v in table.items() if n == name and (label != "rows" or "_pixels" in f)
        ]
        out[label] = 1000 * sum(v[2] if kind == "tottime" else v[3] for v in hits) / docs
    out["total"] = 1000 * sum(v[2] for v in table.values()) / docs
    out["other"] = out["total"] - sum(out[label] for label, _, _ in STAGES)
    return out


def run_subprocess(data: Path, tok: Path, mode: str, buffer: int, args: Any) -> dict | str:
    """:func:`run_one` in a fresh interpreter: its dict, or the error text."""
    cmd = [sys.executable, __file__, "--one", str(data), str(tok), mode, str(buffer)]
    cmd += ["--docs", str(args.docs), "--max-rss-gb", str(args.max_rss_gb), "--task", args.task]
    cmd += ["--profile"] * args.profile + ["--breakdown"] * args.breakdown
    out = subprocess.run(cmd, capture_output=True, text=True)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not line.startswith("{"):
        return f"failed: {out.stderr.strip()[-300:]}"
    return json.loads(line)


def median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def best_of(runs: list[dict]) -> dict:
    """One row from repeats: docs/s and first pack of the fastest, the median docs/s and CPU
    ms/doc, the highest peak and growth."""
    fastest = max(runs, key=lambda r: r["docs_per_s"])
    return {
        **fastest,
        "median_docs_per_s": median([r["docs_per_s"] for r in runs]),
        "median_cpu_ms_per_doc": median([r["cpu_ms_per_doc"] for r in runs]),
        "peak_gb": max(r["peak_gb"] for r in runs),
        "growth_gb": max(r["growth_gb"] for r in runs),
        "first_s": min(r["first_s"] for r in runs),
        "cpu_ms_per_doc": min(r["cpu_ms_per_doc"] for r in runs),
        "faults_per_doc": min(r["faults_per_doc"] for r in runs),
        "load": max(r["load"] for r in runs),
        "all_docs_per_s": [round(r["docs_per_s"], 2) for r in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--buffers", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--modes", nargs="+", default=["stock", "light"])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument(
        "--megapixels", type=float, default=None, help="every image this size (default 0.3-2)"
    )
    parser.add_argument("--docs", type=int, default=96, help="documents measured after the fill")
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs per cell, modes alternating; best is kept"
    )
    parser.add_argument("--max-rss-gb", type=float, default=16.0)
    parser.add_argument("--task", choices=["captioning", "vqa"], default="captioning")
    parser.add_argument(
        "--profile", action="store_true", help="also: CPU ms/doc by stage (cProfile), medians"
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="also: RSS by stage and bytes held, per run"
    )
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # data tok mode buffer
    args = parser.parse_args()
    if args.one:
        data, tok, mode, buffer = args.one
        result = run_one(
            data,
            tok,
            mode,
            int(buffer),
            args.docs,
            args.max_rss_gb,
            args.task,
            profile=args.profile,
            breakdown=args.breakdown,
        )
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as tmp:
        data, tok = build(Path(tmp), args.images, args.megapixels, args.task)
        print(
            "| buffer | mode | peak RSS GB | growth GB | first pack s | docs/s | median docs/s "
            "| CPU ms/doc | median CPU ms/doc | faults/doc | fill | load | runs docs/s |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        details: list[dict] = []
        for buffer in args.buffers:
            runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
            errors: dict[str, str] = {}
            for _ in range(args.repeats):  # stock, light, stock, light: drifting load hits both
                for mode in args.modes:
                    r = run_subprocess(data, tok, mode, buffer, args)
                    if isinstance(r, str):
                        errors[mode] = r
                    else:
                        runs[mode].append(r)
                        details.append(r)
            for mode in args.modes:
                if not runs[mode]:
                    print(f"| {buffer} | {mode} | {errors.get(mode, '')} |")
                    continue
                r = best_of(runs[mode])
                print(
                    f"| {buffer} | {mode} | {r['peak_gb']:.2f} | {r['growth_gb']:.2f} | "
                    f"{r['first_s']:.1f} | {r['docs_per_s']:.2f} | {r['median_docs_per_s']:.2f} | "
                    f"{r['cpu_ms_per_doc']:.1f} | {r['median_cpu_ms_per_doc']:.1f} | "
                    f"{r['faults_per_doc']:.0f} | {r['fill']:.3f} | {r['load']:.1f} | "
                    f"{' '.join(map(str, r['all_docs_per_s']))} {r['note']} |",
                    flush=True,
                )
        if args.profile:
            print_stages(details)
        if args.breakdown:
            print_breakdown(details)


def print_stages(runs: list[dict]) -> None:
    """Per buffer and mode, the median over runs of CPU ms per document in each stage."""
    labels = [label for label, _, _ in STAGES] + ["other", "total"]
    print("\nCPU ms per packed document by stage (cProfile; median over runs)\n")
    print(f"| buffer | mode | {' | '.join(labels)} |")
    print("|---:|---|" + "---:|" * len(labels))
    for key in sorted({(r["buffer"], r["mode"]) for r in runs}):
        group = [r["stages_ms"] for r in runs if (r["buffer"], r["mode"]) == key]
        cells = " | ".join(f"{median([g[label] for g in group]):.1f}" for label in labels)
        print(f"| {key[0]} | {key[1]} | {cells} |")


def print_breakdown(runs: list[dict]) -> None:
    """Per run: RSS (GB) after the interpreter, torch, transformers, the other imports (energon,
    energon-pack), the encoder, the loader, at the first
    pack, the peak, at the end and after ``malloc_trim``; the most bytes the buffer, a pack's
    tensors and a pack's resized images held."""
    print("\nRSS GB by stage, and the most bytes held (GB), per run\n")
    rss = [
        "python",
        "torch",
        "transformers",
        "imports",
        "encoder",
        "loader",
        "first_pack",
        "end",
        "end_trimmed",
    ]
    held = ["buffer", "pack", "pack_images"]
    print(f"| buffer | mode | {' | '.join(rss)} | peak | {' | '.join(held)} |")
    print("|---:|---|" + "---:|" * (len(rss) + 1 + len(held)))
    for r in runs:
        cells = [f"{r['rss_gb'][k]:.3f}" for k in rss] + [f"{r['peak_gb']:.3f}"]
        cells += [f"{r['held_gb'][k]:.3f}" for k in held]
        print(f"| {r['buffer']} | {r['mode']} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
