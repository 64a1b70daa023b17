# SPDX-License-Identifier: Apache-2.0
"""``energon-pack analyze``: what packing will do to *your* dataset, through the real loader.

Streams one epoch of an energon dataset through ``LLMPackingTaskEncoder`` (see
:mod:`energon_pack.tools._analysis`) and prints fill, packs, documents per pack, over-long counts and
the smallest buffer that reaches 99% fill::

    $ energon-pack analyze demo/dataset --tokenizer demo/tokenizer --pack-size 512 --buffer-size 16
    fill                88.53%   (simulate 88.53%, bound 100.00%)
    packs               715   (324,083 tokens)
    ...
    carry-over          97.83% at buffer 16 with --carry-over (simulated; 88.53% without)
    recommended buffer  256 (simulated fill 99.21% >= 99.00%)

``--json`` prints one object (``fill``, ``packs``, ``tokens``, ``samples_in``, ``samples_out``,
...); ``--plot FILE.png`` then writes three pictures (lengths, fill against buffer size, the
first packs; matplotlib), and a failed plot is a warning after the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from pathlib import Path

import click

from energon_pack.algorithms import PackingSpec
from energon_pack.cli._errors import os_error
from energon_pack.cli._options import buffer_size_option, spec_options


@click.command(name="analyze")
@click.argument("dataset", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Local transformers tokenizer directory.",
)
@spec_options
@buffer_size_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Read only N samples.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write a PNG: length histogram, fill against buffer size, the first packs.",
)
def command(
    dataset: Path,
    tokenizer: Path,
    spec: PackingSpec,
    buffer_size: int,
    limit: int | None,
    as_json: bool,
    plot: Path | None,
) -> None:
    """Pack one epoch of DATASET with the LLM encoder and report fill and a buffer size."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from energon_pack.tools import analyze_dataset, check_dataset, plot_analysis

    try:
        check_dataset(dataset)
        # energon prints shard slices to stdout; keep stdout for the report (and --json).
        # energon asks torch for pinned memory; on a CPU-only machine torch warns about it.
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*pin_memory.*", category=UserWarning)
            result = analyze_dataset(
                dataset,
                str(tokenizer),
                spec,
                buffer_size=buffer_size,
                limit=limit,
                progress=not as_json,
            )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # e.g. a shard deleted or unreadable while reading
        raise os_error(exc, "read", dataset) from exc
    if result.packs == 0:
        raise click.ClickException(
            f"{dataset}: no packs came out (every sample empty or dropped); check the dataset "
            "with `energon info` and the --overlong policy."
        )
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        for line in result.lines():
            click.echo(line)
    if plot is not None:  # after the report: a failed picture must not cost the figures
        try:
            plot_analysis(result, plot)
        except Exception as exc:  # any failure here is only a warning
            click.echo(f"warning: no plot written to {plot}: {exc}", err=True)
        else:
            click.echo(f"{'plot':<19} {plot}", err=as_json)
