# SPDX-License-Identifier: Apache-2.0
"""``energon-pack simulate``: what packing will do to your lengths, before you train.

Streams a lengths file (:mod:`energon_pack_tools.cli._lengths_file`) through
:func:`energon_pack.algorithms.simulate` and prints fill, packs and the per-buffer bound; with
media columns the media budgets and ``--step-packs`` pack as the VLM encoders do. Imports only
NumPy and the algorithms layer. See docs/howto/buffer-size.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from energon_pack.algorithms import (
    PackingSpec,
    SimulationResult,
    simulate,
)
from energon_pack_tools.cli._lengths_file import load_lengths
from energon_pack_tools.cli._options import buffer_size_option, spec_options


def _simulate(
    lengths_file: Path, spec: PackingSpec, buffer_size: int
) -> tuple[SimulationResult, dict[str, int] | None]:
    """Read, check and simulate; every failure a usage error naming the fix."""
    lengths, media = load_lengths(lengths_file)
    if media is None and spec.has_media_budgets:
        raise click.UsageError(
            f"--max-media-tokens-per-pack / --max-media-per-pack need each document's media: "
            f"write three columns per line in {lengths_file}, `length media_tokens "
            "media_items` (`length 0 0` for text), or leave the budgets out."
        )
    try:
        result = simulate(lengths, spec, buffer_size, media=media)
        figures = None
        if media is not None:
            figures = {
                "max_media_tokens_per_pack": result.max_media_tokens_per_pack,
                "max_media_per_pack": result.max_media_per_pack,
                "dropped_over_budget": result.dropped_over_budget,
            }
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    return result, figures


@click.command(name="simulate")
@click.argument("lengths_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@spec_options
@buffer_size_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(lengths_file: Path, spec: PackingSpec, buffer_size: int, as_json: bool) -> None:
    """Simulate packing LENGTHS_FILE through energon's buffer: one token count per line, or
    `length media_tokens media_items` per line for documents with images or videos (needed by
    the media budgets), or a 1-D .npy of lengths."""
    result, media = _simulate(lengths_file, spec, buffer_size)
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "media": media}))
        return
    r = result
    rows = [
        ("algorithm", f"{r.algorithm} (overlong={r.overlong}, carry_over={r.carry_over or 'off'})"),
        ("fill", f"{r.fill:.2%}   (per-buffer bound {r.lower_bound_fill:.2%})"),
        (
            "packs",
            f"{r.packs}   (per-buffer bound {r.lower_bound_packs}, "
            f"global bound {r.global_lower_bound_packs})",
        ),
        ("tokens", f"{r.tokens}"),
        ("samples in/out", f"{r.samples_in} -> {r.samples_packed} packed -> {r.samples_out} out"),
        (
            "over-long",
            f"truncated {r.truncated_overlong} ({r.truncated_tokens} tokens cut), "
            f"split {r.split_overlong}, dropped {r.dropped_overlong}",
        ),
        ("samples per pack", f"{r.documents_per_pack:.2f}"),
        ("select", f"{r.select_calls} calls, {r.select_seconds * 1e3:.1f} ms"),
        ("max age / wait", f"{r.max_age} buffers / {r.max_wait_samples} samples"),
    ]
    if media is not None:
        rows.append(
            (
                "media",
                f"max per pack {media['max_media_tokens_per_pack']} media tokens, "
                f"{media['max_media_per_pack']} images/videos; dropped over budget "
                f"{media['dropped_over_budget']}",
            )
        )
    for name, value in rows:
        click.echo(f"{name:<18} {value}")
