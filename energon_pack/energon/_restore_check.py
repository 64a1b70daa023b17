# SPDX-License-Identifier: Apache-2.0
"""The resume check in the main process, when the state is restored.

energon restores a worker's dataset state only inside that worker, at the first batch: a changed
configuration was refused there, wrapped in a DataLoader-worker traceback, and a changed
``num_workers`` met energon's bare ``AssertionError`` first. :func:`install_restore_check` wraps
``SavableDataLoader.restore_state_rank`` (once, for every loader; ``restore_state_global`` calls
it too) so that it first runs :func:`check_restore`: for a loader whose dataset holds a
:class:`ResumeGuard`, the state's saved fingerprint is compared with the loader's, and the saved
worker count with the loader's, before energon looks at the state. Loaders without a guard are
untouched. The guard still checks again in each worker (a state restored another way).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FINGERPRINT_FORMAT",
    "ResumeConfigError",
    "changes",
    "check_restore",
    "install_restore_check",
    "refusal",
    "saved_fingerprint",
    "saved_num_workers",
]

#: The fingerprint entry that marks states whose fingerprint holds the tokenizer's serialized
#: form, the dataset's identity and energon's reading settings (energon-pack session 8).
FINGERPRINT_FORMAT_KEY = "fingerprint_format"
FINGERPRINT_FORMAT = "2"


class ResumeConfigError(ValueError):
    """A saved loader state is restored with a configuration that makes different packs."""


_MARK = "_energon_pack_restore_check"


def install_restore_check() -> None:
    """Make ``SavableDataLoader.restore_state_rank`` run :func:`check_restore` first (once)."""
    from megatron.energon.savable_loader import SavableDataLoader

    original = SavableDataLoader.restore_state_rank
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def restore_state_rank(self: Any, state: Any) -> None:
        check_restore(self, state)
        original(self, state)

    setattr(restore_state_rank, _MARK, True)
    SavableDataLoader.restore_state_rank = restore_state_rank  # type: ignore[method-assign]


def check_restore(loader: Any, state: Any) -> None:
    """Raise :class:`ResumeConfigError` naming every change between ``state`` (a
    ``SavableDataLoaderState`` from ``save_state_rank``) and ``loader``; nothing for a loader
    without a :class:`ResumeGuard` or an initial (``None``) state."""
    guard = _find_guard(getattr(loader, "dataset", None))
    if state is None or guard is None:
        return
    changed = []
    saved = saved_fingerprint(state)
    if saved is not None:
        changed = guard.changes(saved)
    workers = saved_num_workers(state)
    now = int(getattr(loader, "num_workers", 0) or 0)
    fixed = []
    if workers is not None and workers != now:
        changed = [c for c in changed if not c.startswith("num_workers:")]
        fixed.append(
            f"num_workers: {workers} -> {now} (energon restores a state only with the "
            "num_workers it was saved with: this change cannot be accepted)"
        )
    if changed or fixed:
        raise ResumeConfigError(refusal(fixed + changed, acceptable=changed))


def saved_num_workers(state: Any) -> int | None:
    """The ``num_workers`` a loader state was saved with (0: one plain state, no workers)."""
    from megatron.energon.savable_loader import SavableDatasetCheckpoint

    worker_states = getattr(state, "worker_states", None)
    if not isinstance(worker_states, list) or not worker_states:
        return None
    if all(isinstance(s, SavableDatasetCheckpoint) for s in worker_states):
        return len(worker_states)
    return 0 if len(worker_states) == 1 else None


def saved_fingerprint(state: Any) -> Mapping[str, str] | None:
    """The :class:`ResumeGuard` fingerprint inside a loader state (the first worker's that has
    one; a worker saved before its first checkpoint holds none), or None."""
    for worker_state in getattr(state, "worker_states", None) or ():
        inner = getattr(worker_state, "state", worker_state)  # a worker's checkpoint
        inner = getattr(inner, "dataset_state", inner)
        found = _find_fingerprint(inner, depth=0)
        if found is not None:
            return found
    return None


def _find_fingerprint(state: Any, depth: int) -> Mapping[str, str] | None:
    if depth > 12:
        return None
    if isinstance(state, Mapping):
        fingerprint = state.get("_fingerprint")
        if isinstance(fingerprint, Mapping):
            return fingerprint
        children: Any = state.values()
    elif isinstance(state, (list, tuple)):
        children = state
    else:
        return None
    for child in children:
        found = _find_fingerprint(child, depth + 1)
        if found is not None:
            return found
    return None


def _find_guard(dataset: Any) -> Any:
    """The first :class:`ResumeGuard` down the chain of ``.dataset`` wrappers (energon's loader wrapper, the
    user's own wrappers)."""
    for _ in range(8):
        if dataset is None or type(dataset).__name__ == "ResumeGuard":
            return dataset
        dataset = getattr(dataset, "dataset", None)
    return None


def refusal(changed: list[str], acceptable: list[str]) -> str:
    """The one-line message of a :class:`ResumeConfigError` naming each change."""
    text = (
        "The saved loader state was made with another configuration, which would give "
        "different packs: " + "; ".join(changed) + ". Restore it with the configuration "
        "it was saved with"
    )
    if not acceptable:
        return text + "."
    return (
        text + ", or, to resume with the change on purpose, set "
        "encoder.resume_accept_changes = {" + ", ".join(_names(acceptable)) + "} on the task "
        "encoder before building the loader."
    )


def _names(changed: list[str]) -> list[str]:
    """The changed entries to accept, without those under a changed parent."""
    names = [c.split(":", 1)[0] for c in changed]
    return [repr(n) for n in names if not any(n.startswith(p + ".") for p in names)]


def changes(saved: Mapping[str, str], now: Mapping[str, str], accept: frozenset[str]) -> list[str]:
    """``"name: saved -> now"`` for every entry that differs and is not accepted. A state saved
    before :data:`FINGERPRINT_FORMAT` holds fewer entries: those it lacks are not compared."""
    out = []
    old_format = saved and FINGERPRINT_FORMAT_KEY not in saved
    for name in sorted(set(saved) | set(now)):
        if old_format and name not in saved:
            continue
        old, new = saved.get(name, "(absent)"), now.get(name, "(absent)")
        accepted = any(name == a or name.startswith(a + ".") for a in accept) or "*" in accept
        if old != new and not accepted:
            out.append(f"{name}: {old} -> {new}")
    return out
