"""What every document format shares: the segments a file gives to translate, the file made
again from their translations, the limits that bound the work of reading one, and the one
error that says why a file cannot be read.

A format reads a file into a ``Document``: its ``segments`` (each a unit of running text, as
the server translates it: a paragraph, a heading, a table cell, a subtitle cue) and a
``render(answers)`` that writes the same file with each segment's text replaced by its
translation (``answers[k]`` is the server's ``Translation`` of ``segments[k]``). Everything
that is not a segment's text comes back as it was: markup, styles, timings, code. A segment
with inline formatting (bold, a link, a run of another font) is ``marked``: it is translated
with the model's attention, which places the formatting on the words of the translation that
came from the words it covered (documents/alignment.py).
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from nmt.v1 import translator_pb2 as pb

SPACE = " \t\n\r\f"  # kept around a segment's text, untranslated (as documents/html_text.py keeps it)


class DocumentError(ValueError):
    """A file that cannot be translated: the message says why (its format is not supported, it
    is corrupt, it is not UTF-8, it unpacks to more than the limit...)."""


@dataclass(frozen=True)
class Limits:
    """What reading one file may cost. The characters to translate are bounded by the caller
    (the gateway's --max-file-chars), which knows its server's limits."""

    max_bytes: int = 10 * 1024 * 1024  # the file as given
    max_unpacked_bytes: int = 100 * 1024 * 1024  # the members of a .docx or .odt (a zip), uncompressed, together
    max_members: int = 5000  # files inside a .docx or .odt
    max_tags: int = 200_000  # tags of an .html file (placing markup is work for each tag)


@dataclass(frozen=True)
class Segment:
    text: str  # what the server translates: without the whitespace around it
    where: str  # where it is in the file, for messages: "paragraph 12", "cue 3", "line 40"
    marked: bool = False  # inline formatting to place on the translation (asks for the attention)


class Document(ABC):
    """A file read by its format: the segments to translate and the file made from their answers."""

    segments: list[Segment]

    @abstractmethod
    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        """The file with ``answers[k]`` (one per segment, in order) in place of ``segments[k]``."""

    def check(self, answers: Sequence[pb.Translation]) -> None:
        if len(answers) != len(self.segments):
            raise ValueError(f"{len(answers)} answers for {len(self.segments)} segments")


def best(answer: pb.Translation) -> str:
    return answer.hypotheses[0].text if answer.hypotheses else ""


def translatable(text: str) -> bool:
    """Text with a letter in it; anything else (numbers, punctuation, blank) is kept as it is."""
    return any(c.isalpha() for c in text)


def decode(data: bytes, what: str) -> tuple[str, str]:
    """(text, encoding) of a text file: UTF-8 (with or without a byte-order mark, which is kept),
    or UTF-16 with its byte-order mark; anything else is a DocumentError asking for UTF-8."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as e:
        raise DocumentError(f"the {what} file is not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8") \
            from None


def split_space(text: str) -> tuple[str, str, str]:
    """(the whitespace before, the text, the whitespace after)."""
    core = text.strip(SPACE)
    if not core:
        return text, "", ""
    start = len(text) - len(text.lstrip(SPACE))
    return text[:start], core, text[start + len(core):]
