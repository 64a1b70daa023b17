# SPDX-License-Identifier: Apache-2.0
"""``energon-pack simulate``: what packing will do to your lengths, before you train.

Streams the lengths through energon's packing buffer with the same code the loader uses
(:func:`energon_pack.algorithms.simulate`) and prints fill, packs and the per-buffer bound::

    $ energon-pack simulate lengths.txt --pack-size 4096 --buffer-size 256 --overlong split
    fill                 98.93%   (per-buffer bound 99.27%)
    packs                6784     (per-buffer bound 6761)
    ...

Imports only NumPy and the algorithms layer (no torch, no megatron).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from energon_pack.algorithms import PackingSpec, simulate
from energon_pack.cli._lengths import load_lengths
from energon_pack.cli._options import buffer_size_option, spec_options


@click.command(name="simulate")
@click.argument("lengths_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@spec_options
@buffer_size_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(lengths_file: Path, spec: PackingSpec, buffer_size: int, as_json: bool) -> None:
    """Simulate packing LENGTHS_FILE (one integer per line, or .npy) through energon's buffer."""
    lengths = load_lengths(lengths_file)
    try:
        result = simulate(lengths, spec, buffer_size)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
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
        ("samples per pack", f"{r.mean_samples_per_pack:.2f}"),
        ("select", f"{r.select_calls} calls, {r.select_seconds * 1e3:.1f} ms"),
        ("max age / wait", f"{r.max_age} buffers / {r.max_wait_samples} samples"),
    ]
    for name, value in rows:
        click.echo(f"{name:<18} {value}")
