# SPDX-License-Identifier: Apache-2.0
"""The ``energon-pack`` command line (click, one module per command)."""
