# SPDX-License-Identifier: Apache-2.0
"""``energon-pack demo``: build a real-text dataset, pack it, train a tiny model, resume, report
(:mod:`energon_pack_tools._demo`). ``--out DIR`` keeps the corpus, tokenizer, dataset and
loader state; exit code 1 when the resume check fails. See docs/quickstart.md.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from energon_pack_tools.cli._output import os_error, progress_bars


@click.command(name="demo")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the corpus (corpus.jsonl), tokenizer, dataset and loader state here "
    "(default: a temp dir, removed).",
)
@click.option("--steps", type=click.IntRange(min=2), default=40, show_default=True)
@click.option("--pack-size", type=click.IntRange(min=16), default=512, show_default=True)
@click.option("--buffer-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--documents", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option(
    "--no-progress",
    is_flag=True,
    help="Hide the progress bars (energon's too); hidden anyway when stderr is not a terminal.",
)
def command(
    out: Path | None,
    steps: int,
    pack_size: int,
    buffer_size: int,
    batch_size: int,
    documents: int,
    no_progress: bool,
) -> None:
    """Pack standard-library text, train a tiny LM on CPU, check save/resume, print a report."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    progress = progress_bars(no_progress)  # also off when stderr is not a terminal
    from energon_pack_tools._demo import DemoConfig, run_demo

    start = time.perf_counter()
    try:
        config = DemoConfig(
            out=out,
            steps=steps,
            pack_size=pack_size,
            buffer_size=buffer_size,
            batch_size=batch_size,
            documents=documents,
            progress=progress,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = run_demo(config, echo=lambda line: click.echo(line, err=True))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # --out read-only, full, not ours to write: one line
        raise os_error(exc, "write", out) from exc
    click.echo("")
    for line in report.lines():
        click.echo(line)
    click.echo(f"  wall time       {time.perf_counter() - start:.1f} s")
    if not report.passed:
        raise SystemExit(1)
