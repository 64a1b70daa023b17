# SPDX-License-Identifier: Apache-2.0
"""The packing options are generated from PackingSpec: same flags and defaults everywhere."""

from __future__ import annotations

import dataclasses
import enum

import pytest
from click.testing import CliRunner

from energon_pack.algorithms import CarryOver, PackingSpec
from energon_pack_tools.cli._analyze_command import command as analyze
from energon_pack_tools.cli._options import field_docs
from energon_pack_tools.cli._simulate_command import command as simulate


@pytest.mark.parametrize("command", [simulate, analyze], ids=["simulate", "analyze"])
def test_every_spec_field_is_an_option_with_the_spec_default(command) -> None:
    params = {p.name: p for p in command.params}
    for f in dataclasses.fields(PackingSpec):
        default = f.default.value if isinstance(f.default, enum.Enum) else f.default
        if f.name == "carry_over":
            default = False  # --carry-over/--no-carry-over, off like the spec's None
        if default is dataclasses.MISSING:
            assert params[f.name].required, f.name
        else:
            assert params[f.name].default == default, f.name
        assert params[f.name].help == field_docs(PackingSpec)[f.name]
    for f in dataclasses.fields(CarryOver):
        assert params[f.name].default == f.default, f.name


def test_field_docs_reads_the_comments() -> None:
    docs = field_docs(PackingSpec)
    assert set(docs) == {f.name for f in dataclasses.fields(PackingSpec)}
    assert docs["alignment"].endswith("must divide pack_size.")  # two comment lines, joined


def test_a_bad_combination_is_a_usage_error_with_the_spec_message(tmp_path) -> None:
    path = tmp_path / "l.txt"
    path.write_text("3\n4\n")
    args = [str(path), "--pack-size", "10", "--buffer-size", "4", "--alignment", "4"]
    res = CliRunner().invoke(simulate, args)
    assert res.exit_code == 2 and "alignment=4 must be an int >= 1 and divide" in res.output


def test_the_spec_reaches_simulate(tmp_path) -> None:
    # Alignment 4 and 2 samples per pack change the packs: [3, 4] aligned to [4, 4], cap 2.
    path = tmp_path / "l.txt"
    path.write_text("3\n4\n3\n4\n")
    base = [str(path), "--pack-size", "8", "--buffer-size", "4", "--json"]
    plain = CliRunner().invoke(simulate, base)
    capped = CliRunner().invoke(simulate, [*base, "--max-samples-per-pack", "1"])
    assert '"packs": 2' in plain.output and '"packs": 4' in capped.output
