# SPDX-License-Identifier: Apache-2.0
"""The ``energon-pack`` command line (click, one private module per command)."""

from energon_pack_tools.cli._main import main

__all__ = ["main"]
