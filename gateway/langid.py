"""Language identification for LibreTranslate's ``source: "auto"`` and ``/detect``.

py3langid (a maintained fork of langid.py: numpy only, its model shipped in the wheel as
plain arrays, nothing downloaded or unpickled) ranks the languages a text may be in, among
the languages the loaded models serve only. Chosen over langdetect on the Bible's held-out
lines (``python -m bench.langid_eval``, table in docs/http-api.md): as accurate on whole
lines, 99 % against 81 % on three-word fragments, and about 40 times cheaper a call.

Confidence is LibreTranslate's: a percentage, the candidates' probabilities summing to 100.
A text without letters (numbers, emoji, punctuation), or one without a feature of any candidate
("ok"), has no language: ``rank`` gives none.
"""

from __future__ import annotations

import copy
import html
import re
import threading
from collections.abc import Collection, Sequence

LETTER = re.compile(r"[^\W\d_]")  # a letter of any script
TAG = re.compile(r"<[^>]*>")
TOP = 3  # candidates in a ranking, as LibreTranslate gives them

_lock = threading.Lock()
_base = None  # py3langid's LanguageIdentifier over every language, loaded once a process
_restricted: dict[frozenset[str], object] = {}  # the same, restricted to a set of candidates


class Unavailable(Exception):
    """py3langid is not installed (it comes with the ``http`` extra)."""


def has_letters(text: str) -> bool:
    return LETTER.search(text) is not None


def plain(text: str, fmt: str) -> str:
    """What to identify: for format=html, the text without its tags and with its escapes read."""
    return html.unescape(TAG.sub(" ", text)) if fmt == "html" else text


def load() -> None:
    """Load the identifier's model (about a second, once a process); Unavailable without it."""
    global _base
    with _lock:
        if _base is not None:
            return
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError as e:
            raise Unavailable("language detection needs py3langid: pip install 'nmt-transformer[http]'") from e
        _base = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _identifier(candidates: frozenset[str]):
    load()
    with _lock:
        ident = _restricted.get(candidates)
        if ident is None:
            known = [c for c in candidates if c in set(_base.nb_classes)]
            ident = None
            if known:
                ident = copy.copy(_base)  # shares the model's arrays; set_languages takes slices
                ident.set_languages(known)
            _restricted[candidates] = ident
        return ident


def rank(text: str, candidates: Collection[str]) -> list[tuple[str, float]]:
    """The likeliest of ``candidates`` for ``text``, best first, with LibreTranslate's confidence
    (0-100, one decimal); at most TOP, and none when the text has no letters or no candidate is
    a language the identifier knows."""
    if not has_letters(text):
        return []
    ident = _identifier(frozenset(candidates))
    if ident is None:
        return []
    ranked = ident.rank(text)
    if ranked[0][1] - ranked[-1][1] < 1e-6:
        return []  # no feature of any language in it ("ok"): every candidate as likely
    return [(code, round(100 * p, 1)) for code, p in ranked[:TOP] if p >= 0.0005 or code == ranked[0][0]]


def rank_many(texts: Sequence[str], candidates: Collection[str]) -> list[tuple[str, float]]:
    """One ranking for several texts, as LibreTranslate's /detect gives for a list: each
    language's confidence averaged over the texts, weighted by their lengths."""
    weighted: dict[str, float] = {}
    total = 0
    for text in texts:
        r = rank(text, candidates)
        if not r:
            continue
        total += len(text)
        for code, confidence in r:
            weighted[code] = weighted.get(code, 0.0) + confidence * len(text)
    if not total:
        return []
    out = sorted(((code, round(w / total, 1)) for code, w in weighted.items()), key=lambda x: -x[1])
    return out[:TOP]
