# SPDX-License-Identifier: Apache-2.0
"""The megatron-energon version this room was verified against, and the check that refuses others."""

from __future__ import annotations

__all__ = ["VERIFIED_ENERGON", "VERIFIED_ENERGON_VERSIONS", "check_energon_version"]

#: The megatron-energon release every workaround in :mod:`energon_pack.energon` was verified
#: with (state layout, ``PackingDataset`` internals, restore keys, the bugs they avoid).
VERIFIED_ENERGON = "7.4.1"
#: ``major.minor`` series carry-over accepts.
VERIFIED_ENERGON_VERSIONS: tuple[str, ...] = (VERIFIED_ENERGON.rsplit(".", 1)[0],)


def check_energon_version(version: str | None = None) -> str:
    """Return the installed megatron-energon version; raise RuntimeError if it is not verified.

    ``version`` overrides the installed version (for tests).
    """
    if version is None:
        import megatron.energon

        version = str(getattr(megatron.energon, "__version__", "unknown"))
    if not any(version == v or version.startswith(v + ".") for v in VERIFIED_ENERGON_VERSIONS):
        verified = ", ".join(f"{v}.x" for v in VERIFIED_ENERGON_VERSIONS)
        major, minor = VERIFIED_ENERGON.split(".")[:2]
        upper = f"{major}.{int(minor) + 1}"
        raise RuntimeError(
            f"Carry-over packing relies on megatron-energon internals (PackingDataset's reading "
            f"buffer and state layout) and was verified only with megatron-energon {verified}; "
            f"the installed version is {version!r}. Install a verified version "
            f"(pip install 'megatron-energon>={VERIFIED_ENERGON},<{upper}') or disable carry-over "
            f"(carry_over=None on the task encoder)."
        )
    return version
