# SPDX-License-Identifier: Apache-2.0
"""``python -m energon_pack_tools.cli``: the same as the ``energon-pack`` command."""

from energon_pack_tools.cli._main import main

main()
