"""HTML files (.html, .htm): the markup-preserving path of the gateway's ``format: html``
(documents/html_text.py): each block of running text is a segment, its inline tags placed on
the translation by the attention; tags, attributes, comments, scripts and styles come back
byte for byte. UTF-8 or the charset its ``<meta>`` names, written back in the same."""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence

from documents.document import Document, DocumentError, Limits, Segment, decode
from documents.html_text import HtmlText, TooManyTags
from documents.translate import placed
from nmt.v1 import translator_pb2 as pb

_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)


def _decode(data: bytes) -> tuple[str, str]:
    """The text and its encoding: a byte-order mark, else the <meta> charset in the first 2 KB,
    else UTF-8."""
    m = None if data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else \
        _CHARSET.search(data[:2048])
    if m:
        name = m.group(1).decode("ascii").lower()
        try:
            encoding = codecs.lookup(name).name
        except LookupError:
            raise DocumentError(f"the .html file names the charset {name!r}, which is not known") from None
        if encoding not in ("utf-8", "utf-16"):
            try:
                return data.decode(encoding), encoding
            except UnicodeDecodeError as e:
                raise DocumentError(f"the .html file is not {name} text as its <meta> says (byte {e.start})") \
                    from None
    return decode(data, ".html")


class HtmlFile(Document):
    def __init__(self, data: bytes, limits: Limits) -> None:
        text, self.encoding = _decode(data)
        try:
            self.html = HtmlText(text, limits.max_tags)
        except TooManyTags:
            raise DocumentError(f"the .html file holds more than {limits.max_tags} tags, the limit") from None
        self.segments = [Segment(t, f"paragraph {k + 1}", bool(u.marks))
                         for k, (t, u) in enumerate(zip(self.html.texts, self.html.units))]

    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        self.check(answers)
        done = [placed(s.text, a) for s, a in zip(self.segments, answers)]
        out = self.html.render([t for t, _ in done], [p for _, p in done])
        # A character the charset cannot hold is written as a reference (the translation may need one).
        return out.encode(self.encoding, errors="xmlcharrefreplace")
