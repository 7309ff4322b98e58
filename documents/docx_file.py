"""Word documents (.docx), read and written with python-docx: the body, headers and footers,
footnotes, endnotes and comments, wherever a paragraph stands (tables, text boxes, lists).

A paragraph's runs keep their formatting: each run's text is a piece of the paragraph's
running text (documents/inline.py), marked by its formatting (its ``w:rPr``) and by the
links, fields and content controls around it, except for the paragraph's most common
formatting, which is the text's own. The paragraph is translated whole, the marks are placed
on the translation by the model's attention, and each run gets the words that fall in its
mark: no run, property or element is added or removed. A tab or a line break ends a segment;
a footnote mark, an image or a symbol is an anchor that stays between the words it stood
between. Deleted text of tracked changes and field codes are left alone.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence

from docx import Document as open_docx
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.part import PartFactory, XmlPart
from lxml import etree

from documents.archive import check_zip
from documents.document import Document, DocumentError, Limits, Segment
from documents.inline import BREAK, InlineText, Piece, anchor, units
from documents.translate import write_translations
from nmt.v1 import translator_pb2 as pb

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
# The parts with paragraphs to translate, by content type, and how messages name them.
PARTS = {CT.WML_DOCUMENT_MAIN: "", CT.WML_HEADER: "header ", CT.WML_FOOTER: "footer ",
         CT.WML_FOOTNOTES: "footnotes ", CT.WML_ENDNOTES: "endnotes ", CT.WML_COMMENTS: "comments "}
# python-docx reads footnotes and endnotes as opaque parts; as XML parts their paragraphs can be
# edited like the body's (and they are written back from their XML, as python-docx writes any XmlPart).
for _type in (CT.WML_FOOTNOTES, CT.WML_ENDNOTES):
    PartFactory.part_type_for.setdefault(_type, XmlPart)

# Inside a paragraph: elements whose runs are part of its running text (links, fields, content
# controls, tracked insertions); every other element beside the runs (bookmarks, proofing
# marks, deleted runs, math) is left where it is.
CONTAINERS = frozenset(W + n for n in ("hyperlink", "fldSimple", "smartTag", "customXml", "sdt", "sdtContent",
                                       "ins", "moveTo", "dir", "bdo"))
# Inside a run: what ends a segment, what is an anchor; rPr, field codes, deleted text and
# rendering hints hold nothing to translate.
BREAKS = frozenset(W + n for n in ("tab", "ptab", "br", "cr"))
ANCHORS = frozenset(W + n for n in ("footnoteReference", "endnoteReference", "commentReference", "drawing", "pict",
                                    "object", "sym", "separator", "continuationSeparator"))


class DocxFile(Document):
    def __init__(self, data: bytes, limits: Limits) -> None:
        check_zip(data, ".docx", limits)
        try:
            self.doc = open_docx(io.BytesIO(data))
        except Exception as e:  # a damaged package fails anywhere in python-docx: each way is a corrupt file
            raise DocumentError(f"the .docx file is corrupt or not a Word document: {str(e)[:200]}") from None
        self.inline: list[InlineText] = []
        self.segments = []
        parts = [self.doc.part, *(p for p in self.doc.part.package.iter_parts()
                                  if p is not self.doc.part and p.content_type in PARTS and isinstance(p, XmlPart))]
        for part in parts:
            name = PARTS[part.content_type]
            for n, paragraph in enumerate(part.element.iter(W + "p")):
                for text in _paragraph_units(paragraph):
                    if text.translatable:
                        self.inline.append(text)
                        self.segments.append(Segment(text.text, f"{name}paragraph {n + 1}", text.marked))

    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        self.check(answers)
        write_translations(self.inline, answers, _set_text)
        out = io.BytesIO()
        self.doc.save(out)
        return out.getvalue()


def _paragraph_units(paragraph: etree._Element) -> list[InlineText]:
    """The paragraph's units of running text, its runs' texts as pieces."""
    items = list(_items(paragraph, ()))
    out = []
    for unit in units(items):
        # The unit's most common formatting (by characters) is its text's own: not a mark.
        weight: Counter[Hashable] = Counter()
        for piece in unit:
            if not piece.anchor:
                weight[piece.path[-1]] += len(piece.text)
        base = weight.most_common(1)[0][0] if weight else None
        out.append(InlineText([p if p.anchor or p.path[-1] != base else Piece(p.text, p.path[:-1], p.ref)
                               for p in unit]))
    return out


def _items(element: etree._Element, containers: tuple[Hashable, ...]) -> Iterator[Piece | None]:
    """The pieces (each ``w:t``, its path the containers and its run's formatting), anchors and
    BREAKs of the paragraph's running text, in order (iterative: nesting is the file's)."""
    stack: list[tuple[Iterator[etree._Element], tuple[Hashable, ...]]] = [(iter(element), containers)]
    while stack:
        children, path = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            continue
        if child.tag == W + "r":
            yield from _run(child, path)
        elif child.tag in CONTAINERS:
            stack.append((iter(child), (*path, ("container", id(child)))))


def _run(run: etree._Element, path: tuple[Hashable, ...]) -> Iterator[Piece | None]:
    properties = run.find(W + "rPr")
    style = ("format", etree.tostring(properties) if properties is not None else b"")
    for child in run:
        if child.tag == W + "t":
            yield Piece(child.text or "", (*path, style), child)
        elif child.tag in BREAKS:
            yield BREAK
        elif child.tag in ANCHORS:
            yield anchor((*path, ("anchor", id(child))))


def _set_text(t: etree._Element, text: str) -> None:
    t.text = text
    if text != text.strip():  # Word drops a w:t's outer spaces unless told to keep them
        t.set(XML_SPACE, "preserve")
