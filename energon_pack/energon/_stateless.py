# SPDX-License-Identifier: Apache-2.0
"""``seeded_stateless``: energon's ``@stateless(restore_seeds=True)`` without its bugs 1 and 2.

A task-encoder function that draws random numbers must draw the same ones when energon re-runs
it (``restore_sample``, buffers rebuilt after ``restore_state``): every CPU RNG is seeded from
``(worker_seed, sample index or restore key)`` before the call and the caller's state restored
after it. Unlike energon's decorator it recomputes the worker seed on every call and keeps
``failure_tolerance``; outside a loader the function runs unseeded. Generators are supported.
Bugs and tests: docs/concepts/energon.md.

    class MyEncoder(PackingTaskEncoder):
        @seeded_stateless(failure_tolerance=10)
        def encode_sample(self, sample): ...
"""

from __future__ import annotations

import enum
import functools
import inspect
import random
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar, overload

import numpy
import torch
from megatron.energon import WorkerConfig
from megatron.energon.rng import SystemRng

__all__ = ["SeedSource", "current_seed_args", "seeded_stateless"]

F = TypeVar("F", bound=Callable[..., Any])


def _seed_cpu_rngs(*seed_args: Any) -> None:
    """Seed ``random``, NumPy and torch's CPU generator from ``seed_args`` (energon's hash).

    Same seed value as energon's ``SystemRng.seed_args``, but only the generators that
    ``SystemRng.save_state`` saves and restores: ``torch.manual_seed`` also queues a lazy CUDA
    seed (a stack trace formatted on every call) that the wrapper would never restore.
    """
    seed = SystemRng.get_seed_from_args(*seed_args)
    torch.default_generator.manual_seed(seed)
    numpy.random.seed(seed)
    random.seed(seed)


class SeedSource(enum.Enum):
    """What, besides the worker seed, a seeded call's RNG seed is derived from.

    Use ``RESTORE_KEY`` for generator ``encode_sample`` functions: energon resumes an interrupted
    generator under a sample index one too high (bug 4), while the input's restore key is the
    same in the first run, after resume and in ``restore_sample``.
    """

    #: The sample index of the current stage (energon's ``@stateless(restore_seeds=True)``).
    SAMPLE_INDEX = "sample_index"
    #: The ``__restore_key__`` of the first positional argument that has one (the input sample).
    RESTORE_KEY = "restore_key"


def _restore_key(args: tuple[Any, ...]) -> Any:
    for arg in args:
        key = (
            arg.get("__restore_key__")
            if isinstance(arg, dict)
            else getattr(arg, "__restore_key__", None)
        )
        if key:
            return key
    return None


def current_seed_args(
    seed_from: SeedSource = SeedSource.SAMPLE_INDEX, args: tuple[Any, ...] = ()
) -> tuple[Any, ...] | None:
    """The seed arguments of the active energon worker, or ``None`` outside one.

    ``(worker_seed, sample_index)``; with ``RESTORE_KEY``, ``(worker_seed, "key", restore_key)``
    when one of ``args`` has a restore key (else the sample index, as a fallback).
    """
    config = WorkerConfig.active_worker_config
    if config is None:
        return None
    if seed_from is SeedSource.RESTORE_KEY:
        key = _restore_key(args)
        if key is not None:
            return config.worker_seed(), "key", key
    return config.worker_seed(), config.active_worker_sample_index


def _wrap_function(
    fn: Callable[..., Any], seed_from: SeedSource, seed_if: Callable[[Any], bool] | None
) -> Callable[..., Any]:
    @functools.wraps(fn)
    def seeded(*args: Any, **kwargs: Any) -> Any:
        if seed_if is not None and not seed_if(args[0]):
            return fn(*args, **kwargs)
        seed = current_seed_args(seed_from, args)
        if seed is None:
            return fn(*args, **kwargs)
        outer = SystemRng.save_state()
        _seed_cpu_rngs(*seed)
        try:
            return fn(*args, **kwargs)
        finally:
            SystemRng.restore_state(outer)

    return seeded


class _Switch:
    """The generator's own RNG state, switched in around each step (seeded at the first)."""

    def __init__(self, seed: tuple[Any, ...]) -> None:
        self.seed = seed
        self.inner: Any = None  # the generator's state between steps (None: not seeded yet)
        self.outer: Any = None

    def enter(self) -> None:
        self.outer = SystemRng.save_state()
        if self.inner is None:
            _seed_cpu_rngs(*self.seed)
        else:
            SystemRng.restore_state(self.inner)

    def leave(self, keep: bool) -> None:
        if keep:
            self.inner = SystemRng.save_state()
        SystemRng.restore_state(self.outer)


class _NoSwitch:
    """No RNG handling: an unseeded generator keeps the same steps (and run-ahead timing)."""

    def enter(self) -> None:
        pass

    def leave(self, keep: bool) -> None:
        pass


def _wrap_generator(
    fn: Callable[..., Any],
    seed_from: SeedSource,
    run_ahead: bool,
    seed_if: Callable[[Any], bool] | None,
) -> Callable[..., Any]:
    """Run the generator under its own RNG state: each ``next`` switches to it and back once
    (seeding on the first call). With ``run_ahead`` each switch also computes the next item (the
    same items and draws, the generator's code one item early); an exception raised ahead is
    re-raised when the consumer asks for that item. When ``seed_if`` says no, the same steps run
    (one item ahead, too) without touching any RNG.
    """

    @functools.wraps(fn)
    def seeded(*args: Any, **kwargs: Any) -> Generator[Any, None, None]:
        if WorkerConfig.active_worker_config is None:  # outside a loader: unseeded
            yield from fn(*args, **kwargs)
            return
        switch: _Switch | _NoSwitch = _NoSwitch()
        if seed_if is None or seed_if(args[0]):
            switch = _Switch(current_seed_args(seed_from, args))  # type: ignore[arg-type]
        steps = _run_ahead if run_ahead else _one_by_one
        yield from steps(iter(fn(*args, **kwargs)), switch)

    return seeded


def _one_by_one(it: Iterator[Any], switch: _Switch | _NoSwitch) -> Generator[Any, None, None]:
    """The items of ``it``, each computed when the consumer asks for it, in one switch."""
    try:
        while True:
            keep = True  # the generator's state, for its next step
            switch.enter()
            try:
                item = next(it)
            except StopIteration:
                keep = False
                return
            finally:
                switch.leave(keep=keep)
            yield item
    finally:
        it.close()


def _run_ahead(it: Iterator[Any], switch: _Switch | _NoSwitch) -> Generator[Any, None, None]:
    """The items of ``it``, each computed in one switch together with the one after it; an
    exception raised ahead is re-raised when the consumer asks for that item."""
    try:
        item: Any = _NOTHING
        error: Exception | None = None
        while True:
            keep = True  # the generator's state, for its next step
            switch.enter()
            try:
                if item is _NOTHING:
                    item = next(it)
                ahead = next(it)
            except StopIteration:
                keep, ahead = False, _NOTHING
                if item is _NOTHING:  # no item at all
                    return
            except Exception as exc:
                if item is _NOTHING:  # the first item: raised now
                    raise
                keep, ahead, error = False, _NOTHING, exc  # re-raised when asked for
            finally:
                switch.leave(keep=keep)
            yield item
            if ahead is _NOTHING:
                if error is not None:
                    raise error
                return
            item = ahead
    finally:
        it.close()


_NOTHING = object()


@overload
def seeded_stateless(fn: F) -> F: ...


@overload
def seeded_stateless(
    *,
    failure_tolerance: int | None = None,
    seed_from: SeedSource = SeedSource.SAMPLE_INDEX,
    run_ahead: bool = False,
    seed_if: Callable[[Any], bool] | None = None,
) -> Callable[[F], F]: ...


def seeded_stateless(
    fn: F | None = None,
    *,
    failure_tolerance: int | None = None,
    seed_from: SeedSource = SeedSource.SAMPLE_INDEX,
    run_ahead: bool = False,
    seed_if: Callable[[Any], bool] | None = None,
) -> F | Callable[[F], F]:
    """Mark ``fn`` stateless for energon and seed all RNGs from the worker seed on every call.

    Args:
        fn: A task-encoder method (plain or generator function).
        failure_tolerance: Consecutive exceptions energon's handler tolerates in this function
            before raising ``FatalSampleError`` (``None``: the task encoder's default, ``0``:
            unlimited), exactly like ``@stateless(failure_tolerance=...)``.
        seed_from: What the seed is derived from besides the worker seed (:class:`SeedSource`).
        run_ahead: Generators only: compute each item together with the one before it, one RNG
            switch per item instead of one per ``next`` (a one-item generator: 1 save and 1
            restore instead of 3 and 3). Only for generators that yield a
            new object each time and whose side effects may happen one item early.
        seed_if: Called with the first argument (``self`` of a method) on every call: ``False``
            runs it without seeding, saving or restoring any RNG (for an encoder that draws no
            random numbers: the same results without the two state copies per call). ``None``:
            always seed.
    """
    if fn is None:
        return lambda f: seeded_stateless(
            f,
            failure_tolerance=failure_tolerance,
            seed_from=seed_from,
            run_ahead=run_ahead,
            seed_if=seed_if,
        )
    if failure_tolerance is not None and failure_tolerance < 0:
        raise ValueError(f"failure_tolerance={failure_tolerance} must be >= 0 (0: unlimited).")
    seed_from = SeedSource(seed_from)
    if inspect.isgeneratorfunction(fn):
        wrapped = _wrap_generator(fn, seed_from, run_ahead, seed_if)
    else:
        wrapped = _wrap_function(fn, seed_from, seed_if)
    wrapped.__stateless__ = True  # type: ignore[attr-defined]
    if failure_tolerance is not None:
        wrapped.__failure_tolerance__ = failure_tolerance  # type: ignore[attr-defined]
    return wrapped  # type: ignore[return-value]
