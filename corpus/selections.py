"""Everyday-text selections of the built corpora, so a training mixture can weigh them apart
from the sources they come from. Nothing new is fetched: each selection filters the cached rows
of one split (train, dev or test: held-out text stays held out), keeping their keys, so every
pair still traces back to its package.

- ``debian-dialogue``: the games' message catalogs (Wesnoth's campaigns, Freeciv, Widelands,
  Warzone 2100, Minetest, ...; corpus/catalog_packages.py) where the English is a sentence of two
  words or more: characters talking to each other and narration, the nearest thing Debian holds
  to conversation. Inside ``debian-catalogs`` they are a few per cent of the pairs.
- ``debian-courtesy``: short pairs (at most ``COURTESY_MAX_WORDS`` English words) from every
  Debian source and LibreOffice's UI whose English greets, thanks, asks, apologises, welcomes or
  signs off (``COURTESY``): "Good morning!", "Best regards", "Thank you for your help.". Each
  occurs a handful of times in a million pairs; a model that sees them once a pass copies or
  garbles them ("Hello!" -> "Hello!", "Best regards" -> "Bestache").
- ``debian-messages``: the software's own short sentences from the message catalogs of every
  package that is not a game (``MESSAGE_WORDS`` English words, ending like a sentence):
  instructions, errors and confirmations ("Please restart the application.", "The file is too
  large to be sent."), what people paste into a translator from their screen. Inside
  ``debian-catalogs`` they are one pair in seven, among labels, menu entries and long help; German's
  separable verbs in requests ("Starten Sie den Computer neu.") are seen too seldom there to learn.
- ``debian-requests``: German only. Pairs from every Debian source and LibreOffice's help and UI
  whose German asks politely with a separable verb, its particle sent to the clause's end
  ("Starten Sie den Rechner neu, um ...", "Schalten Sie den Drucker aus."): about 5,000 pairs among
  a million, which a small model does not learn from; it writes "Bitte starten Sie Ihren Computer"
  for "Please restart your computer" and drops the "neu".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from cli import UsageError
from corpus import catalog_packages, debian_text, libreoffice
from corpus.bible import Pair
from corpus.tsv import Row, directed_pairs

SOURCES = ("debian-dialogue", "debian-courtesy", "debian-messages", "debian-requests")
LANGUAGES = debian_text.LANGUAGES
GAME_PACKAGES = frozenset((*catalog_packages.WESNOTH, *catalog_packages.GAMES))
COURTESY_MAX_WORDS = 12
COURTESY = re.compile(
    r"\b(hello|hi|hey|thanks|thank you|please|sorry|excuse me|pardon|welcome|congratulations|cheers|"
    r"good (morning|afternoon|evening|night|day|luck|bye)|goodbye|bye|see you|take care|"
    r"regards|dear|sincerely|yours|how are you|nice to meet|happy birthday|"
    r"have a (nice|good|great))\b", re.IGNORECASE)
MESSAGE_WORDS = range(3, 17)  # a word count a message sentence has: 3 to 16
_SENTENCE_END = re.compile(r"[.!?…][\"'”’»)]*$")
# The sources a courtesy phrase is looked for in: every Debian one, and LibreOffice's UI strings
# (its letter wizard holds the closings: "Best regards" / "Mit freundlichen Grüßen").
COURTESY_FROM = (*debian_text.SOURCES, "libreoffice-ui")
# A formal German request whose separable verb left its particle at the clause's end: the verb and
# "Sie" ("Starten Sie", "Bitte schalten Sie"), at most 60 characters of object, then the particle
# before punctuation ("... neu.", "... aus,").
PARTICLES = ("neu", "aus", "an", "ab", "ein", "herunter", "hoch", "zurück", "fest", "zu", "auf")
_SEPARABLE_REQUEST = re.compile(r"\b\w+en Sie\b[^.,;:!?]{1,60}?\s(" + "|".join(PARTICLES) + r")\s*[.,!]")
REQUESTS_FROM = (*debian_text.SOURCES, *libreoffice.SOURCES)


def _game_sentence(key: str, en: str) -> tuple[bool, bool]:
    """(the key's package is a game's, the English ends like a sentence)."""
    return key.split("@", 1)[0] in GAME_PACKAGES, bool(_SENTENCE_END.search(en))


def is_dialogue(key: str, en: str) -> bool:
    """A game catalog's sentence: the key's package is a game's, the English two words or more
    that end like a sentence."""
    game, sentence = _game_sentence(key, en)
    return game and sentence and len(en.split()) >= 2


def is_message(key: str, en: str) -> bool:
    """A program's short sentence: the key's package is not a game's, the English
    ``MESSAGE_WORDS`` words long and ending like a sentence."""
    game, sentence = _game_sentence(key, en)
    return not game and sentence and len(en.split()) in MESSAGE_WORDS


def is_separable_request(de: str) -> bool:
    """German that asks with a separable verb whose particle stands at the clause's end."""
    return bool(_SEPARABLE_REQUEST.search(de))


def is_courtesy(en: str) -> bool:
    """Short English that greets, thanks, asks, apologises, welcomes or signs off."""
    return len(en.split()) <= COURTESY_MAX_WORDS and bool(COURTESY.search(en))


# The selections that filter the message catalogs, by (key, English).
CATALOG_FILTERS = {"debian-dialogue": is_dialogue, "debian-messages": is_message}
# The selections gathered from several sources, each pair once: (sources, the languages it holds,
# the test on a (key, English, translation) row).
GATHERED: dict[str, tuple[tuple[str, ...], tuple[str, ...], Callable[[Row], bool]]] = {
    "debian-courtesy": (COURTESY_FROM, LANGUAGES, lambda r: is_courtesy(r[1])),
    "debian-requests": (REQUESTS_FROM, ("de",), lambda r: is_separable_request(r[2])),
}


def _source_rows(source: str, split: str, lang: str, cache: Path | None) -> list[Row]:
    if source in libreoffice.SOURCES:
        return libreoffice.read_rows(source, split, lang, cache)
    return debian_text.read_rows(source, split, lang, cache)


def _unique(rows: Iterable[Row]) -> list[Row]:
    """Rows in order, each (English, translation) once: the same string ships in several packages."""
    seen: set[tuple[str, str]] = set()
    out = []
    for key, en, xx in rows:
        if (en, xx) not in seen:
            seen.add((en, xx))
            out.append((key, en, xx))
    return out


def read_rows(selection: str, split: str, lang: str, cache: Path | None = None) -> list[Row]:
    """(key, English, translation) rows of one selection, split and language."""
    if selection in CATALOG_FILTERS:
        keep = CATALOG_FILTERS[selection]
        return [r for r in debian_text.read_rows("debian-catalogs", split, lang, cache) if keep(r[0], r[1])]
    if selection in GATHERED:
        sources, languages, keep = GATHERED[selection]
        if lang not in languages:
            return []
        return _unique(r for source in sources for r in _source_rows(source, split, lang, cache) if keep(r))
    raise UsageError(f"corpus selection {selection!r} is not one of {', '.join(SOURCES)}")


def pairs(selection: str, directions: Sequence[str], split: str, cache: Path | None = None) -> list[Pair]:
    """Pairs of one selection and split for every direction (en-xx or xx-en) it covers."""
    return directed_pairs(lambda lang: read_rows(selection, split, lang, cache), directions, LANGUAGES)
