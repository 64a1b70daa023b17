# SPDX-License-Identifier: Apache-2.0
"""Plain helpers of the VLM tests (importable by name: ``from vlm_helpers import png``; a
``from conftest import ...`` would pick whichever test folder's conftest was imported first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The tokens a Qwen2-VL-style tokenizer has besides the image placeholder.
VLM_TOKENS = ["<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
#: Pack size of the VLM tests (a 56x84 image is 6 tokens, a 4-frame 56x56 video 8).
VLM_PACK_SIZE = 64


def png(width: int, height: int, seed: int) -> bytes:
    from energon_pack_tools import random_png_bytes

    return random_png_bytes(width, height, seed=seed)


def chat_sample(key: str, turns: list[str], **media: Any) -> Any:
    """A ``ConversationSample`` of ``turns`` alternating user, assistant:
    ``chat_sample("k", ["<image> is it", "a seed"], images=[png(28, 28, 1)])``."""
    from energon_pack.task_encoders import ConversationSample

    roles = ["user", "assistant"] * len(turns)
    return ConversationSample(
        __key__=key,
        __restore_key__=(),
        conversation=[{"role": r, "content": t} for r, t in zip(roles, turns)],
        **media,
    )


def write_frames(folder: Path, n: int, size: tuple[int, int], seed: int) -> Path:
    """``n`` PNG frames ``0000.png``... of ``size`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"{i:04d}.png").write_bytes(png(*size, seed=seed * 100 + i))
    return folder


def assert_wrappers_whole(tokens: Any, start: int, end: int) -> None:
    """The vision start/end tokens of a piece nest and balance: no cut parted an item (or a
    Qwen3-VL video's timestamps) from the start/end tokens around it."""
    depth = 0
    for t in tokens.tolist():
        depth += (t == start) - (t == end)
        assert depth >= 0, tokens.tolist()
    assert depth == 0, tokens.tolist()


def vlm_datasets(
    tmp: Any,
    name: str,
    sizes: list[tuple[int, int]],
    *,
    seed: int = 5,
    records: int = 8,
    system: bool = False,
    llava_roles: bool = True,
    media_root_option: bool = False,
) -> dict[str, Any]:
    """A VQA dataset (8 samples, one image each) and LLaVA conversations with 0..3 images in
    several turns (the last image in a later turn; with ``system`` a system turn in every third)
    written by ``energon-pack make-dataset --task conversation``: per key the messages and the
    image bytes. ``llava_roles``: ``human``/``gpt`` in the file (else ``user``/``assistant``);
    ``media_root_option``: the JSONL lies outside the image folder and ``--media-root`` names it
    (else ``llava.json`` lies beside the images, the default media root)."""
    import json
    import random

    from click.testing import CliRunner

    from energon_pack_tools import make_vqa_dataset, sample_key, synthetic_texts
    from energon_pack_tools.cli import main

    rng = random.Random(seed)
    texts = synthetic_texts(60, seed=8, min_words=1, max_words=5)
    images = [png(*sizes[i % len(sizes)], seed=i) for i in range(8)]
    answers = [[texts[i]] for i in range(8)]
    vqa = make_vqa_dataset(
        tmp.mktemp(f"{name}_vqa"), images, texts[10:18], answers, samples_per_shard=3
    )
    vqa_ref = {
        sample_key(i): ([("user", f"<image>\n{texts[10 + i]}"), ("assistant", texts[i])], [b])
        for i, b in enumerate(images)
    }
    root = tmp.mktemp(f"{name}_media")
    roles = {"user": "human", "assistant": "gpt"} if llava_roles else {}
    rows, conv_ref = [], {}
    for i in range(records):
        n = i % 4
        names = [f"c{i}_{j}.png" for j in range(n)]
        for j, file in enumerate(names):
            (root / file).write_bytes(png(*rng.choice(sizes), seed=100 + 10 * i + j))
        q, a, q2, a2 = texts[20 + 4 * i : 24 + 4 * i]
        turns = [("user", "<image> " * (n - 1 if n > 1 else n) + q), ("assistant", a)]
        if n > 1:  # the last image in a later turn
            turns += [("user", f"<image> {q2}"), ("assistant", a2)]
        if system and i % 3 == 1:  # before the first user turn
            turns.insert(0, ("system", texts[50 + i % 10]))
        row = {"id": i, "conversations": [{"from": roles.get(r, r), "value": t} for r, t in turns]}
        if names:
            row["image"] = names
        rows.append(row)
        conv_ref[sample_key(i)] = (turns, [(root / f).read_bytes() for f in names])
    out = tmp.mktemp(f"{name}_conv") / "data"
    if media_root_option:
        llava = out.parent / "llava.jsonl"
        llava.write_text("".join(json.dumps(r) + "\n" for r in rows))
        extra = ["--media-root", str(root), "--samples-per-shard", "3"]
    else:
        llava, extra = root / "llava.json", []
        llava.write_text(json.dumps(rows))
    args = ["make-dataset", str(out), str(llava), "--task", "conversation", *extra]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return {"vqa": (vqa, vqa_ref), "conversation": (out, conv_ref)}


#: llava-hf/llava-v1.6-mistral-7b-hf's chat template for string contents: no BOS of its own
#: (the tokenizer's post-processor adds it when the processor tokenizes).
MISTRAL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)
#: llava-hf/llava-v1.6-mistral-7b-hf's processor template (typed content: each user turn's images
#: first, ``<image>\n`` each, then its text); no BOS of its own either.
MISTRAL_TYPED_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' }}"
    "{% for c in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\\n' }}"
    "{% endfor %}"
    "{% for c in message['content'] | selectattr('type', 'equalto', 'text') %}{{ c['text'] }}"
    "{% endfor %}{{ ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'][0]['text'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


def llama_tokenizer(path: Path, texts: list[str], tokens: list[str]) -> Path:
    """A transformers ``LlamaTokenizer`` (byte-fallback BPE over ``▁``-prefixed words, trained
    here on ``texts``) built with ``add_bos_token=True``, so its own post-processor puts BOS in
    front of every text, as Llama and Mistral checkpoints do; ``tokens`` added as special
    tokens, Mistral's LLaVA-NeXT chat template; saved to ``path``."""
    import json
    import string

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer

    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        special_tokens=["<unk>", "<s>", "</s>"],
        vocab_size=400,
        initial_alphabet=list(string.ascii_letters + string.digits + string.punctuation + "▁"),
        show_progress=False,
    )
    bpe.train_from_iterator([*texts, "[INST] [/INST]"] * 3, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    tok = LlamaTokenizer(
        vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]], add_bos_token=True
    )
    tok.add_tokens(tokens, special_tokens=True)
    tok.pad_token = tok.unk_token
    tok.chat_template = MISTRAL_CHAT_TEMPLATE
    tok.save_pretrained(path)
    return path
