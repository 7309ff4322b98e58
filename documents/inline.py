"""Running text that a file holds in pieces (Word's runs, OpenDocument's spans and text nodes,
a subtitle's text between its tags), translated whole and given back to the same pieces.

A piece is a string that one element of the file holds, with its ``path``: the inline
containers it sits in, outermost first (a span of some style, a link, a run of bold). The
paragraph's text is the pieces' texts in order; each container is a ``Mark`` over the pieces
it holds, nested as the containers are, just as HTML's inline tags are marks over their text
(documents/html_text.py). The paragraph is translated whole, the marks are placed on the
translation by the model's attention (documents/alignment.py), and the translation is cut
back into the same pieces:

- the text a mark's span covers goes to that mark's own pieces, the rest to the paragraph's;
- between two marks (or before the first, after the last), the text goes to the first piece
  that stood there in the source, and the other pieces there are emptied; where no piece
  stood, it goes to the end of the piece before (or the start of the one after).

So no element is added or removed: every run, span and link stays where it was with its
formatting, only the text it holds changes, and no character of the translation is lost.
An element without text inside a sentence (a footnote mark, an image, a bookmark) is an
``anchor``: a point that the attention places on the translation, so that the words before and
after it stay before and after it. An element that separates texts (a tab, a line break) is a
``BREAK``: it ends one unit and starts the next, and stays where it is.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from documents.document import SPACE, translatable
from documents.html_text import Mark, Placement, Unit

CLOSE = "</>"  # a mark's close must be non-empty (an empty one is a void element); never written


@dataclass(frozen=True)
class Piece:
    text: str
    path: tuple[Hashable, ...] = ()  # its containers, outermost first; () directly in the paragraph
    ref: object = field(default=None, compare=False)  # what holds it in the file (the format's to use)
    anchor: bool = False  # an element that writes itself (a footnote mark, an image) and stays between words


def anchor(path: tuple[Hashable, ...], text: str = "") -> Piece:
    """An element inside running text that writes itself (a footnote mark, an image; ``text``:
    what it reads as, such as the spaces of OpenDocument's ``text:s``): a point placed on the
    translation by the attention, so that the words around it go before and after it as they
    did. The last key of ``path`` must be its own (no other piece has it)."""
    return Piece(text, path, anchor=True)


BREAK = None  # in a sequence of pieces: an element without text that ends a unit


class InlineText:
    """One unit of running text made of pieces: ``text`` (stripped) to translate, ``unit`` (its
    marks) to place, and ``render`` that cuts a translation back into the pieces."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = list(pieces)
        self.full = "".join(p.text for p in self.pieces)
        marks: list[list[int]] = []  # [start, end, parent]
        stack: list[tuple[Hashable, int]] = []  # the open containers: (key, mark index)
        self.node: list[int] = []  # each piece's innermost mark (-1: the paragraph)
        self.anchors: set[int] = set()  # the marks of anchors
        self.gap: list[int] = []  # how many children its node had opened before it
        opened: dict[int, int] = {}  # node -> children opened so far
        at = 0
        for piece in self.pieces:
            common = 0
            while common < min(len(stack), len(piece.path)) and stack[common][0] == piece.path[common]:
                common += 1
            while len(stack) > common:
                marks[stack.pop()[1]][1] = at
            for key in piece.path[common:]:
                parent = stack[-1][1] if stack else -1
                opened[parent] = opened.get(parent, 0) + 1
                marks.append([at, -1, parent])
                stack.append((key, len(marks) - 1))
            node = stack[-1][1] if stack else -1
            if piece.anchor:
                self.anchors.add(node)
            self.node.append(node)
            self.gap.append(opened.get(node, 0))
            at += len(piece.text)
        for _, m in stack:
            marks[m][1] = at
        self.marks = [Mark(start, end, "", CLOSE, parent) for start, end, parent in marks]
        core = self.full.strip(SPACE)
        self.lead = self.full[:len(self.full) - len(self.full.lstrip(SPACE))]
        self.trail = self.full[len(self.lead) + len(core):]
        self.text = core

    @property
    def translatable(self) -> bool:
        return translatable(self.text)

    @property
    def marked(self) -> bool:
        return bool(self.marks)

    def render(self, translation: str, place: Placement) -> list[str]:
        """Each piece's new text: ``translation`` (of ``text``) with the whitespace around as it
        was, cut at the marks' spans that ``place`` gives."""
        shift, size = len(self.lead), len(self.text)
        core = []
        for i, m in enumerate(self.marks):
            start, end = min(max(m.start - shift, 0), size), min(max(m.end - shift, 0), size)
            # An anchor is a point: it goes after the translation of the word before it.
            core.append(Mark(start, start if i in self.anchors else end, m.open, m.close, m.parent))
        spans = place(Unit(self.text, core), translation) if core else []
        # The whitespace around, but an anchor's own (it writes itself where it stands).
        lead = self._own(0, len(self.lead))
        whole = lead + translation + self._own(len(self.full) - len(self.trail), len(self.full))
        spans = [(a + len(lead), a + len(lead)) if i in self.anchors else (a + len(lead), b + len(lead))
                 for i, (a, b) in enumerate(spans)]
        # An anchor that reads as a space (OpenDocument's text:s) is the space between the words
        # around it: the translation's own space there goes.
        for i in sorted(self.anchors, key=lambda i: -spans[i][0]):
            if self.pieces[self._first_piece(i)].text.isspace():
                at = spans[i][0]
                gone = at if at < len(whole) and whole[at] == " " else at - 1 if at and whole[at - 1] == " " else -1
                if gone >= 0:
                    whole = whole[:gone] + whole[gone + 1:]
                    spans = [(a - (a > gone), b - (b > gone)) for a, b in spans]
        return self._cut(whole, spans)

    def _first_piece(self, mark: int) -> int:
        return next(i for i in range(len(self.pieces)) if self._inside(i, mark))

    def _own(self, start: int, end: int) -> str:
        """The characters of ``full[start:end]`` that pieces other than anchors hold."""
        out, at = [], 0
        for piece in self.pieces:
            a, b = max(at, start), min(at + len(piece.text), end)
            if a < b and not piece.anchor:
                out.append(self.full[a:b])
            at += len(piece.text)
        return "".join(out)

    def _cut(self, text: str, spans: list[tuple[int, int]]) -> list[str]:
        n = len(self.marks)
        children: list[list[int]] = [[] for _ in range(n + 1)]  # children[node + 1]
        for i, m in enumerate(self.marks):
            children[m.parent + 1].append(i)
        first: dict[tuple[int, int], int] = {}  # (node, gap) -> the first piece there
        for i, key in enumerate(zip(self.node, self.gap)):
            first.setdefault(key, i)
        first_in = [len(self.pieces)] * n  # the first piece inside each mark (a mark holds at least one)
        for i, node in enumerate(self.node):
            while node >= 0:
                first_in[node] = min(first_in[node], i)
                node = self.marks[node].parent
        out: list[list[str]] = [[] for _ in self.pieces]

        def give(node: int, gap: int, chunk: str) -> None:
            if not chunk:
                return
            if (node, gap) in first:
                out[first[node, gap]].append(chunk)
                return
            # No piece stood here: the nearest piece before (else after) that holds text; the
            # anchors between hold none, so the pieces' texts stay in the translation's order.
            kids = children[node + 1]
            boundary = first_in[kids[gap]] if gap < len(kids) else first_in[kids[gap - 1]]
            if gap == len(kids):
                while boundary < len(self.pieces) and self._inside(boundary, kids[gap - 1]):
                    boundary += 1
            holders = [i for i in range(len(self.pieces)) if not self.pieces[i].anchor]
            before = [i for i in holders if i < boundary]
            after = [i for i in holders if i >= boundary]
            if not holders:
                raise ValueError("running text of anchors only has nowhere to put a translation")
            out[before[-1] if before else after[0]].append(chunk)

        # Depth first, in the text's order (iterative: nesting depth is the file's to choose).
        stack = [[-1, 0, 0, len(text)]]  # [node, next child, text given up to, node's end]
        while stack:
            frame = stack[-1]
            node, k, at, end = frame
            kids = children[node + 1]
            if k == len(kids):
                give(node, k, text[at:end])
                stack.pop()
                continue
            start, stop = spans[kids[k]]
            give(node, k, text[at:start])
            frame[1], frame[2] = k + 1, stop
            stack.append([kids[k], 0, start, stop])
        return ["".join(chunks) for chunks in out]

    def _inside(self, piece: int, mark: int) -> bool:
        node = self.node[piece]
        while node >= 0 and node != mark:
            node = self.marks[node].parent
        return node == mark


def units(items: Iterable[Piece | None]) -> list[list[Piece]]:
    """The runs of pieces between BREAKs (empty runs left out)."""
    out: list[list[Piece]] = [[]]
    for item in items:
        if item is BREAK:
            out.append([])
        else:
            out[-1].append(item)
    return [u for u in out if u]
