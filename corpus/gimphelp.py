"""The GIMP's user manual (Debian's ``gimp-help-en``, ``-de``, ``-fr``, ``-es``, GFDL): the help
an image editor opens from its menus, hundreds of pages of desktop help prose ("Select the layer
you want to move, then drag it ..."), rendered from one DocBook source through PO files, so each
language's page holds the same blocks in the same order: aligned as Debian's manuals are
(corpus/manuals.py), page by page and block by block, split by page. A paragraph the translators
have not reached stays English and is dropped as untranslated. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from corpus import manuals

LANGUAGES = manuals.LANGUAGES
GIMP_HELP = manuals.Manual(
    "gimp-help",
    {lang: f"gimp-help-{lang}" for lang in ("en", *LANGUAGES)},
    {lang: f"usr/share/gimp/2.0/help/{lang}" for lang in ("en", *LANGUAGES)},
    {lang: ".html" for lang in ("en", *LANGUAGES)})


def packages(cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of the manual's packages."""
    return manuals.packages(cache, (GIMP_HELP,))


def rows(lang: str, cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of the manual's pages translated into ``lang``, split by page."""
    return manuals.rows(lang, cache, (GIMP_HELP,))
