# SPDX-License-Identifier: Apache-2.0
"""Click options shared by the commands that pack: one definition, the same flags everywhere.

``packing_options`` adds ``--pack-size``, ``--buffer-size``, ``--algorithm`` and ``--overlong``;
``carry_over_option`` adds ``--carry-over/--no-carry-over``. Example::

    @click.command()
    @packing_options(overlong_help="What to do with documents longer than the pack.")
    @carry_over_option
    def command(pack_size: int, buffer_size: int, algorithm: str, overlong: str,
                carry_over: bool) -> None: ...

``energon-pack simulate --pack-size 4096 --buffer-size 256`` and ``energon-pack analyze ...
--pack-size 4096 --buffer-size 256`` thus parse (and validate) those flags identically. Imports
only click and the algorithms layer (``simulate`` stays free of torch and megatron).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from energon_pack.algorithms import ALGORITHMS, DEFAULT_ALGORITHM, OverlongPolicy

__all__ = ["carry_over_option", "packing_options"]

F = TypeVar("F", bound=Callable[..., object])

#: ``--carry-over/--no-carry-over`` (off by default): carry under-filled packs.
carry_over_option = click.option(
    "--carry-over/--no-carry-over", default=False, help="Carry under-filled packs."
)


def packing_options(*, overlong_help: str) -> Callable[[F], F]:
    """``--pack-size``, ``--buffer-size`` (both required), ``--algorithm`` and ``--overlong``."""
    options = [
        click.option(
            "--pack-size", type=click.IntRange(min=1), required=True, help="Tokens per pack."
        ),
        click.option(
            "--buffer-size", type=click.IntRange(min=1), required=True, help="packing_buffer_size."
        ),
        click.option(
            "--algorithm",
            type=click.Choice(sorted(ALGORITHMS)),
            default=DEFAULT_ALGORITHM,
            show_default=True,
        ),
        click.option(
            "--overlong",
            type=click.Choice([p.value for p in OverlongPolicy]),
            default=OverlongPolicy.SPLIT.value,
            show_default=True,
            help=overlong_help,
        ),
    ]

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate
