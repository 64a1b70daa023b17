# SPDX-License-Identifier: Apache-2.0
"""Entry point of the ``energon-pack`` command.

Each sub-command lives in its own module of ``energon_pack_tools.cli`` and exposes a click
command named ``command``. Modules are imported only when their command runs, so
``energon-pack simulate`` does not pay for importing torch or megatron-energon.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

# command name -> module (relative to energon_pack_tools.cli) that defines ``command``
COMMANDS: dict[str, str] = {
    "simulate": "_simulate_command",
    "analyze": "_analyze_command",
    "demo": "_demo_command",
    "make-dataset": "_make_dataset_command",
    "check": "_check_command",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if _available(name))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(name):
            return None
        return importlib.import_module(f"energon_pack_tools.cli.{COMMANDS[name]}").command


def _available(name: str) -> bool:
    return importlib.util.find_spec(f"energon_pack_tools.cli.{COMMANDS[name]}") is not None


@click.group(cls=_LazyGroup)
@click.version_option(package_name="energon-pack")
def main() -> None:
    """Sequence packing for megatron-energon.

    \b
    Start with `energon-pack demo`; then, with your own files:
      energon-pack make-dataset OUT FILES...   text/JSONL files -> an energon dataset
      energon-pack analyze OUT --tokenizer DIR --pack-size N --buffer-size B
      energon-pack simulate LENGTHS_FILE ...   the same from a list of token counts
      energon-pack check DATASET               damaged shards, bad or duplicate keys
    """


if __name__ == "__main__":  # pragma: no cover
    main()
