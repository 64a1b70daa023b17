# SPDX-License-Identifier: Apache-2.0
"""A new task: subclass ``PackingTaskEncoder`` for a new sample type (code with its filename).

The base class owns packing, restore keys, over-long handling and batching; a task implements
one method, ``encode_document``. Here each sample is a source file: the model reads
``# file: <name>`` as context (no loss) and learns the code (loss)::

    tokens     <s>  #  file  :  util.py  \\n  def  f  ...  </s>
    loss_mask   F   F   F    F     F      F    T   T   ...   T

The data is a crude JSONL dataset (``{"filename": ..., "code": ...}`` per line, prepared with
``energon prepare``) cooked into ``CodeSample`` by a ``Cooker``. Runs with no arguments in a few
seconds on the standard library's own files:

    python examples/custom_task.py
"""

from __future__ import annotations

import os
import sysconfig
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from megatron.energon import Cooker, Sample, basic_sample_keys, edataclass, stateless  # noqa: E402

from energon_pack.encoding import DocumentTokenizer  # noqa: E402
from energon_pack.samples import EncodedSample  # noqa: E402
from energon_pack.task_encoders import PackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader
from energon_pack_tools import make_jsonl_dataset, train_bpe_tokenizer

PACK_SIZE = 512


@edataclass
class CodeSample(Sample):
    """One source file."""

    #: Path of the file, shown to the model as context.
    filename: str
    #: The file's text.
    code: str


@stateless
def cook_code(sample: dict) -> CodeSample:
    """Crude JSONL ``{"filename", "code"}`` -> ``CodeSample`` (a bad line names its key)."""
    record = sample["json"]
    if not isinstance(record.get("filename"), str) or not isinstance(record.get("code"), str):
        raise ValueError(f"sample {sample['__key__']!r} needs string 'filename' and 'code'.")
    return CodeSample(**basic_sample_keys(sample), filename=record["filename"], code=record["code"])


class CodeTaskEncoder(PackingTaskEncoder[CodeSample]):
    """Packs source files; loss on the code only, not on the filename header."""

    cookers = (Cooker(cook_code),)

    def __init__(self, tokenizer: str, **packing) -> None:
        self.tokenizer = DocumentTokenizer(tokenizer)
        packing.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        super().__init__(**packing)

    def encode_document(self, sample: CodeSample) -> EncodedSample:
        ids = self.tokenizer.ids
        header = [ids.bos, *self.tokenizer.encode_text(f"# file: {sample.filename}\n")]
        body = [*self.tokenizer.encode_text(sample.code), ids.eod]
        loss_mask = torch.tensor([False] * len(header) + [True] * len(body))
        tokens = torch.tensor(header + body, dtype=torch.int64)
        return EncodedSample.derive_from(sample, tokens=tokens, loss_mask=loss_mask)


def main() -> None:
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]
    # The head of each file, 200..1200 characters (a mix of short and long documents).
    records = [
        {"filename": f.name, "code": f.read_text(encoding="utf-8")[: 200 + (i * 137) % 1000]}
        for i, f in enumerate(files)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_bpe_tokenizer(
            Path(tmp) / "tok", [r["code"] for r in records], vocab_size=1024
        )
        dataset = make_jsonl_dataset(Path(tmp) / "code.jsonl", records)
        # Over-long files are split into consecutive documents "key#0", "key#1", ...
        encoder = CodeTaskEncoder(str(tokenizer), pack_size=PACK_SIZE, overlong="split")
        packs = list(make_loader(dataset, encoder, packing_buffer_size=16, repeat=False))
        for pack in packs[:5]:
            print(
                f"pack {pack.__key__[:48]:<48} {pack.length:>3} tokens, "
                f"{len(pack.doc_lengths)} docs, {int((pack.labels != -100).sum())} targets"
            )
        print(f"... {len(packs)} packs; {encoder.stats.summary()}")
        # The header is context: no position predicts a header token as its target.
        first = packs[0]
        filename = records[int(first.sample_keys[0].split("#")[0])]["filename"]
        header_len = len(encoder.tokenizer.encode_text(f"# file: {filename}\n")) + 1
        no_loss = bool((first.labels[: header_len - 1] == -100).all())
        print(f"first document: {header_len} header tokens, none of them a target: {no_loss}")


if __name__ == "__main__":
    main()
