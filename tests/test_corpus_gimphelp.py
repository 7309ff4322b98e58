"""The GIMP's manual from real .deb files built here: the pages of each language aligned block by
block as Debian's manuals are, a paragraph left in English dropped later as untranslated, split by
page, each package's version and licence recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import UsageError
from corpus import clean, debian, gimphelp
from tests.test_corpus_libreoffice import make_deb

EN = """<html><head><title>3.2. Layers</title></head><body><div class="sect1">
<h2 class="title"><a name="gimp-concepts-layers"></a>3.2. Layers</h2>
<p>If you think of an image as a stack of slides, each slide is a layer. Layers can be hidden.</p>
<p>Select the layer you want to move.</p></div></body></html>"""
FR = """<html><head><title>3.2. Calques</title></head><body><div class="sect1">
<h2 class="title"><a name="gimp-concepts-layers"></a>3.2. Calques</h2>
<p>Imaginez une image comme une pile de diapositives : chaque diapositive est un calque. Les calques peuvent être
cachés.</p>
<p>Select the layer you want to move.</p></div></body></html>"""


def test_rows_from_real_debs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)
    (tmp_path / "debs").mkdir()
    for lang, page in (("en", EN), ("fr", FR)):
        make_deb(tmp_path / "debs" / f"gimp-help-{lang}_2.10.34-2_all.deb",
                 {f"usr/share/gimp/2.0/help/{lang}/gimp-concepts-layers.html": page.encode(),
                  f"usr/share/gimp/2.0/help/{lang}/images/layers.png": b"\x89PNG",
                  f"usr/share/doc/gimp-help-{lang}/copyright": b"Format: x\n\nFiles: *\nLicense: GFDL-1.2+\n"})
    rows = list(gimphelp.rows("fr", tmp_path))
    split = clean.split_of("gimp-help:gimp-concepts-layers")
    assert rows == [
        (split, "gimp-help-fr@2.10.34-2:gimp-concepts-layers", "Layers", "Calques"),  # the page's title
        (split, "gimp-help-fr@2.10.34-2:gimp-concepts-layers", "Layers", "Calques"),  # its heading
        (split, "gimp-help-fr@2.10.34-2:gimp-concepts-layers",
         "If you think of an image as a stack of slides, each slide is a layer.",
         "Imaginez une image comme une pile de diapositives : chaque diapositive est un calque."),
        (split, "gimp-help-fr@2.10.34-2:gimp-concepts-layers", "Layers can be hidden.",
         "Les calques peuvent être cachés."),
        (split, "gimp-help-fr@2.10.34-2:gimp-concepts-layers", "Select the layer you want to move.",
         "Select the layer you want to move.")]  # untranslated: clean.drop_reason drops it
    assert clean.drop_reason(*rows[4][2:], "fr") == "untranslated"
    with pytest.raises(UsageError, match="gimp-help-de is needed and apt-get is not here"):
        list(gimphelp.rows("de", tmp_path))
    assert gimphelp.packages(tmp_path) == {"gimp-help-en": ("2.10.34-2", "GFDL-1.2+"),
                                           "gimp-help-fr": ("2.10.34-2", "GFDL-1.2+")}
