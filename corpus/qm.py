"""Qt's compiled translation catalogs (``.qm``, what ``lrelease`` writes): the reader QTranslator
does in C++, for the (context, source text, translations) of each message. Standard library only.

A .qm file is a 16-byte magic number and tagged blocks (tag byte, big-endian 32-bit length).
The Messages block holds records of tagged fields: the source text, context and comment as
UTF-8, each translation as UTF-16 (several for plural forms), ended by an End tag. Files written
without their source texts (``lrelease`` can strip them) give nothing: only hashes are left.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

MAGIC = bytes.fromhex("3cb86418caef9c95cd211cbf60a1bddd")
BLOCK_MESSAGES = 0x69
# Field tags inside a message record (qtranslator.cpp)
END, SOURCE_TEXT16, TRANSLATION, CONTEXT16, OBSOLETE1, SOURCE_TEXT, CONTEXT, COMMENT, OBSOLETE2 = range(1, 10)
_NULL = 0xFFFFFFFF  # a translation's length when it is absent


@dataclass(frozen=True)
class Message:
    context: str
    source: str
    comment: str
    translations: tuple[str, ...]  # one per plural form; empty when untranslated


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # Qt 4 wrote Latin-1 when no codec was set


def blocks(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(tag, payload) of each block; ValueError if the data is not a .qm file."""
    if not data.startswith(MAGIC):
        raise ValueError("not a Qt .qm file (wrong magic number)")
    pos = len(MAGIC)
    while pos + 5 <= len(data):
        tag, length = data[pos], struct.unpack_from(">I", data, pos + 1)[0]
        yield tag, data[pos + 5:pos + 5 + length]
        pos += 5 + length


def messages(data: bytes) -> Iterator[Message]:
    """Every message record of a .qm file; reading stops at a field it does not know."""
    for tag, block in blocks(data):
        if tag != BLOCK_MESSAGES:
            continue
        pos, end = 0, len(block)
        fields: dict[int, str] = {}
        translations: list[str] = []
        while pos < end:
            field = block[pos]
            pos += 1
            if field == END:
                yield Message(fields.get(CONTEXT, ""), fields.get(SOURCE_TEXT, ""), fields.get(COMMENT, ""),
                              tuple(translations))
                fields, translations = {}, []
            elif field in (OBSOLETE1, OBSOLETE2):
                pos += 4
            elif field in (TRANSLATION, SOURCE_TEXT16, CONTEXT16, SOURCE_TEXT, CONTEXT, COMMENT):
                (length,) = struct.unpack_from(">I", block, pos)
                pos += 4
                if length == _NULL:
                    continue
                raw = block[pos:pos + length]
                pos += length
                if field == TRANSLATION:
                    translations.append(raw.decode("utf-16-be", errors="replace"))
                elif field in (SOURCE_TEXT, CONTEXT, COMMENT):
                    fields[field] = _text(raw)
            else:
                return
