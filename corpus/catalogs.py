"""Message catalogs (gettext ``.mo``) that Debian's packages ship: game dialogue and
narration (Wesnoth's campaigns, Freeciv), desktop applications (KDE, Xfce, GIMP, Inkscape,
VLC, ...) and everyday command-line tools. Read with the standard library's ``gettext``.

The English side is the msgid (the programs' source language), context prefixes
(``ctxt\\x04``) dropped; plural entries give their singular pair; the header and entries
whose translation is empty or marked fuzzy (not compiled into .mo files) never appear.
Each package is one unit of splitting (a program's strings are in one split) and each pair's
key is ``package@version:catalog``. GNOME's packages are not read (their documentation is
reserved for independent evaluation). Standard library only.
"""

from __future__ import annotations

import gettext
import re
from collections.abc import Iterator
from pathlib import Path

from corpus import debian
from corpus.clean import clean_text, strip_accelerators

# Packages read by default: chosen for their kinds of text (dialogue, UI messages, help
# strings) and size; each ships its catalogs for de, fr and es.
WESNOTH = tuple(f"wesnoth-1.16-{c}" for c in ("did", "dm", "dw", "ei", "httt", "l", "low", "nr", "sof", "sota",
                                              "sotbe", "thot", "trow", "tsg", "ttb", "utbs"))
PACKAGES: tuple[str, ...] = (*WESNOTH, "freeciv-data",
                             # KDE applications
                             "dolphin", "kate", "okular", "konsole", "kmail", "gwenview", "ark", "kdenlive",
                             "kdeconnect", "digikam-data",
                             # Xfce and LXQt
                             "thunar", "mousepad", "xfce4-panel", "xfce4-settings", "xfce4-terminal", "parole",
                             "ristretto", "lxqt-panel", "pcmanfm-qt",
                             # other desktop applications
                             "gimp", "inkscape", "vlc-l10n", "audacity-data", "filezilla-common", "claws-mail-i18n",
                             "geany-common", "pidgin", "hexchat", "transmission-common",
                             # command-line tools
                             "coreutils", "tar", "grep", "wget", "apt", "dpkg")
# Whole packages held out, one of each kind of text: dialogue and UI messages.
HELD_OUT = {"test": ("wesnoth-1.16-tsg", "konsole", "mousepad"), "dev": ("wesnoth-1.16-ttb", "ark", "parole")}
_VERSION = re.compile(r"^[^_]+_([^_]+)_")


def package_version(deb: Path) -> str:
    m = _VERSION.match(deb.name)
    return m.group(1).replace("%3a", ":") if m else ""


def catalog_files(root: Path, lang: str) -> list[Path]:
    """Every ``.mo`` of ``lang`` in an unpacked package (``.../{lang}/LC_MESSAGES/*.mo``)."""
    return sorted(p for p in root.rglob("*.mo") if p.parent.name == "LC_MESSAGES" and p.parent.parent.name == lang)


def entries(mo: Path) -> Iterator[tuple[str, str]]:
    """(English, translation) of every translated entry of one catalog."""
    with mo.open("rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
    for key, value in catalog.items():
        if isinstance(key, tuple):  # plural: (msgid, n); the singular form only
            if key[1] != 0:
                continue
            key = key[0]
        if not key or not value:
            continue
        yield key.split("\x04", 1)[-1], value


def split_of(package: str) -> str:
    return next((split for split, held in HELD_OUT.items() if package in held), "train")


def rows(lang: str, packages: tuple[str, ...] = PACKAGES,
         cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every catalog entry of ``lang`` in ``packages``."""
    for package in packages:
        root = debian.unpacked(package, cache)
        version = package_version(debian.fetch_deb(package, cache))
        for mo in catalog_files(root, lang):
            key = f"{package}@{version}:{mo.stem}"
            for en, xx in entries(mo):
                yield split_of(package), key, clean_text(strip_accelerators(en)), clean_text(strip_accelerators(xx))
