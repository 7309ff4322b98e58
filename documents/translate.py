"""A document's segments through the translation server: batched, a few calls in flight, each
distinct text sent once. The gateway and nmt-translate give ``translate_segments`` their own
``Call`` (one Translate RPC with their channel, deadline and errors); nothing here speaks gRPC.

A document is translated whole or not at all: the first call that fails fails the document
(the caller's error names the segment, "paragraph 12: ..."), the calls still in flight are
cancelled, and no file is written half translated.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from documents.alignment import aligned_placement, translation_alignments
from documents.document import Segment
from documents.html_text import Placement
from documents.inline import InlineText
from nmt.v1 import translator_pb2 as pb

Call = Callable[[list[Segment], bool], Awaitable[list[pb.Translation]]]
"""(segments, attention) -> the server's Translation of each segment's text, in order: one
Translate call, with the model's attention when ``attention`` (the segments are marked)."""


@dataclass(frozen=True)
class Batching:
    texts_per_call: int = 32  # at most the server's texts per request
    marked_per_call: int = 16  # segments with attention per call (each answer carries its attention)
    in_flight: int = 4  # calls open at once


async def translate_segments(segments: Sequence[Segment], call: Call, batching: Batching = Batching()
                             ) -> list[pb.Translation]:
    """The answer to each segment, in order."""
    distinct: dict[tuple[str, bool], int] = {}
    sent: list[Segment] = []
    index: list[int] = []
    for s in segments:
        key = (s.text, s.marked)
        if key not in distinct:
            distinct[key] = len(sent)
            sent.append(s)
        index.append(distinct[key])
    batches: list[list[int]] = []
    for marked, size in ((False, batching.texts_per_call),
                         (True, min(batching.texts_per_call, batching.marked_per_call))):
        ids = [i for i, s in enumerate(sent) if s.marked == marked]
        batches += [ids[k:k + max(1, size)] for k in range(0, len(ids), max(1, size))]
    answers: list[pb.Translation | None] = [None] * len(sent)
    gate = asyncio.Semaphore(max(1, batching.in_flight))

    async def run(ids: list[int]) -> None:
        async with gate:
            got = await call([sent[i] for i in ids], sent[ids[0]].marked)
        if len(got) != len(ids):
            raise RuntimeError(f"the server answered {len(got)} translations for {len(ids)} texts")
        for i, answer in zip(ids, got):
            answers[i] = answer

    tasks = [asyncio.ensure_future(run(b)) for b in batches]
    try:
        await asyncio.gather(*tasks)
    finally:  # the first failure (or this coroutine's cancellation) cancels the calls still open
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [answers[i] for i in index]  # type: ignore[misc]


SERVER_TEXT_INDEX = re.compile(r"texts\[(\d+)\]")  # how the server names the text an error is about


def name_segment(message: str, segments: Sequence[Segment]) -> str:
    """The server's message about one text of a call, naming the segment instead: "texts[1]: ..."
    becomes "paragraph 18: ..." (unchanged when it names none)."""
    m = SERVER_TEXT_INDEX.match(message)
    if m is None or int(m.group(1)) >= len(segments):
        return message
    return segments[int(m.group(1))].where + message[m.end():]


def placed(text: str, answer: pb.Translation) -> tuple[str, Placement]:
    """The best translation of ``text`` and the placement of its marks by the attention."""
    translation, alignments = translation_alignments(text, answer)
    return translation, aligned_placement(alignments)


def write_translations(inline: Sequence[InlineText], answers: Sequence[pb.Translation],
                       write: Callable[[Any, str], None]) -> None:
    """Each text's translation put back into its pieces (its marks placed by the attention):
    ``write(piece.ref, new text)`` for every piece that stands for a node of the document."""
    for text, answer in zip(inline, answers):
        translation, place = placed(text.text, answer)
        for piece, new in zip(text.pieces, text.render(translation, place)):
            if piece.ref is not None:
                write(piece.ref, new)


def total_chars(segments: Sequence[Segment]) -> int:
    return sum(len(s.text) for s in segments)


def sample(segments: Sequence[Segment], chars: int = 2000) -> str:
    """The document's first ``chars`` characters of text, to tell its language by."""
    out, size = [], 0
    for s in segments:
        if size >= chars:
            break
        out.append(s.text)
        size += len(s.text) + 1
    return "\n".join(out)[:chars]
