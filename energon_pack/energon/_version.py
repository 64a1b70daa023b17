# SPDX-License-Identifier: Apache-2.0
"""The megatron-energon version this room was verified against, and the check that refuses others."""

from __future__ import annotations

__all__ = ["VERIFIED_ENERGON", "VERIFIED_ENERGON_VERSIONS", "check_energon_version"]

#: The megatron-energon release every workaround in :mod:`energon_pack.energon` was verified
#: with (state layout, ``PackingDataset`` internals, restore keys, the bugs they avoid).
VERIFIED_ENERGON = "7.4.1"
#: ``major.minor`` series carry-over accepts.
VERIFIED_ENERGON_VERSIONS: tuple[str, ...] = (VERIFIED_ENERGON.rsplit(".", 1)[0],)


def check_energon_version(
    version: str | None = None,
    *,
    feature: str = "Carry-over packing",
    relies_on: str = "PackingDataset's reading buffer and state layout",
    off: str = "disable carry-over (carry_over=None on the task encoder)",
) -> str:
    """Return the installed megatron-energon version; raise RuntimeError if it is not verified.

    ``version`` overrides the installed version (for tests); ``feature``, ``relies_on`` and
    ``off`` name, in the message, what needs the check, the internals it uses and how to turn
    it off.
    """
    if version is None:
        import megatron.energon

        version = str(getattr(megatron.energon, "__version__", "unknown"))
    if not any(version == v or version.startswith(v + ".") for v in VERIFIED_ENERGON_VERSIONS):
        verified = ", ".join(f"{v}.x" for v in VERIFIED_ENERGON_VERSIONS)
        major, minor = VERIFIED_ENERGON.split(".")[:2]
        upper = f"{major}.{int(minor) + 1}"
        raise RuntimeError(
            f"{feature} relies on megatron-energon internals ({relies_on}) and was verified "
            f"only with megatron-energon {verified}; the installed version is {version!r}. "
            f"Install a verified version (pip install 'megatron-energon>={VERIFIED_ENERGON},"
            f"<{upper}') or {off}."
        )
    return version
