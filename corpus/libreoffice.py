"""Modern parallel text from Debian's LibreOffice packages: the help and the UI catalogs.

- Help (``libreoffice-help-en-us``, ``-de``, ``-fr``, ``-es``; MPL-2.0): one HTML page per
  topic, the same pages in every language, and every paragraph and heading carries the same
  ``id`` (``par_id3147762``, ``hd_id701641581066778``) in every language. Aligned by
  (page, id): fluent technical prose.
- UI catalogs (``libreoffice-l10n-de`` ...): gettext ``.mo`` files whose msgid is
  ``context\\x04English`` and msgstr the translation: menu items, dialog labels, messages.
  Training only (short strings; dev and test come from the help).

Splits never leak: the help is split by page (a stable hash of its path, the same in every
language), so a page's paragraphs are all in one split; training pairs whose English side
also occurs in dev or test are dropped. Clean-up: markup left-overs (tags, ``$[officename]``,
accelerator marks), whitespace, identical pairs, length-ratio outliers and duplicates.
Standard library only.
"""

from __future__ import annotations

import gettext
import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from html.parser import HTMLParser
from pathlib import Path

from cli import UsageError
from corpus import debian
from corpus.bible import Pair
from corpus.tsv import directed_pairs, write_rows
from corpus.tsv import read_rows as read_tsv

LANGUAGES = ("de", "fr", "es")  # besides English
HELP_PACKAGE = {"en": "libreoffice-help-en-us", **{lang: f"libreoffice-help-{lang}" for lang in LANGUAGES}}
HELP_DIR = {"en": "en-US", **{lang: lang for lang in LANGUAGES}}
UI_PACKAGE = {lang: f"libreoffice-l10n-{lang}" for lang in LANGUAGES}
SOURCES = ("libreoffice-help", "libreoffice-ui")
# Pages whose path hashes to these buckets (of 100) are dev and test: about 1 % and 2 %.
DEV_BUCKETS, TEST_BUCKETS = frozenset({2}), frozenset({0, 1})
MAX_LENGTH_RATIO = 3.0  # characters, longer side over shorter, beyond a short-text allowance
CACHE_VERSION = 1  # bump when the extraction or clean-up changes: cached pairs are rebuilt

_ALIGNED_ID = re.compile(r"^(par|hd)_id\w+$")
_WHITESPACE = re.compile(r"\s+")
_MNEMONIC = re.compile(r"(?:(?<=^)|(?<=[\s(]))_(?=\w)|(?<=[a-zà-ÿ])_(?=[a-zà-ÿ])")


def clean_text(text: str) -> str:
    """Whitespace normalised, soft hyphens dropped, the product-name variable spelled out."""
    text = text.replace("$[officename]", "LibreOffice").replace("%PRODUCTNAME", "LibreOffice")
    text = text.replace("\u00ad", "").replace("\u200b", "")
    return _WHITESPACE.sub(" ", text).strip()


def clean_ui(text: str) -> str:
    """A UI string without its accelerator marks (``~File``, ``_Options``) or ellipsis padding."""
    text = text.replace("~", "")
    if text.count("_") == 1:
        text = _MNEMONIC.sub("", text)
    return clean_text(text)


def page_split(page: str) -> str:
    """train, dev or test for a help page (its path below the language folder)."""
    bucket = int(hashlib.sha1(page.encode()).hexdigest(), 16) % 100
    return "test" if bucket in TEST_BUCKETS else "dev" if bucket in DEV_BUCKETS else "train"


class _Paragraphs(HTMLParser):
    """Text of every element whose id is an aligned paragraph or heading id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: dict[str, str] = {}
        self._open: list[tuple[str, str, int, list[str]]] = []  # (tag, id, depth of that tag, text)
        self._depth: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "meta", "input", "link"):
            if tag == "br":
                self.handle_data(" ")
            return
        self._depth[tag] = self._depth.get(tag, 0) + 1
        ident = dict(attrs).get("id") or ""
        if _ALIGNED_ID.match(ident) and ident not in self.found:
            self._open.append((tag, ident, self._depth[tag], []))

    def handle_endtag(self, tag: str) -> None:
        depth = self._depth.get(tag, 0)
        if self._open and self._open[-1][0] == tag and self._open[-1][2] == depth:
            _, ident, _, parts = self._open.pop()
            text = clean_text("".join(parts))
            self.found[ident] = text
            if self._open:  # a nested paragraph's text belongs to its parent too
                self._open[-1][3].append(" " + text + " ")
        if depth:
            self._depth[tag] = depth - 1

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][3].append(data)


def page_paragraphs(path: Path) -> dict[str, str]:
    parser = _Paragraphs()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return {k: v for k, v in parser.found.items() if v}


def help_root(lang: str, cache: Path | None = None) -> Path:
    root = debian.unpacked(HELP_PACKAGE[lang], cache) / "usr/share/libreoffice/help" / HELP_DIR[lang]
    if not root.is_dir():
        raise UsageError(f"{HELP_PACKAGE[lang]} has no help folder {HELP_DIR[lang]}")
    return root


def help_pages(lang: str, cache: Path | None = None) -> dict[str, dict[str, str]]:
    """{page path: {paragraph id: text}} of one language's help."""
    root = help_root(lang, cache)
    return {str(p.relative_to(root)): page_paragraphs(p) for p in sorted(root.rglob("*.html"))}


def ui_strings(lang: str, cache: Path | None = None) -> list[tuple[str, str, str]]:
    """(catalog, English, translation) of every translated singular UI string."""
    root = debian.unpacked(UI_PACKAGE[lang], cache) / "usr/lib/libreoffice/program/resource" / lang / "LC_MESSAGES"
    out = []
    for mo in sorted(root.glob("*.mo")):
        with mo.open("rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
        for key, value in catalog.items():
            if not isinstance(key, str) or not key or not value:
                continue  # plural forms are keyed by (msgid, n); "" is the header
            english = key.split("\x04", 1)[-1]
            out.append((mo.stem, english, value))
    return out


def acceptable(src: str, tgt: str) -> bool:
    """Not empty, not identical, and of plausible relative length."""
    if not src or not tgt or src == tgt:
        return False
    short, long_ = sorted((len(src), len(tgt)))
    return long_ <= MAX_LENGTH_RATIO * short + 10


def _aligned(lang: str, cache: Path | None) -> dict[str, list[tuple[str, str, str]]]:
    """{split: [(key, english, translation)]} of the help, aligned by page and id, cleaned."""
    english, other = help_pages("en", cache), help_pages(lang, cache)
    out: dict[str, list[tuple[str, str, str]]] = {"train": [], "dev": [], "test": []}
    for page, paragraphs in english.items():
        theirs = other.get(page, {})
        split = page_split(page)
        for ident, text in paragraphs.items():
            if ident in theirs:
                out[split].append((f"{page}#{ident}", text, theirs[ident]))
    return out


def _dedup(rows: Iterable[tuple[str, str, str]], banned: set[str]) -> list[tuple[str, str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for key, en, xx in rows:
        if (en, xx) in seen or en in banned or not acceptable(en, xx):
            continue
        seen.add((en, xx))
        out.append((key, en, xx))
    return out


def build_language(lang: str, cache: Path | None = None) -> dict[str, dict[str, list[tuple[str, str, str]]]]:
    """{source: {split: [(key, english, translation)]}} for English and ``lang``, cleaned."""
    aligned = _aligned(lang, cache)
    held_out = {en for split in ("dev", "test") for _, en, _ in aligned[split]}
    test = _dedup(aligned["test"], set())
    dev = _dedup(aligned["dev"], {en for _, en, _ in test})
    help_ = {"train": _dedup(aligned["train"], held_out), "dev": dev, "test": test}
    ui = [(f"{catalog}.mo", clean_ui(en), clean_ui(xx)) for catalog, en, xx in ui_strings(lang, cache)]
    return {"libreoffice-help": help_,
            "libreoffice-ui": {"train": _dedup(ui, held_out), "dev": [], "test": []}}


def corpus_dir(cache: Path | None = None) -> Path:
    return (cache or debian.cache_dir()) / "corpus" / f"libreoffice-v{CACHE_VERSION}"


def build(languages: Sequence[str] = LANGUAGES, cache: Path | None = None, force: bool = False) -> Path:
    """Fetch, extract, align, clean and split; the result is cached as TSV files
    (``{source}.{split}.en-{lang}.tsv``: key, English, translation) with ``stats.json``."""
    out = corpus_dir(cache)
    out.mkdir(parents=True, exist_ok=True)
    stats_path = out / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    for lang in languages:
        if lang not in LANGUAGES:
            raise UsageError(f"LibreOffice corpus language {lang!r} is not one of {', '.join(LANGUAGES)}")
        if f"en-{lang}" in stats and not force:
            continue
        built = build_language(lang, cache)
        stats[f"en-{lang}"] = {}
        for source, splits in built.items():
            for split, rows in splits.items():
                write_rows(out / f"{source}.{split}.en-{lang}.tsv", rows)
                stats[f"en-{lang}"][f"{source}.{split}"] = len(rows)
        stats_path.write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    return out


def read_rows(source: str, split: str, lang: str, cache: Path | None = None) -> list[tuple[str, str, str]]:
    """(key, English, translation) rows of one source, split and language, built on first use."""
    if source not in SOURCES:
        raise UsageError(f"modern corpus source {source!r} is not one of {', '.join(SOURCES)}")
    path = corpus_dir(cache) / f"{source}.{split}.en-{lang}.tsv"
    if not path.exists():
        build([lang], cache)
    return read_tsv(path)


def pairs(source: str, directions: Sequence[str], split: str, cache: Path | None = None) -> list[Pair]:
    """Pairs of one source and split for every direction (en-xx or xx-en) it covers."""
    return directed_pairs(lambda lang: read_rows(source, split, lang, cache), directions, LANGUAGES)


def sample_test(languages: Sequence[str] = LANGUAGES, per_language: int = 40, seed: int = 1,
                cache: Path | None = None) -> list[tuple[str, str, str, str]]:
    """A fixed sample of the help's test split for a quick gate: ``per_language`` paragraphs of
    5 to 40 words per language, as (language, key, English, translation), used both ways."""
    out = []
    for lang in languages:
        rows = [r for r in read_rows("libreoffice-help", "test", lang, cache) if 5 <= len(r[1].split()) <= 40]
        out += [(lang, *r) for r in sorted(random.Random(seed).sample(rows, min(per_language, len(rows))))]
    return out
