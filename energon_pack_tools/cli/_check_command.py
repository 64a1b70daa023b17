# SPDX-License-Identifier: Apache-2.0
"""``energon-pack check DATASET``: find what would stop or silently change a load before training.

Every shard is walked as energon reads it (:func:`energon_pack_tools.check_shards`): a 0-byte or
truncated tar, a member name that is not UTF-8, a member repeated in one sample (energon would
lose a sample silently), a key used twice, a sample count that changed since ``energon prepare``.
Prints one line per problem, naming the shard and the fix, and exits with status 1 if any.
"""

from __future__ import annotations

from pathlib import Path

import click

from energon_pack_tools.cli._output import plural

__all__ = ["command"]


@click.command(name="check")
@click.argument("dataset", type=click.Path(exists=True, path_type=Path))
def command(dataset: Path) -> None:
    """Check the shards of DATASET (an energon webdataset, or a folder of tar shards before
    `energon prepare`): damaged tars, non-UTF-8 keys, duplicate keys, changed sample counts."""
    from energon_pack_tools._dataset_check import check_shards

    try:
        report = check_shards(dataset)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    for problem in report.problems:
        click.echo(problem, err=True)
    found = f"{plural(report.shards, 'shard')}, {plural(report.samples, 'sample')}"
    if not report.ok:
        raise click.ClickException(
            f"{dataset}: {plural(len(report.problems), 'problem')} in {found} (listed above)."
        )
    click.echo(f"{dataset}: ok ({found} checked)")
    if not report.prepared and report.shards:
        click.echo(
            "next: energon prepare --non-interactive --split-ratio 1,0,0 --sample-type ... "
            f"{dataset}"
        )
