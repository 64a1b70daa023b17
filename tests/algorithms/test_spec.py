# SPDX-License-Identifier: Apache-2.0
"""PackingSpec: one validation, one alignment round-up, and every consumer takes it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from energon_pack.algorithms import (
    CarryOver,
    OverlongPolicy,
    PackingSpec,
    as_spec,
    pack_lengths,
    round_up,
    simulate,
)


def test_defaults_and_coercion() -> None:
    spec = PackingSpec(pack_size=np.int64(16), overlong="split", alignment=4)
    assert spec.overlong is OverlongPolicy.SPLIT and type(spec.pack_size) is int
    # The one default over-long policy: the encoders' (truncate), in simulate and the CLI too.
    assert PackingSpec(pack_size=8).overlong is OverlongPolicy.TRUNCATE
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.pack_size = 8  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"pack_size": 0}, r"pack_size=0 must be a positive int"),
        ({"pack_size": True}, r"pack_size=True"),
        ({"pack_size": 8, "algorithm": "magic"}, r"'magic' is not registered.*register yours"),
        ({"pack_size": 8, "max_samples_per_pack": 0}, r"max_samples_per_pack=0 .*None for no cap"),
        ({"pack_size": 10, "alignment": 4}, r"alignment=4 .*divide pack_size=10"),
        ({"pack_size": 8, "alignment": 0}, r"alignment=0"),
        ({"pack_size": 8, "overlong": "cut"}, r"overlong='cut'; choose one of .*'truncate'"),
        ({"pack_size": 8, "carry_over": True}, r"carry_over=True must be a CarryOver policy"),
        ({"pack_size": 8, "step_packs": 0}, r"step_packs=0"),
    ],
)
def test_every_bad_value_is_named_with_the_fix(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PackingSpec(**fields)


def test_slots_is_the_one_alignment_round_up() -> None:
    spec = PackingSpec(pack_size=16, alignment=4)
    assert [spec.slots(n) for n in (5, 8, 1)] == [8, 8, 4] == [round_up(n, 4) for n in (5, 8, 1)]
    assert spec.slot_lengths([5, 8, 1]).tolist() == [8, 8, 4]
    assert spec.slots(np.array([5, 8, 1])).tolist() == [8, 8, 4]
    with pytest.raises(ValueError, match=r"lengths\[0\]=20 \(rounded up to alignment=4\)"):
        spec.slot_lengths([17])


def test_as_spec_shorthand_builds_the_same_spec() -> None:
    spec = PackingSpec(pack_size=4096, overlong="split")
    assert as_spec(4096, overlong="split") == spec
    assert as_spec(spec) is spec
    assert as_spec(spec, alignment=8) == PackingSpec(pack_size=4096, overlong="split", alignment=8)


def test_pack_lengths_and_simulate_take_the_spec_or_its_fields() -> None:
    spec = PackingSpec(pack_size=10, algorithm="best_fit_decreasing", overlong="split")
    lengths = [2, 7, 3, 8, 12]
    assert pack_lengths(lengths[:4], spec) == pack_lengths(
        lengths[:4], 10, algorithm="best_fit_decreasing"
    )
    by_spec = simulate(lengths, spec, 4).to_dict()
    by_fields = simulate(lengths, 10, 4, algorithm="best_fit_decreasing", overlong="split")
    assert by_spec.pop("select_seconds") >= 0
    assert by_spec == {k: v for k, v in by_fields.to_dict().items() if k != "select_seconds"}
    assert by_spec["samples_packed"] == 6  # 12 split into 10 + 2


def test_simulate_reports_the_carry_over_policy() -> None:
    policy = CarryOver(max_age=2)
    r = simulate([3] * 8, PackingSpec(pack_size=6, carry_over=policy), 4)
    assert r.carry_over == policy
    assert r.to_dict()["carry_over"] == {"min_fill": 0.998, "max_carry_packs": 8.0, "max_age": 2}
    assert simulate([3] * 8, 6, 4).to_dict()["carry_over"] is None
