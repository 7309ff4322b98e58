"""Qt's .qm catalogs: read back what a writer that lays the file out as lrelease does wrote."""

from __future__ import annotations

import struct

import pytest

from corpus import qm


def _field(tag: int, data: bytes) -> bytes:
    return bytes([tag]) + struct.pack(">I", len(data)) + data


def qm_file(messages: list[tuple[str, str, list[str]]], with_sources: bool = True) -> bytes:
    """A .qm file as lrelease writes it: the magic number, a Hashes block and a Messages block
    of (context, source, translations) records; ``with_sources=False`` is lrelease's stripped
    form (hashes only)."""
    records, hashes = b"", b""
    for context, source, translations in messages:
        hashes += struct.pack(">II", hash(source) & 0xFFFFFFFF, len(records))
        record = b"".join(_field(qm.TRANSLATION, t.encode("utf-16-be")) for t in translations)
        if with_sources:
            record += _field(qm.SOURCE_TEXT, source.encode()) + _field(qm.CONTEXT, context.encode())
        records += record + bytes([qm.END])
    return qm.MAGIC + _field(0x42, hashes) + _field(qm.BLOCK_MESSAGES, records) + _field(0xA7, b"de")


def test_messages_round_trip() -> None:
    data = qm_file([("MainWindow", "&Open...", ["Ö&ffnen ..."]), ("Panel", "%n file(s)", ["%n Datei", "%n Dateien"]),
                    ("Dialog", "Untranslated", [])])
    assert list(qm.messages(data)) == [
        qm.Message("MainWindow", "&Open...", "", ("Ö&ffnen ...",)),
        qm.Message("Panel", "%n file(s)", "", ("%n Datei", "%n Dateien")),
        qm.Message("Dialog", "Untranslated", "", ())]


def test_stripped_files_give_no_source_text() -> None:
    data = qm_file([("MainWindow", "Open", ["Öffnen"])], with_sources=False)
    assert [m.source for m in qm.messages(data)] == [""]


def test_not_a_qm_file() -> None:
    with pytest.raises(ValueError, match=r"not a Qt \.qm file"):
        list(qm.messages(b"\x95\x04\x12\xde" + b"\0" * 40))
