"""KDE's application handbooks: the user manuals KDE applications ship in Debian
(``usr/share/doc/HTML/{lang}/{app}/index.cache.bz2``, the DocBook handbook rendered to HTML by
kdoctools), in English and translated by KDE's teams into German, French and Spanish. Desktop help
prose ("To open a new tab, choose File > New Tab.") that no other source holds: the closest
Debian has to the help pages of a desktop, GNOME's being reserved for independent evaluation.

A translated handbook is rendered from the English DocBook through PO files, so its sections
carry the same anchors (``<a name="...">`` in each heading) and, where the translation is of the
same revision, the same blocks in the same order. Translations lag behind the English text by
a release or more, though, so a handbook is aligned section by section rather than page by
page: the rendered pages are cut at every heading, each section keyed by its anchor, and a
section aligned block by block (corpus/manuals.py) only where both sides hold the same block
structure; a section whose structure differs is left out, as is the title page with its
credits. Navigation bars and page headers are removed first (they would make "Next" / "Weiter"
a pair on every page). A pair's key is ``package@version:app#anchor``; the split is by
handbook (the application), so a held-out application's whole manual is held out. Standard
library only.
"""

from __future__ import annotations

import bz2
import re
from collections.abc import Iterator
from pathlib import Path

from corpus import clean, debian, manuals

LANGUAGES = ("de", "fr", "es")
LABEL = "kde-docs"
ROOT = "usr/share/doc/HTML"
CACHE_FILE = "index.cache.bz2"
# Packages of bookworm whose handbooks exist in English and at least one of German, French or
# Spanish (found by listing the HTML folders of the KDE packages corpus/catalog_packages.py
# reads, and of Plasma's, KWin's and the larger applications' data and doc packages). A
# translation may sit in another package than its English original (k3b-i18n): the English
# handbook is looked up by application across all of them.
_PACKAGE_NAMES = """
akonadi-import-wizard akregator ark artikulate blinken bluedevil cantor cervisia choqok dolphin dragonplayer elisa
filelight granatier gwenview juk k3b k3b-i18n kaddressbook kalarm kalgebra-common kalzium-data kamera kamoso
kanagram kapman kapptemplate kate5-data katomic kbackup kblackbox kblocks kbounce kbreakout kbruch kcachegrind kcalc
kcharselect kde-config-cddb kde-config-cron kde-config-tablet kde-spectacle kdeconnect kdenlive-data kdepim-runtime
kdepim-themeeditors kdesvn kdevelop-data kdf kdiamond keditbookmarks kfind kfloppy kfourinline kgamma5
kgeography-data kgeotag kget kgoldrunner kgpg khangman khelpcenter kig kigo kile-doc killbots kimagemapeditor
kinfocenter kio kio-audiocd kio-extras-data kiriki kiten kjumpingcube kleopatra klickety kmag kmahjongg kmail
kmenuedit kmines kmix kmousetool kmouth kmplot kmymoney-common knavalbattle knetwalk knights knotes kolf kollision
kolourpaint kompare konqueror konquest konsole konsolekalendar kontact kontrast korganizer kpat kphotoalbum krdc
kreversi krfb kronometer kruler krusader kshisen ksirk ksnakeduel kspaceduel ksquares kstars-data ksudoku ksystemlog
kteatime ktimer ktimetracker ktouch-data kturtle kubrick kwalletmanager kwave kwin-data kwordquiz kwrite
libkf5kdelibs4support-data lokalize marble-data okteta okular parley-data partitionmanager picmi pim-data-exporter
pim-sieve-editor plasma-desktop-data plasma-pa plasma-workspace-data powerdevil-data rocs rsibreak skanlite
skrooge-common step sweeper systemsettings umbrello-data
"""
PACKAGES = tuple(_PACKAGE_NAMES.split())
# About 240 handbooks, a few of them book-length: the usual 1 % dev and 2 % test would hold out two of
# them, so this source holds out about 5 % of its handbooks for dev and 7 % for test.
DEV_BUCKETS, TEST_BUCKETS = frozenset(range(7, 12)), frozenset(range(7))
_FILENAME = re.compile(r'<FILENAME filename="[^"]*">')
# What kdoctools' pages repeat around their content: the page header, the navigation bars, the footer
_CHROME = re.compile(r'<div id="header">.*?</div></div></div></div>|<div class="navCenter">.*?</table></div>'
                     r'|<div id="footer">.*?(?=<FILENAME|$)', re.S)
_HEADING = re.compile(r"(?=<h[1-6][\s>])")
_ANCHOR = re.compile(r'<a name="([^"]+)"')


def _selector(path: str) -> bool:
    if path.endswith("/copyright"):
        return True
    parts = path.split("/")
    return path.startswith(ROOT + "/") and path.endswith("/" + CACHE_FILE) and parts[4] in ("en", *LANGUAGES)


def sections(html: str) -> dict[str, str]:
    """{anchor: HTML} of every section of a rendered handbook (all its pages), cut at each
    heading, without the pages' header, navigation and footer; the first occurrence of an anchor
    wins (a section's heading is repeated on no other page)."""
    out: dict[str, str] = {}
    body = _FILENAME.sub("", _CHROME.sub("", html))
    for chunk in _HEADING.split(body):
        anchor = _ANCHOR.search(chunk[:400])
        if anchor and chunk.startswith("<h"):
            out.setdefault(anchor.group(1), chunk)
    return out


def handbook_pairs(en_html: str, xx_html: str,
                   skip: frozenset[str] | None = None) -> Iterator[tuple[str, str, str]]:
    """(anchor, English, translation) of the sections both handbooks hold with the same block
    structure, sentence by sentence where a block's sentences match one to one; the sections in
    ``skip`` are left out, by default the title page (the first section: the book's own anchor,
    its authors and the translators' credits, not prose)."""
    en_sections, xx_sections = sections(en_html), sections(xx_html)
    if skip is None:
        skip = frozenset(list(en_sections)[:1])
    for anchor, en in en_sections.items():
        if anchor in skip or anchor not in xx_sections:
            continue
        for a, b in manuals.page_pairs(en, xx_sections[anchor]):
            yield anchor, a, b


def handbooks(root: Path, lang: str) -> dict[str, Path]:
    """{application: rendered handbook} of one language in an unpacked package (an application
    may be a path: ``kcontrol/kcmaudiocd``)."""
    folder = root / ROOT / lang
    if not folder.is_dir():
        return {}
    return {str(p.parent.relative_to(folder)): p for p in sorted(folder.rglob(CACHE_FILE))}


def _read(path: Path) -> str:
    return bz2.decompress(path.read_bytes()).decode("utf-8", errors="replace")


def packages(cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of the packages that hold handbooks."""
    return debian.provenance(PACKAGES, _selector, LABEL, cache)


def rows(lang: str, cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every handbook translated into ``lang``, split by
    application."""
    debs = debian.fetch_debs(PACKAGES, cache)
    roots = {package: debian.extracted(package, _selector, LABEL, cache) for package in debs}
    english = {app: path for root in roots.values() for app, path in handbooks(root, "en").items()}
    for package, deb in sorted(debs.items()):
        version = debian.package_version(deb)
        for app, path in handbooks(roots[package], lang).items():
            if app not in english:
                continue
            split = clean.split_of(f"kde-docs:{app}", DEV_BUCKETS, TEST_BUCKETS)
            for anchor, en, xx in handbook_pairs(_read(english[app]), _read(path)):
                yield split, f"{package}@{version}:{app}#{anchor}", en, xx
