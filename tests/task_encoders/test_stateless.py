# SPDX-License-Identifier: Apache-2.0
"""``seeded_stateless``: per-call worker seed, RNG isolation, generators, failure tolerance."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from megatron.energon import WorkerConfig, stateless
from megatron.energon.rng import SystemRng
from megatron.energon.task_encoder.base import get_failure_tolerance, get_stateless

from energon_pack.energon import seeded_stateless
from energon_pack.energon._stateless import current_seed_args


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


class Encoder:
    @seeded_stateless
    def encode(self, x: int) -> tuple[float, float, float]:
        return draws()

    @seeded_stateless(failure_tolerance=7)
    def encode_gen(self, x: int):
        for _ in range(x):
            yield draws()

    @seeded_stateless(run_ahead=True)
    def encode_gen_ahead(self, x: int):
        for _ in range(x):
            yield draws()

    @stateless(restore_seeds=True)
    def energon_encode(self, x: int) -> tuple[float, float, float]:
        return draws()

    @property
    def current_sample_index(self) -> int:  # what energon's TaskEncoder provides
        return WorkerConfig.active_worker_config.active_worker_sample_index


def expected(config: WorkerConfig, worker: int, index: int) -> tuple[float, float, float]:
    """What a seeded call must draw: RNGs seeded from (worker seed, global sample index).

    energon numbers the samples of local worker ``w`` as ``index * num_workers + w``.
    """
    workers = max(config.num_workers, 1)
    return draws_seeded(config.worker_seed(worker), index * workers + worker % workers)


def draws_seeded(*seed_args: int) -> tuple[float, float, float]:
    state = SystemRng.save_state()
    SystemRng.seed_args(*seed_args)
    try:
        return draws()
    finally:
        SystemRng.restore_state(state)


def call_as(config: WorkerConfig, worker: int, index: int, fn, *args):
    """Call ``fn`` as energon's restore_sample does: global worker ``worker``, sample ``index``."""
    config.worker_activate(index, override_global_rank=worker)
    try:
        result = fn(*args)
        return list(result) if not isinstance(result, tuple) else result
    finally:
        config.worker_deactivate()


def test_seed_is_recomputed_for_every_worker_in_any_order() -> None:
    config = WorkerConfig(rank=0, world_size=1, num_workers=3)
    enc = Encoder()
    calls = [(w, i) for w in range(3) for i in (0, 4, 9)]
    random.Random(1).shuffle(calls)
    for worker, index in calls:
        assert call_as(config, worker, index, enc.encode, 0) == expected(config, worker, index)
    # Different workers really draw different numbers (else the test proves nothing).
    assert expected(config, 0, 4) != expected(config, 1, 4)


def test_energon_7_4_1_caches_the_first_worker_seed() -> None:
    """The bug this decorator works around: the second worker restored gets the first's seed."""
    config = WorkerConfig(rank=0, world_size=1, num_workers=2)
    enc = Encoder()
    assert call_as(config, 0, 4, enc.energon_encode, 0) == expected(config, 0, 4)
    # Worker 1's sample index (4 * 2 + 1) but worker 0's cached seed:
    assert call_as(config, 1, 4, enc.energon_encode, 0) == draws_seeded(config.worker_seed(0), 9)
    assert call_as(config, 1, 4, enc.encode, 0) == expected(config, 1, 4)  # ours: right seed


def test_caller_rng_state_is_restored() -> None:
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    before = draws()
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    call_as(config, 0, 2, Encoder().encode, 0)
    assert draws() == before


@pytest.mark.parametrize("name", ["encode_gen", "encode_gen_ahead"])
def test_generator_draws_are_reproducible_and_isolated(name: str) -> None:
    config = WorkerConfig(rank=0, world_size=1, num_workers=2)
    enc = Encoder()
    first = call_as(config, 1, 3, getattr(enc, name), 3)
    # Interleave the caller's own draws between the generator's items: same items.
    config.worker_activate(3, override_global_rank=1)
    try:
        interleaved = []
        for item in getattr(enc, name)(3):
            interleaved.append(item)
            random.random(), torch.rand(())
    finally:
        config.worker_deactivate()
    assert interleaved == first
    assert first[0] == expected(config, 1, 3)
    assert len(set(first)) == 3


@pytest.mark.parametrize("name", ["encode_gen", "encode_gen_ahead"])
def test_generator_leaves_the_callers_stream_alone(name: str) -> None:
    """The caller's draws between a generator's items stay its own (also one item ahead)."""
    config = WorkerConfig(rank=0, world_size=1, num_workers=2)
    enc = Encoder()

    def caller_draws(with_generator: int) -> list[tuple[float, float, float]]:
        random.seed(9)
        np.random.seed(9)
        torch.manual_seed(9)
        config.worker_activate(3, override_global_rank=1)
        try:
            mine = [draws()]
            for _ in getattr(enc, name)(with_generator):
                mine.append(draws())
        finally:
            config.worker_deactivate()
        return mine

    # Three items (each a seeded draw) between the caller's draws, against no generator at all.
    assert caller_draws(3) == [*caller_draws(0), *draws_after(9, 3)]


def draws_after(seed: int, n: int) -> list[tuple[float, float, float]]:
    """The caller's draws 2..n+1 from ``seed`` (the first one is in ``caller_draws(0)``)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return [draws() for _ in range(n + 1)][1:]


class Failing:
    @seeded_stateless
    def items(self, fail_at: int):
        for i in range(3):
            if i == fail_at:
                raise ValueError(f"item {i} is bad")
            yield i, random.random()

    @seeded_stateless(run_ahead=True)
    def items_ahead(self, fail_at: int):
        yield from Failing.items.__wrapped__(self, fail_at)


@pytest.mark.parametrize("name", ["items", "items_ahead"])
def test_generator_errors_surface_where_the_generator_raises(name: str) -> None:
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    config.worker_activate(0)
    try:
        got = []
        with pytest.raises(ValueError, match="item 2 is bad"):
            for item in getattr(Failing(), name)(2):
                got.append(item[0])
        assert got == [0, 1]  # both items before the bad one were delivered first
        random.seed(4)
        with pytest.raises(ValueError, match="item 0 is bad"):
            next(getattr(Failing(), name)(0))
        assert random.random() == random.Random(4).random()  # the caller's state is back
    finally:
        config.worker_deactivate()


def test_plain_generators_are_not_run_ahead() -> None:
    """Without run_ahead a generator may change an item after yielding it (as unwrapped)."""

    class Growing:
        @seeded_stateless
        def shared(self):
            out: list[int] = []
            for i in range(3):
                out.append(i)
                yield out

    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    config.worker_activate(0)
    try:
        seen = [list(item) for item in Growing().shared()]  # copied when received
    finally:
        config.worker_deactivate()
    assert seen == [[0], [0, 1], [0, 1, 2]]


def test_outside_a_loader_runs_unseeded() -> None:
    assert current_seed_args() is None
    random.seed(5)
    a = Encoder().encode(0)
    random.seed(5)
    assert Encoder().encode(0)[0] == a[0] == random.Random(5).random()


def test_marks_stateless_and_keeps_failure_tolerance() -> None:
    enc = Encoder()
    assert get_stateless(enc.encode) and get_stateless(enc.encode_gen)
    assert get_failure_tolerance(enc.encode_gen, 100) == 7
    assert get_failure_tolerance(enc.encode, 100) == 100
    with pytest.raises(ValueError, match="failure_tolerance"):
        seeded_stateless(failure_tolerance=-1)(lambda self: None)


class Logged:
    """A run-ahead generator that logs when its code runs, seeded or not (``seed_if``)."""

    def __init__(self, seeded: bool, log: list[str]) -> None:
        self.seeded, self.log = seeded, log

    def _items(self, n: int, fail_at: int | None):
        try:
            for i in range(n):
                self.log.append(f"make {i}")
                if i == fail_at:
                    raise ValueError(f"item {i} is bad")
                yield i
            self.log.append("end")
        finally:
            self.log.append("closed")

    @seeded_stateless(run_ahead=True, seed_if=lambda self: self.seeded)
    def items(self, n: int, fail_at: int | None = None):
        yield from self._items(n, fail_at)


@pytest.mark.parametrize(
    "n, fail_at, take",
    [(0, None, 9), (1, None, 9), (3, None, 9), (3, 1, 9), (3, 0, 9), (4, None, 2)],
)
def test_unseeded_run_ahead_takes_the_seeded_steps(n: int, fail_at: int | None, take: int) -> None:
    """seed_if=False runs the same steps as the seeded switch loop: each item computed with the
    one before it, an error raised ahead surfaces at its item, an early close closes the
    generator."""

    def run(seeded: bool) -> list[str]:
        log: list[str] = []
        config = WorkerConfig(rank=0, world_size=1, num_workers=0)
        config.worker_activate(0)
        try:
            it = Logged(seeded, log).items(n, fail_at)
            for _ in range(take):
                try:
                    log.append(f"got {next(it)}")
                except StopIteration:
                    log.append("stop")
                    break
                except ValueError as exc:
                    log.append(f"error {exc}")
                    break
            it.close()
            log.append("consumer closed")
        finally:
            config.worker_deactivate()
        return log

    assert run(seeded=False) == run(seeded=True)
    if (n, fail_at, take) == (3, None, 9):  # the steps themselves: each item made one early
        assert run(seeded=True) == [
            "make 0", "make 1", "got 0", "make 2", "got 1", "end", "closed", "got 2", "stop",
            "consumer closed",
        ]  # fmt: skip
    if (n, fail_at, take) == (3, 1, 9):  # the error made ahead surfaces at its item
        assert run(seeded=True) == [
            "make 0", "make 1", "closed", "got 0", "error item 1 is bad", "consumer closed",
        ]  # fmt: skip
