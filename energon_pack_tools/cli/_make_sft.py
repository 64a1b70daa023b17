# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset --task sft``: prompt/response JSONL -> a crude energon dataset
for ``SFTPackingTaskEncoder`` (one ``{"prompt", "response", "system"?}`` object per line). A bad
line names ``file:line`` and the fix; the partial output is removed. See docs/howto/sft.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from energon_pack_tools.cli._output import plural

__all__ = ["write_sft"]

#: The fields an SFT example keeps (``system`` optional).
FIELDS = ("prompt", "response", "system")


def _examples(files: Sequence[Path], counts: dict[str, int]) -> Iterator[dict[str, bytes]]:
    from energon_pack_tools._vlm_datasets import (
        iter_llava_records,  # the same JSONL reading and errors
    )

    for file in files:
        for where, record in iter_llava_records(file):
            kept = {k: record[k] for k in FIELDS if record.get(k) is not None}
            bad = [k for k in FIELDS if k in kept and not isinstance(kept[k], str)]
            missing = [k for k in FIELDS[:2] if k not in kept]
            if missing or bad:
                what = (
                    f"no string field {missing[0]!r}"
                    if missing
                    else f"{bad[0]!r} is {type(kept[bad[0]]).__name__}, not a string"
                )
                raise ValueError(
                    f"{where}: {what} (fields: {', '.join(sorted(record))}); an SFT line is "
                    '{"prompt": "...", "response": "..."} (optional "system"): rename the '
                    "fields (e.g. instruction -> prompt, output -> response) or fix the line."
                )
            counts["pairs"] += 1
            counts["system"] += "system" in kept
            yield {"json": json.dumps(kept).encode()}


def write_sft(out: Path, inputs: Sequence[Path], samples_per_shard: int) -> list[str]:
    """Write the prompt/response examples of the ``.jsonl`` ``inputs`` to ``out``; the summary.

    Raises:
        click.UsageError: an input that is not a ``.jsonl`` file.
        ValueError: a bad line, named (the caller removes what was written).
    """
    for path in inputs:
        if path.is_dir() or path.suffix != ".jsonl":
            raise click.UsageError(
                f"{path}: --task sft reads .jsonl files, one "
                '{"prompt": ..., "response": ...} object per line; name each file.'
            )
    from energon_pack_tools._datasets import _write_shards, prepare_dataset

    counts: dict[str, Any] = {"pairs": 0, "system": 0}
    _write_shards(out, _examples(inputs, counts), samples_per_shard)
    prepare_dataset(
        out, "--non-interactive", "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset"
    )
    shards = -(-counts["pairs"] // samples_per_shard)
    return [
        f"wrote {plural(counts['pairs'], 'prompt/response pair')} ({counts['system']:,} with a "
        f"system prompt) in {plural(shards, 'shard')} to {out} (crude webdataset for "
        "SFTPackingTaskEncoder)",
        f"next: energon-pack analyze {out} --task sft --tokenizer TOKENIZER_DIR --pack-size 4096 "
        "--buffer-size 256",
    ]
