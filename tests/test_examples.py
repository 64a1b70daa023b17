# SPDX-License-Identifier: Apache-2.0
"""Every example in ``examples/`` runs with no arguments and prints its key line.

Each runs in a fresh subprocess (as a user would run it), on the tiny data it makes itself.
Distributed examples (``examples/distributed_*``) need ``torchrun`` and are tested with the
distributed code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: example file -> lines its output must contain (each one fails if the example's check fails)
EXPECTED: dict[str, tuple[str, ...]] = {
    "train_llm.py": ("resume: losses identical after step 4", "packing: packs="),
    "captioning.py": (
        "mrope_position_ids   (3, 2, 64)",
        "is all placeholders: True; no loss predicting them: True",
    ),
    "custom_task.py": ("header tokens, none of them a target: True", "packs; packs="),
    "loss_and_stats.py": (
        "totals from 2-worker batches equal the 0-worker run: True",
        "main-process stats with 2 workers: packs=0",
    ),
    "vqa.py": ("an image token is a target: False", "image_grid_thw       [["),
    "conversation.py": ("position_ids         (3, 2, 96) (mRoPE)", "packs=2 documents=8"),
}


def test_every_example_is_listed() -> None:
    found = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith(("distributed_", "_"))}
    assert found == set(EXPECTED), f"add the new example to EXPECTED: {found ^ set(EXPECTED)}"


@pytest.mark.slow  # each example in a subprocess
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    for line in EXPECTED[name]:
        assert line in proc.stdout, f"{name}: {line!r} not in output:\n{proc.stdout}"
