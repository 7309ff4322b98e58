"""Clean-up shared by the harvesters of Debian's human translations (corpus/ddtp.py,
corpus/catalogs.py): markup and accelerators out, format strings kept consistent, language
and script checks, length ratio, duplicates and boilerplate. Standard library only.

Every check returns the reason a pair is dropped (or None), so each source's report can say
how many pairs were kept and why the others went.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

MAX_LENGTH_RATIO = 3.0  # characters, longer side over shorter, beyond a short-text allowance
MAX_CHARS = 600  # longer units are left out: training keeps 200 tokens a sentence
BOILERPLATE_CAP = 3  # pairs kept per distinct English text (licences, "This package contains ...")
# Pairs whose key hashes to these buckets (of 100) are dev and test: about 1 % and 2 %.
DEV_BUCKETS, TEST_BUCKETS = frozenset({2}), frozenset({0, 1})

_WHITESPACE = re.compile(r"\s+")
_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?/?>")
_ENTITY = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'", "&nbsp;": " "}
# printf (%s, %1$s, %-5.2f, %%), Python (%(name)s, {0}, {name}), Qt/KDE (%1), shell/make ($(ARG1), ${x}, $VAR)
FORMAT_SPEC = re.compile(r"%(?:\d+\$|\(\w+\))?[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|L|z|j|t)?[diouxXeEfFgGcrsp%]"
                         r"|%\d+|\{[\w.:!]*\}|\$\([\w.]+\)|\$\{\w+\}|\$[A-Z_][A-Z0-9_]*")
_ACCELERATOR = re.compile(r"(?:(?<=^)|(?<=[\s(]))[_&~](?=\w)|(?<=[^\W\d_])[_&~](?=[^\W\d_])")
_LETTER = re.compile(r"[^\W\d_]")
# UTF-8 read as Latin-1 or Windows-1252 ("envÃ­a", "Â«"), or bytes that were not text at all
_MOJIBAKE = re.compile("[\u00c2\u00c3][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u02c6\u02dc"
                       "\u2013-\u203a\u20ac\u2122]|\ufffd")

def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# A few hundred of the commonest function words per language: enough to tell en, de, fr and es
# apart on a sentence, and to catch a "translation" left in English. Lower case, no accents.
STOPWORDS: dict[str, frozenset[str]] = {
    "en": _words("the of and to in is for it that with on this you be are as by from at or an can not your "
                 "will which all have has was its if more use used allows into these other but also when "
                 "they their there been one would should what how about may only any such"),
    "de": _words("der die das und ist in zu den mit von fur nicht ein eine sie es dem des auf fur sich auch "
                 "wird werden kann als bei oder aus ihr ihre wenn dieses diese dieser einer einen einem sind "
                 "noch nach uber wie nur wir ich du hat haben dass zum zur im vom"),
    "fr": _words("le la les de des du et est un une pour dans en que qui ne pas sur avec par au aux il elle "
                 "vous nous ce cette ces son sa ses ou plus peut sont etre votre vos leur mais comme tout "
                 "aussi si permet fichier je tu on"),
    "es": _words("el la los las de del y es un una para en que con por se no su sus al lo como mas este "
                 "esta estos estas puede son ser o usted nos le les pero todo tambien si muy hay yo tu"),
}


def strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def clean_text(text: str) -> str:
    """Markup out (tags, common entities), whitespace normalised, invisible characters dropped."""
    text = _TAG.sub("", text)
    for entity, char in _ENTITY.items():
        text = text.replace(entity, char)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")  # soft hyphen, ZWSP, bidi marks
    return _WHITESPACE.sub(" ", text).strip()


def strip_accelerators(text: str) -> str:
    """A UI string without its accelerator marks (``_File``, ``&Open``, ``~Save``)."""
    if (text.count("&&") == 0 and text.count("&") == 1) or text.count("_") == 1 or text.count("~") == 1:
        return _ACCELERATOR.sub("", text, count=1)
    return text


def format_specs(text: str) -> Counter[str]:
    """The multiset of format strings and placeholders in a text (positional ``%1$s`` kept as is)."""
    return Counter(FORMAT_SPEC.findall(text))


def guess_language(text: str) -> str | None:
    """en, de, fr or es by function words, or None when the text holds too few to say."""
    words = re.findall(r"[a-z]+", strip_accents(text.lower()))
    counts = {lang: sum(w in stop for w in words) for lang, stop in STOPWORDS.items()}
    best = max(counts, key=counts.__getitem__)
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] < 2 or ranked[0] == ranked[1]:
        return None
    return best


def latin_script(text: str) -> bool:
    """Every letter is Latin (all four of our languages are written in it)."""
    return all("LATIN" in unicodedata.name(c, "") for c in _LETTER.findall(text))


def drop_reason(en: str, xx: str, lang: str) -> str | None:
    """Why the pair (English, translation into ``lang``) is not kept, or None to keep it."""
    if not en or not xx:
        return "empty"
    if not _LETTER.search(en) or not _LETTER.search(xx):
        return "no letters"
    if en == xx:
        return "untranslated"
    if max(len(en), len(xx)) > MAX_CHARS:
        return "too long"
    short, long_ = sorted((len(en), len(xx)))
    if long_ > MAX_LENGTH_RATIO * short + 10:
        return "length ratio"
    if format_specs(en) != format_specs(xx):
        return "format strings differ"
    if _MOJIBAKE.search(en) or _MOJIBAKE.search(xx):
        return "encoding"
    if not latin_script(en) or not latin_script(xx):
        return "script"
    guess_en, guess_xx = guess_language(en), guess_language(xx)
    if guess_en not in (None, "en"):
        return "English side is not English"
    if guess_xx not in (None, lang):
        return "translation in another language"
    return None


def near_key(text: str) -> str:
    """What two near-duplicates share: lower case, no accents, digits and punctuation out."""
    return " ".join(re.findall(r"[a-z]+", strip_accents(text.lower())))


def dedup(rows: Iterable[tuple[str, str, str]], banned: set[str] = frozenset(),  # type: ignore[assignment]
          cap: int = BOILERPLATE_CAP) -> tuple[list[tuple[str, str, str]], Counter[str]]:
    """Rows (key, English, translation) without exact and near duplicates, at most ``cap`` per
    English text (boilerplate), none whose English is in ``banned`` (held-out text)."""
    seen: set[tuple[str, str]] = set()
    per_english: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    out = []
    for key, en, xx in rows:
        near = (near_key(en), near_key(xx))
        if near in seen:
            dropped["duplicate"] += 1
            continue
        if near[0] in banned:
            dropped["in a held-out split"] += 1
            continue
        if per_english[near[0]] >= cap:
            dropped["boilerplate"] += 1
            continue
        seen.add(near)
        per_english[near[0]] += 1
        out.append((key, en, xx))
    return out, dropped


def split_of(key: str, dev: frozenset[int] = DEV_BUCKETS, test: frozenset[int] = TEST_BUCKETS) -> str:
    """train, dev or test for a unit of splitting (a source package), the same on every machine; a
    source with few units (KDE's handbooks) holds out more buckets."""
    bucket = int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100
    return "test" if bucket in test else "dev" if bucket in dev else "train"


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'»”)]*\s+(?=[\"'«“(¿¡]*[A-ZÀ-ÖØ-Þ0-9])")
_ABBREVIATION = re.compile(r"(?:\b(?:e\.g|i\.e|etc|z\.B|d\.h|bzw|usw|ca|vs|Dr|Mr|Mrs|Nr|p\.ex|etc)|\b[A-Z])\.$")


def sentences(text: str) -> list[str]:
    """A paragraph cut at sentence ends (not after common abbreviations or initials)."""
    out: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        piece = text[start:m.start()].rstrip()
        if _ABBREVIATION.search(piece):
            continue
        out.append(text[start:m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def align_units(en: Sequence[str], xx: Sequence[str]) -> list[tuple[str, str]]:
    """Paragraphs aligned one to one, each cut into sentences where both sides hold as many."""
    out = []
    for a, b in zip(en, xx):
        sa, sb = sentences(a), sentences(b)
        out += list(zip(sa, sb)) if len(sa) == len(sb) else [(a, b)]
    return out
