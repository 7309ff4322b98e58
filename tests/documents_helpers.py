"""A stand-in for the server in the document tests: it "translates" by writing every word in
upper case (code in backticks as it is) and answers with the attention of a perfect
word-for-word alignment, so that formatting placed by the attention lands on exactly the words
it covered, and the tests can say where every word must end up."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from documents.alignment import WORD_START
from documents.document import Document, Segment
from documents.translate import translate_segments
from nmt.v1 import translator_pb2 as pb

_CODE_OR_WORD = re.compile(r"(`[^`]*`)|(\S+)")


def shout(text: str) -> str:
    """The stand-in translation: words in upper case, code spans (in backticks) as they are."""
    return _CODE_OR_WORD.sub(lambda m: m.group(1) or m.group(2).upper(), text)


def answer(text: str) -> pb.Translation:
    """The Translation a server would send for ``text`` with the attention asked for: one piece a
    word (the language tag first and the end of sentence last, as the server's source pieces)."""
    words = text.split()
    translation = shout(text)
    target = translation.split()
    n_src = len(words) + 2
    attention = [0.0] * (len(target) * n_src)
    for t in range(len(target)):
        attention[t * n_src + t + 1] = 1.0
    hyp = pb.Hypothesis(text=translation, source_pieces=["<2de>", *(WORD_START + w for w in words), "</s>"],
                        target_pieces=[WORD_START + w for w in target], attention=attention)
    return pb.Translation(hypotheses=[hyp])


def translate(document: Document, sent: list[list[Segment]] | None = None) -> bytes:
    """The document rendered with the stand-in's answers (every call's segments in ``sent``)."""

    async def call(segments: list[Segment], attention: bool) -> list[pb.Translation]:
        if sent is not None:
            sent.append(list(segments))
        return [answer(s.text) for s in segments]

    return document.render(asyncio.run(translate_segments(document.segments, call)))


def texts(segments: Sequence[Segment]) -> list[str]:
    return [s.text for s in segments]
