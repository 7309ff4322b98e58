"""OpenDocument text (.odt), read and written with odfpy: every paragraph and heading of the
body (tables, lists, frames, notes included) and of the page styles' headers and footers.

A paragraph's text nodes are the pieces of its running text (documents/inline.py), each
marked by the spans and links it sits in; the paragraph is translated whole, the marks are
placed on the translation by the model's attention, and each text node gets the words that
fall in its marks: no element is added or removed. A tab or a line break ends a segment; a
run of spaces (``text:s``), a note, a frame, a bookmark or a field is an anchor that stays
between the words it stood between (a note's or a frame's own paragraphs are translated as
paragraphs of their own).
"""

from __future__ import annotations

import io
from collections.abc import Hashable, Iterator, Sequence

from odf.element import Element, Node
from odf.opendocument import load

from documents.archive import check_zip
from documents.document import Document, DocumentError, Limits, Segment
from documents.inline import BREAK, InlineText, Piece, anchor, units
from documents.translate import write_translations
from nmt.v1 import translator_pb2 as pb

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
PARAGRAPHS = frozenset({(TEXT, "p"), (TEXT, "h")})
# Inside a paragraph: elements whose text is part of its running text; tabs and line breaks end
# a segment; every other element (spaces, notes, frames, bookmarks, fields) is an anchor.
CONTAINERS = frozenset({(TEXT, "span"), (TEXT, "a"), (TEXT, "meta"), (TEXT, "ruby"), (TEXT, "ruby-base")})
BREAKS = frozenset({(TEXT, "tab"), (TEXT, "line-break")})
SPACES = (TEXT, "s")


class OdtFile(Document):
    def __init__(self, data: bytes, limits: Limits) -> None:
        check_zip(data, ".odt", limits)
        try:
            self.doc = load(io.BytesIO(data))
        except Exception as e:  # a damaged package fails anywhere in odfpy: each way is a corrupt file
            raise DocumentError(f"the .odt file is corrupt or not an OpenDocument file: {str(e)[:200]}") from None
        if self.doc.mimetype != "application/vnd.oasis.opendocument.text":
            raise DocumentError(f"the .odt file holds {self.doc.mimetype or 'no OpenDocument type'}, not a text "
                                f"document")
        self.inline: list[InlineText] = []
        self.segments = []
        for name, root in (("", self.doc.text), ("page style ", self.doc.masterstyles)):
            for n, paragraph in enumerate(_paragraphs(root)):
                for text in map(InlineText, units(_items(paragraph))):
                    if text.translatable:
                        self.inline.append(text)
                        self.segments.append(Segment(text.text, f"{name}paragraph {n + 1}", text.marked))

    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        self.check(answers)
        write_translations(self.inline, answers, _set_data)
        out = io.BytesIO()
        self.doc.write(out)
        return out.getvalue()


def _paragraphs(root: Element) -> Iterator[Element]:
    """Every text:p and text:h under ``root``, in document order (iterative)."""
    stack = [iter(root.childNodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        if node.nodeType != Node.ELEMENT_NODE:
            continue
        if node.qname in PARAGRAPHS:
            yield node
        stack.append(iter(node.childNodes))  # a paragraph's notes and frames hold paragraphs too


def _items(paragraph: Element) -> Iterator[Piece | None]:
    """The pieces (text nodes, their path the spans and links around them), anchors and BREAKs
    of the paragraph's running text, in order."""
    stack: list[tuple[Iterator[Node], tuple[Hashable, ...]]] = [(iter(paragraph.childNodes), ())]
    while stack:
        children, path = stack[-1]
        node = next(children, None)
        if node is None:
            stack.pop()
        elif node.nodeType == Node.TEXT_NODE:
            yield Piece(node.data, path, node)
        elif node.nodeType != Node.ELEMENT_NODE:
            continue
        elif node.qname in CONTAINERS:
            stack.append((iter(node.childNodes), (*path, id(node))))
        elif node.qname in BREAKS:
            yield BREAK
        elif node.qname == SPACES:  # read as one space: the words around it stay apart
            yield anchor((*path, id(node)), " ")
        else:
            yield anchor((*path, id(node)))


def _set_data(node: Node, text: str) -> None:
    node.data = text
