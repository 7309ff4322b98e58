"""Plain text (.txt): each line with a letter in it is a segment, translated on its own, as
nmt-translate translates a text file line by line (the server ends a sentence at every line
break anyway). Blank and letterless lines, the whitespace around each line, the line endings
(LF or CRLF) and a byte-order mark come back as they were."""

from __future__ import annotations

from collections.abc import Sequence

from documents.document import Document, Segment, best, decode, split_space, translatable
from nmt.v1 import translator_pb2 as pb


class TextFile(Document):
    def __init__(self, data: bytes) -> None:
        text, self.encoding = decode(data, ".txt")
        # [lead, core, trail, ending] per line; core is translated when it has a letter.
        self.lines: list[list[str]] = []
        parts = text.split("\n")
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            if last and not part:  # the text ends with a line ending (or is empty)
                break
            ending = "" if last else "\r\n" if part.endswith("\r") else "\n"
            body = part[:-1] if ending == "\r\n" else part
            self.lines.append([*split_space(body), ending])
        self.translated = [i for i, line in enumerate(self.lines) if translatable(line[1])]
        self.segments = [Segment(self.lines[i][1], f"line {i + 1}") for i in self.translated]

    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        self.check(answers)
        lines = [list(line) for line in self.lines]
        for i, answer in zip(self.translated, answers):
            lines[i][1] = best(answer).replace("\r", " ").replace("\n", " ")
        return "".join("".join(line) for line in lines).encode(self.encoding)
