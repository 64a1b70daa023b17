# SPDX-License-Identifier: Apache-2.0
"""Media-aware packing on a LLaVA-like media mix: budgets and the vision load per step.

Run: ``python tests/benchmarks/media_packing.py [--samples 20000] [--pack-size 16384]``.

The mix (seeded, ``--seed``), token counts as Qwen2-VL's processor makes them (14-pixel
patches, 2x2 merge: one placeholder token per 28x28 pixels after ``smart_resize`` to multiples
of 28 within ``max_pixels``):

* 30% text only: lognormal text, median 400 tokens (sigma 0.9);
* 45% one image: a resolution drawn from 336x336, 448x448, 640x480, 800x600, 1024x768,
  1280x720, 1920x1080, 1080x1920, scaled down to ``max_pixels = 1280 * 28 * 28`` (about 1 MP):
  144 to 1,222 tokens; text lognormal, median 120 (sigma 0.8);
* 15% two to four images (uniform), each drawn as above; text median 250 (sigma 0.8);
* 10% one video: 8, 16 or 32 frames at 2 frames per temporal patch, 252x448, 360x640 or
  480x854 under ``max_pixels = 768 * 28 * 28`` per frame: 576 to 7,808 tokens; text median
  80 (sigma 0.6).

A document's length is its text plus its media tokens, capped at the pack size (a video of
more tokens is shortened to fewer frames, as a video processor's ``max_frames`` would).

Each row streams the documents through energon's packing buffer (``simulate_packs``, the
loader's exact packs) and reports fill, packs, the most media tokens and items in one pack,
and the **vision-load step CV**: the coefficient of variation of the media tokens summed over
``step_packs`` consecutive packs, over *every* step offset (all windows of ``step_packs`` packs
in emission order: the loader's batches may start at any pack). ``same packs`` says whether the
``step_packs`` row holds exactly the packs of the packing-order row (as sets of documents).
``step (vision)`` is the alternative order (media tokens alone, the LM cost breaking ties),
switched in for this benchmark only. ``LB``: ``max(ceil(tokens / pack), ceil(media tokens /
budget))`` over the whole stream; ``ms/1k docs``: the simulated loader's packing time (one
core, all select calls) per 1,000 documents. ``--without-levelling`` switches off, for this
benchmark only, the budget pass's step 0 (``_media._level_media``: levelling the media tokens
of the packs over budget with the lightest ones) to show what that step buys.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from energon_pack.algorithms import (
    CostModel,
    MediaLoad,
    PackingSpec,
    _media,
    _pack,
    simulate_packs,
)
from energon_pack.algorithms._media import VISION_COST

PATCH = 28  #: pixels per placeholder token side (14-pixel patches, 2x2 merge)
IMAGE_MAX_PIXELS = 1280 * PATCH * PATCH
VIDEO_MAX_PIXELS = 768 * PATCH * PATCH
IMAGE_SIZES = [
    (336, 336),
    (448, 448),
    (640, 480),
    (800, 600),
    (1024, 768),
    (1280, 720),
    (1920, 1080),
    (1080, 1920),
]
VIDEO_SIZES = [(252, 448), (360, 640), (480, 854)]
VIDEO_FRAMES = [8, 16, 32]


def qwen2vl_tokens(height: int, width: int, max_pixels: int) -> int:
    """Placeholder tokens of one image (Qwen2-VL ``smart_resize``, then one per 28x28)."""
    h = max(PATCH, round(height / PATCH) * PATCH)
    w = max(PATCH, round(width / PATCH) * PATCH)
    if h * w > max_pixels:
        beta = np.sqrt(height * width / max_pixels)
        h = int(np.floor(height / beta / PATCH)) * PATCH
        w = int(np.floor(width / beta / PATCH)) * PATCH
    return (h // PATCH) * (w // PATCH)


def media_mix(n: int, pack_size: int, seed: int) -> tuple[np.ndarray, MediaLoad]:
    """``n`` documents of the mix in the module docstring: lengths and media loads."""
    rng = np.random.default_rng(seed)
    image_tokens = [qwen2vl_tokens(h, w, IMAGE_MAX_PIXELS) for h, w in IMAGE_SIZES]
    frame_tokens = [qwen2vl_tokens(h, w, VIDEO_MAX_PIXELS) for h, w in VIDEO_SIZES]
    kind = rng.choice(4, size=n, p=[0.30, 0.45, 0.15, 0.10])
    lengths = np.zeros(n, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    items = np.zeros(n, dtype=np.int64)
    text_median = {0: (400, 0.9), 1: (120, 0.8), 2: (250, 0.8), 3: (80, 0.6)}
    for i in range(n):
        k = int(kind[i])
        median, sigma = text_median[k]
        text = max(1, int(rng.lognormal(np.log(median), sigma)))
        if k in (1, 2):
            count = 1 if k == 1 else int(rng.integers(2, 5))
            media = int(sum(rng.choice(image_tokens, size=count)))
        elif k == 3:
            count, per_frame = 1, int(rng.choice(frame_tokens))
            frames = int(rng.choice(VIDEO_FRAMES))
            while frames > 2 and frames // 2 * per_frame + 1 > pack_size:
                frames //= 2
            media = frames // 2 * per_frame
        else:
            count, media = 0, 0
        text = min(text, pack_size - media)
        lengths[i], tokens[i], items[i] = text + media, media, count
    return lengths, MediaLoad(tokens, items)


def step_cv(per_pack: np.ndarray, step_packs: int) -> float:
    """CV of the sums over every window of ``step_packs`` consecutive packs."""
    if per_pack.size < step_packs:
        return 0.0
    sums = np.convolve(per_pack, np.ones(step_packs), mode="valid")
    return float(sums.std() / sums.mean()) if sums.mean() else 0.0


def vision_order_costs(bins, arr, media, balance):  # noqa: ANN001, ANN201
    """The alternative: rank packs by media tokens alone, the LM cost breaking ties."""
    lm = CostModel().pack_costs(bins, arr)
    return VISION_COST.pack_costs(bins, arr, media.tokens) + lm / (2.0 * float(lm.max()))


def run(
    lengths: np.ndarray, load: MediaLoad, spec: PackingSpec, buffer: int, *, vision: bool = False
) -> dict:
    """One row: stream the documents through the buffer and measure the emitted packs."""
    original = _pack._order_costs
    if vision:  # benchmark-only switch to the alternative order, to compare with the default
        _pack._order_costs = vision_order_costs
    try:
        t0 = time.perf_counter()
        packs = simulate_packs(lengths, spec, buffer, media=load)
        seconds = time.perf_counter() - t0
    finally:
        _pack._order_costs = original
    media = np.array([int(load.tokens[p].sum()) for p in packs])
    tokens = sum(int(lengths[p].sum()) for p in packs)
    return {
        "packs": packs,
        "ms": 1000 * seconds / (lengths.size / 1000),
        "fill": tokens / (len(packs) * spec.pack_size),
        "max_tok": int(media.max()),
        "max_items": max(int(load.items[p].sum()) for p in packs),
        "cv": step_cv(media, spec.step_packs or STEP_PACKS[0]),
        "lm_cv": step_cv(CostModel().pack_costs(packs, lengths), spec.step_packs or STEP_PACKS[0]),
    }


STEP_PACKS = [4]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--pack-size", type=int, default=16384)
    parser.add_argument("--buffers", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--step-packs", type=int, default=4)
    parser.add_argument(
        "--budgets",
        nargs="+",
        default=["14336:24", "12288:24"],
        help="media-token:item budgets per pack, each a row pair",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--without-levelling",
        action="store_true",
        help="benchmark-only: skip the budget pass's step 0 (levelling media over packs)",
    )
    args = parser.parse_args()
    if args.without_levelling:
        assert hasattr(_media, "_level_media"), "the budget pass's step 0 was renamed"
        _media._level_media = lambda packs, spec: packs.members
    STEP_PACKS[0] = args.step_packs
    lengths, load = media_mix(args.samples, args.pack_size, args.seed)
    total, media_total = int(lengths.sum()), int(load.tokens.sum())
    print(
        f"{args.samples} documents, {total} tokens ({media_total / total:.1%} media tokens), "
        f"pack {args.pack_size}, step_packs {args.step_packs}; vision step CV over every "
        "step offset"
        + ("; WITHOUT the budget pass's step 0 (levelling)" if args.without_levelling else "")
        + "\n"
    )
    head = (
        f"{'buffer':>6} {'budget tok:items':>16} {'order':>16} {'packs':>6} {'LB':>5} "
        f"{'fill %':>7} {'max media tok':>13} {'max items':>9} {'vision step CV':>14} "
        f"{'vs packing':>10} {'LM step CV':>10} {'same packs':>10} {'ms/1k docs':>10}"
    )
    print(head)
    print("-" * len(head))
    ok = True
    for buffer in args.buffers:
        for budget in ["none", *args.budgets]:
            tok_cap, item_cap = (None, None) if budget == "none" else map(int, budget.split(":"))
            base = PackingSpec(
                pack_size=args.pack_size,
                max_media_tokens_per_pack=tok_cap,
                max_media_per_pack=item_cap,
            )
            stepped = dataclasses.replace(base, step_packs=args.step_packs)
            bound = -(-total // args.pack_size)
            if tok_cap:
                bound = max(bound, -(-media_total // tok_cap))
            rows = [("packing", run(lengths, load, base, buffer))]
            rows.append(("step_packs", run(lengths, load, stepped, buffer)))
            rows.append(("step (vision)", run(lengths, load, stepped, buffer, vision=True)))
            plain = rows[0][1]
            for order, row in rows:
                same = sorted(map(sorted, plain["packs"])) == sorted(map(sorted, row["packs"]))
                ratio = row["cv"] / plain["cv"] if plain["cv"] else 0.0
                print(
                    f"{buffer:>6} {budget:>16} {order:>16} {len(row['packs']):>6} {bound:>5} "
                    f"{100 * row['fill']:>7.2f} {row['max_tok']:>13} {row['max_items']:>9} "
                    f"{row['cv']:>14.4f} {ratio:>10.2f} {row['lm_cv']:>10.4f} "
                    f"{'yes' if same else 'NO':>10} {row['ms']:>10.1f}"
                )
                ok &= same
                if tok_cap:
                    ok &= row["max_tok"] <= tok_cap and row["max_items"] <= item_cap
            ok &= rows[1][1]["cv"] <= plain["cv"] / 2 or budget != "none"
    print(
        "\nbars: same packs in every order, budgets never exceeded, and without budgets the "
        f"step_packs vision step CV at most half of the packing order's: {ok}"
    )


if __name__ == "__main__":
    main()
