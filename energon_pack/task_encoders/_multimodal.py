# SPDX-License-Identifier: Apache-2.0
"""``MultimodalPackingTaskEncoder``: conversations whose turns reference images and videos; the
engine of the captioning, VQA and conversation encoders. ``<image>`` / ``<video>`` tags mark
the media in the messages (no tag: in front of the first user turn). With a processor that has
a chat template, each message becomes typed content split at the tags and is rendered through
that template, as ``processor.apply_chat_template`` renders it::

    "<image>\nwhat colour"  ->  [{"type": "image"}, {"type": "text", "text": "\nwhat colour"}]

then what the template wrote for each item (``family.chat_media``) becomes the family's
placeholder; otherwise the tags become placeholders in the text and the tokenizer's template (or
``[BOS] turn ... [EOD]``) renders it. The loss is on the assistant turns only, and each
placeholder is expanded to the processor's exact token count. A single message of role
``"text"`` (interleaved data) has the loss on its text. See docs/howto/conversations.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import torch

from energon_pack.algorithms import OverlongPolicy, cut_overlong
from energon_pack.encoding import (
    DocumentTokenizer,
    MediaProcessor,
    ProcessedMedia,
    TimestampedVideos,
    VideoTiming,
    check_planned,
    expand_placeholders,
    high_bit_depth_modes,
    kept_items,
    processor_bos,
    to_pil_image,
)
from energon_pack.samples import (
    EncodedMultimodalSample,
    EncodedSample,
    LightMultimodalDocument,
    MediaFamily,
)
from energon_pack.task_encoders._base import PackingTaskEncoder
from energon_pack.task_encoders._sft import _ids

__all__ = ["MultimodalPackingTaskEncoder"]

T_sample = TypeVar("T_sample")

#: One chat message: ``{"role": "user", "content": "<image> what is it"}``.
Message = dict[str, str]
#: The role of a document that is text to learn, not a chat (interleaved image-text data): the
#: loss on every text token and the EOD (not on media or the vision start/end around them).
TEXT_ROLE = "text"


class MultimodalPackingTaskEncoder(PackingTaskEncoder[T_sample], Generic[T_sample]):
    """Packs conversations with images and videos; subclasses map their samples to messages.

    Args:
        tokenizer: A transformers tokenizer or a local tokenizer directory; it must know
            ``image_token`` (and ``video_token`` for videos).
        image_processor: The processor or image processor of a registered VLM family
            (:func:`~energon_pack.encoding.vision_family`; others are refused by class).
        video_processor: A transformers video processor (needs torchvision), or None: frames
            go through ``image_processor`` (see :mod:`energon_pack.encoding`).
        image_token, video_token: The placeholder tokens.
        vision_start_token, vision_end_token: Tokens around each placeholder run when the
            tokenizer has them (``None``: none).
        use_chat_template: Render with the chat template: the processor's (typed content, when
            ``image_processor`` is a processor with one), else the tokenizer's (``None``: if
            there is one).
        mrope: Add 3-row mRoPE position ids to each pack.
        tokens_per_second: The mRoPE temporal scale for videos (the model config's
            ``tokens_per_second``; ``None``: step 1).
        video_timestamps: Each temporal patch of a video is its own
            ``<{t:.1f} seconds><|vision_start|><|video_pad|>*n<|vision_end|>`` group (see
            docs/howto/conversations.md); needs the vision start/end tokens. ``None``: where the
            family says its ``video_processor`` lays videos out so.
        default_fps: Frames per second of a video whose sample gives none.
        add_bos, add_eos, eod_token_id: Without a chat template, as in ``LLMPackingTaskEncoder``.
        light_media: Buffer planned documents, decode media after selection (``None``: where
            exact, with or without carry-over; ``True``: raise where not possible).
        **packing: :class:`~energon_pack.task_encoders.PackingConfig` fields.
    """

    #: Raw bytes reach ``encode_sample``: media are decoded (and errors reported) there.
    decoder = None
    #: The tags that mark an image / a video in message text.
    image_tag: ClassVar[str] = "<image>"
    video_tag: ClassVar[str] = "<video>"

    def __init__(
        self,
        tokenizer: Any,
        image_processor: Any,
        *,
        video_processor: Any = None,
        image_token: str = "<|image_pad|>",
        video_token: str | None = "<|video_pad|>",
        vision_start_token: str | None = "<|vision_start|>",
        vision_end_token: str | None = "<|vision_end|>",
        use_chat_template: bool | None = None,
        mrope: bool = False,
        tokens_per_second: float | None = None,
        video_timestamps: bool | None = None,
        default_fps: float = 2.0,
        add_bos: bool | None = None,
        add_eos: bool | None = None,
        eod_token_id: int | None = None,
        light_media: bool | None = None,
        **packing: Any,
    ) -> None:
        self.tokenizer = DocumentTokenizer(
            tokenizer, add_bos=add_bos, add_eos=add_eos, eod_token_id=eod_token_id
        )
        #: The processor's own chat template (typed content goes through it), or None.
        self._chat_template = _processor_template(image_processor)
        self.use_chat_template = (
            use_chat_template is not False
            if self._chat_template is not None
            else self.tokenizer.use_chat_template(use_chat_template)
        )
        #: The BOS a processor's ``apply_chat_template(tokenize=True)`` puts in front of a
        #: rendered conversation that does not start with it (None: its tokenizer adds none).
        self._template_bos = processor_bos(self.tokenizer.tokenizer)
        self.media = MediaProcessor(image_processor, video_processor)
        #: Writes image rows in place, bit-identical to the processor (None: the processor's).
        self.fast_pixels = self.media.fast
        self.image_token_id = self.tokenizer.token_id(image_token)
        self.video_token_id = self._optional_id(video_token)
        start, end = self._optional_id(vision_start_token), self._optional_id(vision_end_token)
        wrap = start is not None and end is not None
        self._placeholder = {
            tag: f"{vision_start_token}{token}{vision_end_token}" if wrap else token
            for tag, token in ((self.image_tag, image_token), (self.video_tag, video_token))
            if token is not None  # no video token: a <video> tag is an error (tag count check)
        }
        #: ``(text in the messages, what it becomes in the rendered text)`` for families that
        #: lay images out after the chat template (``family.text_layout``), else None.
        self._after_template = self._text_layout(vision_start_token, wrap)
        #: Per tag: ``(what the processor's template writes for one typed item, the text it
        #: becomes)``: ``"{start}"`` -> ``"\n\n{start}{token}{end}\n\n"`` with a ``text_layout``.
        chat_media = getattr(self.media.family, "chat_media", "{token}")
        self._chat_media = {
            tag: (
                chat_media.format(
                    start=vision_start_token or "", token=token, end=vision_end_token or ""
                ),
                self._after_template[1]
                if tag == self.image_tag and self._after_template
                else self._placeholder[tag],
            )
            for tag, token in ((self.image_tag, image_token), (self.video_tag, video_token))
            if token is not None and tag in self._placeholder
        }
        if video_timestamps is None:
            video_timestamps = self.media.family.timestamps_videos(video_processor)
        if video_timestamps and (not wrap or self.video_token_id is None):
            raise ValueError(
                "video_timestamps=True wraps each video frame in vision start/end "
                f"tokens, but the tokenizer lacks {vision_start_token!r}, {vision_end_token!r} "
                f"or the video token {video_token!r}."
            )
        self.video_timestamps = video_timestamps
        #: Vision start/end ids (no loss on them in text documents); empty without them.
        self._vision_ids = frozenset((start, end)) if wrap else frozenset()
        self._wrap = (start, end) if wrap else None
        self._timestamps = (
            TimestampedVideos(
                self.tokenizer.encode_text,
                pad=self.video_token_id,
                start=start,
                end=end,
                temporal_patch_size=self.media.temporal_patch_size,
                merge_size=self.media.merge_size,
            )
            if video_timestamps  # with the start/end and video tokens (checked above)
            else None
        )
        self.media.check_mrope(mrope)
        self.mrope = mrope
        self.tokens_per_second = tokens_per_second
        self.default_fps = default_fps
        packing.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        super().__init__(**packing)
        self._init_light_media(light_media, image_processor, ("augment_image", "augment_video"))

    def _text_layout(self, start: str | None, wrap: bool) -> tuple[str, str] | None:
        """Families with a ``text_layout``: the tag becomes the vision start token (the
        processor's image token) in the messages, and ``layout.format(<start><image><end>)`` in
        the rendered text."""
        layout = self.media.family.text_layout
        if layout is None:
            return None
        if not wrap or start is None:
            raise ValueError(
                f"the {self.media.family.name} image layout wraps each image in vision start/"
                "end tokens, but the tokenizer lacks vision_start_token or vision_end_token "
                f"(the family's are {self.media.family.default_tokens})."
            )
        full = self._placeholder[self.image_tag]
        self._placeholder[self.image_tag] = start
        return start, layout.format(full)

    def _optional_id(self, token: str | None) -> int | None:
        vocab = self.tokenizer.tokenizer.get_vocab()
        return None if token is None or token not in vocab else int(vocab[token])

    def pack_options(self) -> dict[str, Any]:
        """``mrope`` and the family's ``mrope_layout``, the spatial merge, ``tokens_per_second``
        and whether packs count images per document (``batch_num_images``, families laid out
        ``per_document``)."""
        return {
            "mrope": self.mrope,
            "mrope_layout": self.media.family.mrope_layout,
            "spatial_merge_size": self.media.merge_size,
            "tokens_per_second": self.tokens_per_second,
            "batch_num_images": self.media.family.per_document,
        }

    # -- hooks -------------------------------------------------------------------------------

    def augment_image(self, image: Any) -> Any:
        """Hook for (random) augmentations of one PIL image; runs seeded. Default: identity."""
        return image

    def augment_video(self, frames: list[Any]) -> list[Any]:
        """Hook for (random) augmentations of one video's PIL frames; runs seeded."""
        return frames

    def to_conversation(self, sample: T_sample) -> Iterable[tuple[str, list[Message]]]:
        """``(key, messages)`` of each document of ``sample``; images/videos via :meth:`media_of`."""
        raise NotImplementedError(f"{type(self).__name__} must implement to_conversation().")

    def media_of(self, sample: T_sample) -> tuple[list[Any], list[list[Any]], list[float | None]]:
        """``(images, videos as frame lists, fps per video or None)`` of ``sample`` (default:
        none). An fps of None is ``default_fps``."""
        return [], [], []

    # -- encoding ------------------------------------------------------------------------------

    def encode_document(self, sample: T_sample) -> Iterable[EncodedSample]:
        images, videos, fps = self.media_of(sample)
        key = sample.__key__  # type: ignore[attr-defined]
        self._stats_now().record_high_bit_depth(key, high_bit_depth_modes(images))
        planned = self._planned(images, videos, key)
        image_media, video_media = planned or self._processed(images, videos, key)
        fps = [f or self.default_fps for f in fps]
        timing = VideoTiming(
            torch.tensor([self.media.temporal_patch_size / f for f in fps], dtype=torch.float32),
            [len(v) for v in videos],
            fps,
        )
        for doc_key, messages in self.to_conversation(sample):
            doc = self._document(sample, doc_key, messages, image_media, video_media, timing)
            if not len(doc.tokens):  # nothing to learn: dropped and counted, saying why
                self._stats_now().record_drop(doc_key, _nothing_to_learn(messages), kind="empty")
                continue
            if self._media_over_pack(doc):
                continue
            if planned is not None:
                doc = LightMultimodalDocument.planned(
                    doc,
                    images=list(images),
                    videos=[list(v) for v in videos],
                )
            yield doc

    def _media_over_pack(self, doc: EncodedMultimodalSample) -> bool:
        """Drop and count ``doc`` when one image or video alone is longer than the pack (no
        piece could hold it: media are never cut); under ``overlong="error"`` the policy
        raises instead."""
        policy = OverlongPolicy(self.config.overlong)
        if doc.length <= self.pack_size or policy is OverlongPolicy.ERROR:
            return False
        spans = self._no_cut_spans(doc)
        longest = int((spans[:, 1] - spans[:, 0]).max()) if len(spans) else 0
        why = None
        if longest > self.pack_size:
            why = f"an image or video of {longest} tokens (media are never cut; raise pack_size)"
        elif self._splits_images(doc, policy):
            why = (
                "a piece holding one of its several images, which the model would read as a "
                "single image (another layout); raise pack_size"
            )
        if why is not None:
            self._stats_now().record_drop(
                doc.__key__, f"{doc.length} tokens > pack_size {self.pack_size} with {why}"
            )
        return why is not None

    def _no_cut_spans(self, doc: EncodedSample) -> torch.Tensor:
        """The media spans widened over the vision start/end tokens around each item (and a
        timestamped video's first timestamp with its outer start), so that no over-long cut parts
        an item from them; ``image_spans`` / ``video_spans`` stay the placeholder tokens."""
        spans = doc.media_spans()
        if self._wrap is None or not len(spans):
            return spans
        start, end = self._wrap
        tokens = doc.tokens.tolist()
        videos = {s for s, _ in getattr(doc, "video_spans", spans[:0]).view(-1, 2).tolist()}
        out = []
        for s, e in spans.tolist():
            stamped = self._timestamps is not None and s in videos
            while s > 0 and tokens[s - 1] == start:
                s -= 1
            j = s - 1  # timestamped: <vs> <t seconds> <vs> <video_pad>...
            while stamped and j >= 0 and tokens[j] not in (start, end):
                j -= 1
            s = j if stamped and j >= 0 and tokens[j] == start else s
            while e < len(tokens) and tokens[e] == end:
                e += 1
            out.append((s, e))
        return torch.tensor(out, dtype=torch.int64)

    def _splits_images(self, doc: EncodedMultimodalSample, policy: OverlongPolicy) -> bool:
        """Families laid out ``per_document``: whether the over-long cut leaves one image of a
        document of several alone in a piece (the model lays out a lone image as a single-image
        document's)."""
        spans = doc.image_spans.view(-1, 2)
        if not self.media.family.per_document or len(spans) < 2:
            return False
        targets = doc.loss_mask.numpy()
        cut = cut_overlong(
            doc.length, self.pack_size, policy, no_cut=spans.numpy(), targets=targets
        )
        inside = [int(((spans[:, 0] >= s) & (spans[:, 1] <= e)).sum()) for s, e in cut.pieces]
        return 1 in inside

    def _planned(
        self, images: Sequence[Any], videos: Sequence[Sequence[Any]], key: str
    ) -> tuple[ProcessedMedia, ProcessedMedia] | None:
        """Media planned from headers (light buffers), or None: decode in the buffer."""
        if self.media_planner is None:
            return None
        image_media = self.media_planner.images(images, key=key)
        video_media = (
            self.media_planner.videos(videos, key=key)
            if self.media.video_processor is None or not videos
            else None
        )
        if image_media is None or video_media is None:
            self.light_fallbacks += 1
            return None
        return image_media, video_media

    def _processed(
        self,
        images: Sequence[Any],
        videos: Sequence[Sequence[Any]],
        key: str,
        *,
        pending: bool = False,
    ) -> tuple[ProcessedMedia, ProcessedMedia]:
        """Decode, augment (seeded by the caller) and process images and videos; ``pending``:
        image rows left for the pack to write (``MediaProcessor.images``)."""
        pil_images = [self.augment_image(to_pil_image(im, key=key)) for im in images]
        pil_videos = [
            self.augment_video([to_pil_image(f, key=key) for f in frames]) for frames in videos
        ]
        try:
            image_media = self.media.images(pil_images, pending=pending)
            return image_media, self.media.videos(pil_videos)
        except Exception as e:
            raise ValueError(
                f"sample {key!r}: the media processor failed ({type(e).__name__}: {e})."
            ) from e

    def materialize(self, doc: EncodedSample, *, into_pack: bool = False) -> EncodedSample:
        """A light document with its kept images and videos decoded, augmented and processed;
        ``into_pack``: the image rows left for the pack to write (``PendingPixels``) where
        :attr:`fast_pixels` makes them; videos are processed here (a tensor)."""
        if not isinstance(doc, LightMultimodalDocument):
            return doc
        key = doc.__key__
        images = [doc.images[i] for i in kept_items(doc.pixel_values)]
        videos = [doc.videos[i] for i in kept_items(doc.pixel_values_videos)]
        image_media, video_media = self._processed(images, videos, key, pending=into_pack)
        check_planned(doc.image_grid_thw, image_media.grid_thw, key=key)
        check_planned(doc.video_grid_thw, video_media.grid_thw, key=key)
        if doc.image_sizes is not None:
            check_planned(doc.image_sizes, image_media.sizes, key=key)
        return doc.materialized(
            pixel_values=image_media.pixel_values,
            pixel_values_videos=video_media.pixel_values,
        )

    def _document(
        self,
        sample: Any,
        key: str,
        messages: list[Message],
        images: Any,
        videos: Any,
        timing: VideoTiming,
    ) -> EncodedMultimodalSample:
        messages = self._with_tags(key, messages, len(images.num_tokens), len(videos.num_tokens))
        tokens, loss_mask = self._render(key, messages)
        counts = {self.image_token_id: images.expansions or images.num_tokens}
        if videos.num_tokens:
            if self.video_token_id is None:
                raise ValueError(f"sample {key!r} has videos but the tokenizer has no video token")
            counts[self.video_token_id] = videos.num_tokens
        if not any(loss_mask):  # nothing to learn: an empty document, dropped and counted
            tokens, loss_mask = [], []
            counts = {}
        elif videos.num_tokens and self._timestamps is not None:
            stamped = self._timestamps
            tokens, loss_mask = stamped.expand(key, tokens, loss_mask, videos.grid_thw, timing)
            counts[self.video_token_id] = stamped.frame_tokens(videos.grid_thw)
        ids, mask, spans = expand_placeholders(tokens, loss_mask, counts, key=key)
        if not counts:
            images, videos = self.media.empty(), self.media.empty()
        video_spans = spans.get(self.video_token_id, []) if counts else []
        if counts and self._timestamps is not None:  # one span per video: first to last frame
            video_spans = self._timestamps.join_spans(video_spans, videos.grid_thw)
        return EncodedMultimodalSample.derive_from(
            sample,
            __key__=key,
            tokens=torch.tensor(ids, dtype=torch.int64),
            loss_mask=torch.tensor(mask, dtype=torch.bool),
            pixel_values=images.pixel_values,
            image_grid_thw=images.grid_thw,
            image_spans=_spans(spans.get(self.image_token_id, [])),
            token_type_ids=self._token_types(ids, mask),
            moe_mm_token_type_ids=self._moe_token_types(ids),
            pixel_values_videos=videos.pixel_values,
            video_grid_thw=videos.grid_thw,
            video_spans=_spans(video_spans),
            video_second_per_grid=timing.second_per_grid if counts else torch.zeros(0),
            image_sizes=images.sizes,
            family=self._family,
        )

    @property
    def _family(self) -> MediaFamily:
        """What the family declares to the packs and batches (its name, its Megatron layout)."""
        family = self.media.family
        return MediaFamily(family.name, family.megatron_layout)

    def _token_types(self, ids: list[int], mask: list[bool]) -> torch.Tensor | None:
        """The ``token_type_ids`` of the family's processor (``family.token_types``): 1 on image
        placeholders or on the answer (the suffix), 0 elsewhere; None where it has none."""
        kind = self.media.family.token_types
        if kind is None:
            return None
        ones = torch.tensor(mask) if kind == "suffix" else torch.tensor(ids) == self.image_token_id
        return ones.to(torch.int64).view(-1)

    def _moe_token_types(self, ids: list[int]) -> torch.Tensor | None:
        """Families whose MoE layers route by modality (``family.moe_token_types``): 1 on image
        tokens and the vision start/end tokens, 0 elsewhere, as the processor's
        ``create_moe_mm_token_type_ids``; None for the others."""
        if not self.media.family.moe_token_types:
            return None
        vision = torch.tensor([self.image_token_id, *self._vision_ids], dtype=torch.int64)
        return torch.isin(torch.tensor(ids, dtype=torch.int64), vision).to(torch.int64)

    @classmethod
    def tag_mismatch(
        cls, text: str, n_images: int, n_videos: int
    ) -> tuple[str, str, int, int] | None:
        """The first ``(tag, "image" | "video", tags found, items)`` breaking the rule (one tag
        per item, or none at all), else None: ``tag_mismatch("<image><image> hi", 1, 0)`` ->
        ``("<image>", "image", 2, 1)``. The encoder's rule, for checks made before it."""
        for tag, n in ((cls.image_tag, n_images), (cls.video_tag, n_videos)):
            found = text.count(tag)
            if found != n and not (found == 0 and n > 0):
                return tag, "image" if tag == cls.image_tag else "video", found, n
        return None

    def _with_tags(
        self, key: str, messages: list[Message], n_images: int, n_videos: int
    ) -> list[Message]:
        """Messages with one tag per item (missing tags put before the first user turn)."""
        text = "".join(m["content"] for m in messages)
        bad = self.tag_mismatch(text, n_images, n_videos)
        if bad is not None:
            tag, noun, found, n = bad
            raise ValueError(
                f"sample {key!r}: {found} {tag} tag(s) in the conversation but {n} "
                f"{noun}(s); give one tag per item."
            )
        missing = [
            tag * n
            for tag, n in ((self.image_tag, n_images), (self.video_tag, n_videos))
            if n > 0 and tag not in text
        ]
        out = [dict(m) for m in messages]
        if missing:  # prefix-LM processors put them first, without a newline
            first = next((m for m in out if m["role"] == "user"), out[0])
            sep = "" if self.media.family.prefix_lm else "\n"
            first["content"] = "".join(missing) + sep + first["content"]
        return out

    def _with_placeholders(self, messages: list[Message]) -> list[Message]:
        """Tags replaced by placeholder text (the renderings without typed content)."""
        out = [dict(m) for m in messages]
        for m in out:
            for tag, placeholder in self._placeholder.items():
                m["content"] = m["content"].replace(tag, placeholder)
        return out

    def _typed(self, messages: list[Message]) -> list[dict[str, Any]]:
        """Each message's text split at the tags into typed items, as a processor's template
        takes them: ``"<image> hi"`` -> ``[{"type": "image"}, {"type": "text", "text": " hi"}]``."""
        kinds = {self.image_tag: "image", self.video_tag: "video"}
        split = re.compile("(" + "|".join(re.escape(t) for t in kinds) + ")")
        return [
            {
                "role": m["role"],
                "content": [
                    {"type": kinds[part]} if part in kinds else {"type": "text", "text": part}
                    for part in split.split(m["content"])
                    if part
                ],
            }
            for m in messages
        ]

    def _template_text(self, key: str, messages: list[Message], prompt: bool) -> str:
        """``messages`` as typed content through the processor's chat template, each item's
        text (``family.chat_media``) replaced by the family's placeholder."""
        typed = self._typed(messages)
        try:
            text = self.tokenizer.tokenizer.apply_chat_template(
                typed,
                chat_template=self._chat_template,
                add_generation_prompt=prompt,
                tokenize=False,
            )
        except Exception as e:
            raise ValueError(
                f"sample {key!r}: the processor's chat template fails on typed content "
                f'([{{"type": "image"}}, {{"type": "text", ...}}] items, what '
                f"processor.apply_chat_template renders) ({type(e).__name__}: {e}); give the "
                "processor a template that takes typed content, or set its chat_template to "
                "None to render strings through the tokenizer's."
            ) from e
        for tag, (marker, placeholder) in self._chat_media.items():
            kind = "image" if tag == self.image_tag else "video"
            n = sum(item["type"] == kind for m in typed for item in m["content"])
            if text.count(marker) != n:
                raise ValueError(
                    f"sample {key!r}: the processor's chat template wrote {marker!r} "
                    f"{text.count(marker)} time(s) for {n} {kind}(s) (the {self.media.family.name} "
                    f"processor expands each {marker!r} into one {kind}), so it cannot express "
                    "this conversation; place the media where the template renders them."
                )
            text = text.replace(marker, placeholder)
        return text

    def _render(self, key: str, messages: list[Message]) -> tuple[list[int], list[bool]]:
        """Token ids of the conversation (tags marking the media) and the loss mask on
        assistant turns."""
        if self.media.family.prefix_lm:
            return self._render_prefix(key, self._with_placeholders(messages))
        if not self.use_chat_template or any(m["role"] == TEXT_ROLE for m in messages):
            return self._render_plain(self._with_placeholders(messages))
        typed = self._chat_template is not None
        messages = messages if typed else self._with_placeholders(messages)
        tok = self.tokenizer.tokenizer

        lead = self._template_bos

        def render(msgs: list[Message], prompt: bool) -> list[int]:
            if not msgs:
                return []
            if typed:
                ids = self.tokenizer.encode_text(self._template_text(key, msgs, prompt))
            elif self._after_template is None:
                ids = tok.apply_chat_template(msgs, add_generation_prompt=prompt, tokenize=True)
                ids = _ids(ids)
            else:
                text = tok.apply_chat_template(msgs, add_generation_prompt=prompt, tokenize=False)
                ids = self.tokenizer.encode_text(text.replace(*self._after_template))
            # the processor's rule: its tokenizer adds BOS unless the prompt starts with it
            return [lead, *ids] if lead is not None and ids[:1] != [lead] else ids

        full = render(messages, False)
        mask = [False] * len(full)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before, upto = render(messages[:i], True), render(messages[: i + 1], False)
            if full[: len(before)] != before or full[: len(upto)] != upto:
                raise ValueError(
                    f"sample {key!r}: the chat template does not render turn {i} as a prefix of "
                    "the conversation, so assistant tokens cannot be located; pass "
                    "use_chat_template=False or fix the template."
                )
            mask[len(before) : len(upto)] = [True] * (len(upto) - len(before))
        return full, mask

    def _render_prefix(self, key: str, messages: list[Message]) -> tuple[list[int], list[bool]]:
        """Prefix-LM families: the prompt as their processor lays it out (BOS after the last
        image tag, or after the images it puts first; a newline after), then the answer and
        EOS, in the loss. ``<image> what`` + ``red`` -> ``<image> <bos> what \\n | red <eos>``."""
        roles = [m["role"] for m in messages]
        if roles != ["user", "assistant"]:
            raise ValueError(
                f"sample {key!r}: a {self.media.family.name} document is one user prompt and one "
                f"answer (prefix-LM), not turns {roles}; split it into single-turn samples."
            )
        tok = self.tokenizer.tokenizer
        prompt, tag = messages[0]["content"], self._placeholder[self.image_tag]
        cut = prompt.rfind(tag) + len(tag) if tag in prompt else 0
        prefix = self.tokenizer.encode_text(f"{prompt[:cut]}{tok.bos_token}{prompt[cut:]}\n")
        answer = self.tokenizer.encode_text(messages[1]["content"] + tok.eos_token)
        return prefix + answer, [False] * len(prefix) + [True] * len(answer)

    def _render_plain(self, messages: list[Message]) -> tuple[list[int], list[bool]]:
        """``[BOS] turn turn ...``, ``[EOD]`` after each assistant (or text) turn, in the loss."""
        ids = self.tokenizer.ids
        tokens = [ids.bos] if ids.bos is not None else []
        mask = [False] * len(tokens)
        for m in messages:
            text = m["content"]
            if self._after_template is not None:
                text = text.replace(*self._after_template)
            body = self.tokenizer.encode_text(text)
            target = m["role"] in ("assistant", TEXT_ROLE)
            if target and ids.eod is not None:
                body.append(ids.eod)
            tokens.extend(body)
            if m["role"] == TEXT_ROLE:  # text only: not the vision start/end around media
                mask.extend(t not in self._vision_ids for t in body)
            else:
                mask.extend([target] * len(body))
        return tokens, mask


def _nothing_to_learn(messages: list[Message]) -> str:
    """Why a conversation has no loss target (the reason logged with its drop)."""
    if not any(m["role"] in ("assistant", TEXT_ROLE) for m in messages):
        roles = ", ".join(m["role"] for m in messages)
        return (
            f"no assistant turn (turns: {roles}), so nothing to train on: the loss is on "
            "assistant turns only; add the reply (role 'assistant', or from 'gpt') or leave "
            "the record out"
        )
    return "its assistant turns encode to zero tokens; fill in the replies or leave it out"


def _spans(spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    return torch.tensor(list(spans), dtype=torch.int64).view(-1, 2)


def _processor_template(processor: Any) -> str | None:
    """The chat template of a whole processor (its ``"default"`` one when it has several), else
    None (an image processor, or a processor without one)."""
    if not hasattr(processor, "image_processor"):
        return None
    template = getattr(processor, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template else None
