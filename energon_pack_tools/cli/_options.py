# SPDX-License-Identifier: Apache-2.0
"""Click options generated from :class:`~energon_pack.algorithms.PackingSpec`.

``spec_options`` adds one option per spec field (type, default and ``#:`` doc become the
option's) and hands the command one validated ``spec``; the carry-over policy becomes
``--carry-over/--no-carry-over`` plus one option per ``CarryOver`` field. ``simulate`` and
``analyze`` thus parse and validate those flags identically.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import click

from energon_pack.algorithms import ALGORITHMS, CarryOver, PackingSpec

__all__ = ["buffer_size_option", "field_docs", "spec_options"]

F = TypeVar("F", bound=Callable[..., Any])

#: ``--buffer-size`` (required): energon's ``packing_buffer_size``, not part of the spec.
buffer_size_option = click.option(
    "--buffer-size",
    type=click.IntRange(min=1),
    required=True,
    help="packing_buffer_size: samples per worker that are packed together.",
)

#: Choices of string fields that are keys of a registry rather than an enum.
_CHOICES: dict[str, Callable[[], list[str]]] = {"algorithm": lambda: sorted(ALGORITHMS)}


def field_docs(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines above each field of the dataclass ``cls``, joined.

    ``field_docs(CarryOver)["max_age"]`` -> ``"A sample carried this many times is emitted ..."``.
    """
    docs: dict[str, str] = {}
    comment: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        text = line.strip()
        field = re.match(r"(\w+)\s*:", text)
        if text.startswith("#:"):
            comment.append(text[2:].strip())
        elif comment and field:
            docs[field.group(1)] = " ".join(comment)
            comment = []
        else:
            comment = []
    return docs


def _click_type(name: str, annotation: Any) -> Any:
    """The click type of a field: an enum or a registry gives a choice; ``X | None`` is ``X``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if name in _CHOICES:
        return click.Choice(_CHOICES[name]())
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return click.Choice([m.value for m in annotation])
    return annotation


def _field_options(cls: type, *, prefix_help: str = "") -> list[Callable[[F], F]]:
    """One ``--name`` option per field of ``cls`` except the carry-over policy."""
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    options = []
    for f in dataclasses.fields(cls):
        if hints[f.name] == CarryOver | None:
            continue
        default = f.default
        if isinstance(default, enum.Enum):
            default = default.value
        required = default is dataclasses.MISSING
        options.append(
            click.option(
                f"--{f.name.replace('_', '-')}",
                f.name,
                type=_click_type(f.name, hints[f.name]),
                required=required,
                default=None if required else default,
                show_default=not required and default is not None,
                help=prefix_help + docs.get(f.name, ""),
            )
        )
    return options


def _carry_over_options() -> list[Callable[[F], F]]:
    flag = click.option(
        "--carry-over/--no-carry-over",
        default=False,
        show_default=True,
        help=field_docs(PackingSpec)["carry_over"],
    )
    return [flag, *_field_options(CarryOver, prefix_help="With --carry-over: ")]


def _build_spec(values: dict[str, Any]) -> PackingSpec:
    """Pop the spec's (and the carry-over policy's) values from ``values``; build the spec.

    Raises:
        click.UsageError: a missing ``--pack-size``, a carry-over setting (``--min-fill``...)
            without ``--carry-over``, or a value the spec refuses (its message).
    """
    carry = {f.name: values.pop(f.name) for f in dataclasses.fields(CarryOver)}
    fields = {f.name: values.pop(f.name) for f in dataclasses.fields(PackingSpec)}
    if fields["pack_size"] is None:
        raise click.UsageError("Missing option '--pack-size' (the tokens per pack, e.g. 4096).")
    ctx = click.get_current_context(silent=True)
    given = [
        name
        for name in carry
        if ctx is not None
        and ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    ]
    if given and not fields["carry_over"]:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        what = "is a carry-over setting" if len(given) == 1 else "are carry-over settings"
        raise click.UsageError(f"{flags} {what}: add --carry-over, or leave them out.")
    try:
        fields["carry_over"] = CarryOver(**carry) if fields["carry_over"] else None
        return PackingSpec(**fields)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def spec_options(func: F) -> F:
    """Add the spec's options to a click command; it receives ``spec=PackingSpec(...)``."""

    @functools.wraps(func)
    def command(**values: Any) -> Any:
        spec = _build_spec(values)
        return func(spec=spec, **values)

    for option in reversed([*_field_options(PackingSpec), *_carry_over_options()]):
        command = option(command)
    return command  # type: ignore[return-value]
