# SPDX-License-Identifier: Apache-2.0
"""Test helpers shipped for users: tiny datasets, tokenizers and models, and contract checks.

Import from the submodules (``energon_pack.testing.datasets`` etc.); this package imports nothing
heavy by itself.
"""
