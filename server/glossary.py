"""Glossaries and do-not-translate spans: the terms a translation must give as they are asked
for, and where they stand in a sentence.

A request may carry ``keep`` spans (do-not-translate: product names, code) and ``glossary``
entries (source term -> target term), and may name a glossary the server loaded at start-up
(``nmt-serve --glossary NAME=FILE``). Each is a ``Glossary``; ``RequestTerms`` holds a request's
in priority order (keep, then the request's entries, then the named glossary's) and finds them
in a sentence: as whole words (a term that starts or ends with a letter or digit does not match
inside a longer word), in any letter case, a space in a term matching any run of whitespace;
where matches overlap, the leftmost wins, then the longest, then the higher priority. A kept
span's replacement is the sentence's own text; a glossary term's is its target, exactly as
written. How the server gets them into a translation: server/terms.py.

A glossary file (``--glossary NAME=FILE``; several files may share a NAME, one per language
pair) is UTF-8 text, tab-separated: its first line names the pair's two language codes
(``en<TAB>de``), each line after it is a term and its translation (``Cloud<TAB>Cloud``);
blank lines and lines starting with ``#`` are skipped. A file that breaks a rule stops the
start-up with one line naming the file, the line and the rule (``GlossaryError``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.tokenizer import normalize

# The limits of one request (INVALID_ARGUMENT beyond them, naming the limit) and of a file.
MAX_KEEP = 64  # keep spans per request
MAX_GLOSSARY = 256  # glossary entries per request
MAX_TERM_CHARS = 200  # characters of one keep span or one side of a glossary entry
MAX_FILE_ENTRIES = 100_000  # entries of one glossary file
KEEP, GLOSSARY = "keep", "glossary"  # a Term's kind

_TOKEN = re.compile(r"\w+|[^\w\s]")  # where a match may start: a word, or a sign
_SPACES = re.compile(r"\s+")
_LANGUAGE = re.compile(r"[a-z]{2,3}(?:[-_][a-z0-9]{2,8})*")  # en, pt-br, zh_hans, eng_latn


class GlossaryError(ValueError):
    """A glossary file or --glossary value the server must not start with; one line."""


class TermsError(ValueError):
    """A request's keep, glossary or glossary_name it must be refused for; the message names
    the field and the limit or the reason."""


@dataclass(frozen=True)
class Entry:
    source: str  # as the term is matched: invisible characters removed, whitespace runs one space
    target: str | None  # None: keep (the sentence's own text)


@dataclass(frozen=True)
class Term:
    """One match in a sentence: ``text[start:end]`` and what the translation must have for it."""

    start: int
    end: int
    replacement: str
    kind: str  # KEEP or GLOSSARY


def _fold(text: str) -> str:
    """``text`` in lower case, character for character (so positions stay where they are)."""
    return "".join(low if len(low := c.lower()) == 1 else c for c in text)


def term_text(text: str) -> str:
    """A term as it is matched: as the model reads text (normalize), whitespace runs one space."""
    return _SPACES.sub(" ", normalize(text)).strip()


def _usable(source: str) -> str | None:
    """Why ``source`` (term_text) cannot be a term, or None."""
    if not source:
        return "is empty"
    if len(source) > MAX_TERM_CHARS:
        return f"has {len(source)} characters; the limit is {MAX_TERM_CHARS}"
    if not any(c.isalnum() for c in source):
        return "has no letter or digit"
    return None


class Glossary:
    """Entries indexed by their first word (folded): matching a sentence looks only at the
    entries that start with one of its words, longest first, whatever the glossary's size."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries: dict[str, Entry] = {}  # folded source -> entry (the first one given wins)
        for e in entries:
            self.entries.setdefault(_fold(e.source), e)
        index: dict[str, list[str]] = {}
        for key in self.entries:
            index.setdefault(_TOKEN.match(key).group(), []).append(key)  # type: ignore[union-attr]
        self._index = {first: sorted(keys, key=len, reverse=True) for first, keys in index.items()}

    def __len__(self) -> int:
        return len(self.entries)

    def longest(self, folded: str, at: int, token: str) -> tuple[int, Entry] | None:
        """The longest entry that matches ``folded`` (a folded sentence) at ``at``, where the
        sentence's token ``token`` starts: (where the match ends, the entry)."""
        for key in self._index.get(token, ()):
            end = _match(folded, at, key)
            if end >= 0:
                return end, self.entries[key]
        return None


def _match(folded: str, at: int, key: str) -> int:
    """Where ``key`` ends when it matches ``folded`` at ``at`` as whole words (a space in the key
    matches any run of whitespace), else -1."""
    i = at
    for c in key:
        if c == " ":
            if i >= len(folded) or not folded[i].isspace():
                return -1
            while i < len(folded) and folded[i].isspace():
                i += 1
        elif i < len(folded) and folded[i] == c:
            i += 1
        else:
            return -1
    if key[-1].isalnum() and i < len(folded) and (folded[i].isalnum() or folded[i] == "_"):
        return -1  # inside a longer word
    return i


class RequestTerms:
    """A request's glossaries, highest priority first, and their matches in a sentence."""

    def __init__(self, layers: Sequence[Glossary]) -> None:
        self.layers = tuple(g for g in layers if len(g))

    def __bool__(self) -> bool:
        return bool(self.layers)

    def find(self, text: str) -> list[Term]:
        """The terms of ``text``, left to right: at each word, the longest entry of any layer
        that matches there (on a tie, the higher layer's), and the search goes on after it."""
        out: list[Term] = []
        if not self.layers:
            return out
        folded = _fold(text)
        pos = 0
        for m in _TOKEN.finditer(folded):
            if m.start() < pos:
                continue
            best: tuple[int, Entry] | None = None
            for g in self.layers:
                hit = g.longest(folded, m.start(), m.group())
                if hit and (best is None or hit[0] > best[0]):
                    best = hit
            if best is None:
                continue
            end, entry = best
            keep = entry.target is None
            out.append(Term(m.start(), end, text[m.start():end] if keep else entry.target or "",
                            KEEP if keep else GLOSSARY))
            pos = end
        return out

    @classmethod
    def keeping(cls, spans: Iterable[str]) -> RequestTerms:
        """Terms that keep ``spans`` (no limits: the server's own, such as a pivot's second leg)."""
        return cls([Glossary(Entry(s, None) for s in map(term_text, spans) if s)])


# ---------------------------------------------------------------------------------- a request's

def request_terms(keep: Sequence[str], glossary: Sequence[tuple[str, str]], name: str,
                  named: Mapping[str, Mapping[str, Glossary]], pair: str) -> RequestTerms:
    """A request's keep spans, glossary entries and named glossary (for ``pair``, "en-de"),
    checked against the limits; TermsError names the field and the limit or the reason."""
    if len(keep) > MAX_KEEP:
        raise TermsError(f"keep: {len(keep)} spans; the limit is {MAX_KEEP}")
    if len(glossary) > MAX_GLOSSARY:
        raise TermsError(f"glossary: {len(glossary)} entries; the limit is {MAX_GLOSSARY}")
    kept = []
    for i, span in enumerate(keep):
        source = term_text(span)
        if why := _usable(source):
            raise TermsError(f"keep[{i}] {_shown(span)} {why}")
        kept.append(Entry(source, None))
    entries: dict[str, tuple[int, Entry]] = {}
    for i, (source, target) in enumerate(glossary):
        term = term_text(source)
        if why := _usable(term):
            raise TermsError(f"glossary[{i}].source {_shown(source)} {why}")
        if not target.strip():
            raise TermsError(f"glossary[{i}].target is empty")
        if len(target) > MAX_TERM_CHARS:
            raise TermsError(f"glossary[{i}].target has {len(target)} characters; the limit is {MAX_TERM_CHARS}")
        seen = entries.get(_fold(term))
        if seen and seen[1].target != target:
            raise TermsError(f"glossary[{i}].source {_shown(source)} is glossary[{seen[0]}].source too, with "
                             f"another target")
        entries.setdefault(_fold(term), (i, Entry(term, target)))
    layers = [Glossary(kept), Glossary(e for _, e in entries.values())]
    if name:
        if name not in named:
            loaded = ", ".join(sorted(named)) or "none (nmt-serve --glossary NAME=FILE loads one)"
            raise TermsError(f"glossary_name {_shown(name)} is not a glossary of this server; loaded: {loaded}")
        if pair not in named[name]:
            raise TermsError(f"glossary_name {_shown(name)} has no {pair} glossary; it has "
                             f"{', '.join(sorted(named[name]))}")
        layers.append(named[name][pair])
    return RequestTerms(layers)


def _shown(value: str, limit: int = 64) -> str:
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


# ---------------------------------------------------------------------------------- files

def read_file(path: Path) -> tuple[str, Glossary]:
    """A glossary file: its language pair ("en-de") and its entries. GlossaryError (one line,
    naming the file and the line) for anything that breaks the format."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise GlossaryError(f"glossary {path}: cannot read it: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = text_line(e.object, e.start)
        raise GlossaryError(f"glossary {path} line {line}: not UTF-8 text") from None
    pair = ""
    entries: dict[str, tuple[int, Entry]] = {}
    for n, line in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        columns = line.split("\t")

        def bad(reason: str, n: int = n) -> GlossaryError:
            return GlossaryError(f"glossary {path} line {n}: {reason}")

        if len(columns) != 2:
            raise bad(f"{len(columns)} tab-separated columns; a line is SOURCE<TAB>TARGET"
                      + ("" if pair else " (the first line names the languages: en<TAB>de)"))
        if not pair:
            codes = [c.strip().lower() for c in columns]
            if not all(_LANGUAGE.fullmatch(c) for c in codes) or codes[0] == codes[1]:
                raise bad(f"the first line must name the two languages, such as en<TAB>de; it is {line[:40]!r}")
            pair = "-".join(codes)
            continue
        source, target = term_text(columns[0]), columns[1].strip()
        if why := _usable(source):
            raise bad(f"the source {why}")
        if not target:
            raise bad("the target is empty")
        if len(target) > MAX_TERM_CHARS:
            raise bad(f"the target has {len(target)} characters; the limit is {MAX_TERM_CHARS}")
        seen = entries.get(_fold(source))
        if seen:
            if seen[1].target != target:
                raise bad(f"{source!r} is on line {seen[0]} already, with another target")
            continue
        if len(entries) == MAX_FILE_ENTRIES:
            raise bad(f"more than {MAX_FILE_ENTRIES} entries")
        entries[_fold(source)] = (n, Entry(source, target))
    if not pair:
        raise GlossaryError(f"glossary {path} line 1: the file is empty; its first line names the languages "
                            f"(en<TAB>de), the lines after it are SOURCE<TAB>TARGET")
    return pair, Glossary(e for _, e in entries.values())


def text_line(data: bytes, offset: int) -> int:
    """The 1-based line of ``data`` that byte ``offset`` is on."""
    return data.count(b"\n", 0, offset) + 1


def load_named(specs: Sequence[str]) -> dict[str, dict[str, Glossary]]:
    """``--glossary NAME=FILE`` values: name -> pair -> glossary. GlossaryError for a value
    that is not NAME=FILE, a file that does not load, or two files of one name and pair."""
    out: dict[str, dict[str, Glossary]] = {}
    files: dict[tuple[str, str], str] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        name, file = name.strip(), file.strip()
        if not sep or not name or not file:
            raise GlossaryError(f"--glossary {spec!r}: give NAME=FILE")
        pair, glossary = read_file(Path(file))
        if (name, pair) in files:
            raise GlossaryError(f"--glossary {name}: {files[name, pair]} and {file} are both its {pair} glossary")
        files[name, pair] = file
        out.setdefault(name, {})[pair] = glossary
    return out
