"""Quality gate: the shipped model (models/default), exported with int8 graphs and served by
a real gRPC server, still translates scripture and modern text.

Three fixed sets (bench/gate.py) go through the whole product path: checkpoint -> nmt-export
(int8) -> server (sentence split, placeholders, scheduler, batching, greedy decoding) -> gRPC ->
sacreBLEU: the first GATE_VERSES of John per direction, 40 paragraphs per language of the
LibreOffice help's test split (MPL-2.0 text), each used both ways, and the 253 everyday phrases
of bench/data/everyday.tsv in all six directions. A regression in export, quantisation,
decoding or the server drops a score below its floor, which sits bench.gate.FLOOR_MARGIN under
the lower of what the served int8 package scored with its two weight widths when it was set
(``python -m bench.gate`` prints both and their lower; models/default/README.md, "Quality gate"). Spans that
must be copied (a URL, an e-mail address, a number with its unit, a ``$(ARG1)`` placeholder)
come back exactly in every direction, and no output holds an unknown piece.
"""

from __future__ import annotations

import pytest

from bench.gate import (
    DEFAULT_MODEL,
    EVERYDAY_PHRASES,
    GATE_VERSES,
    HELP_PARAGRAPHS,
    everyday_set,
    floors,
    help_set,
    john_set,
    score,
    shipped_scores,
    translate,
)
from cli import parse_direction
from tests.server_harness import ServerThread

# The served int8 package's gate scores (greedy) when the default model was shipped, the lower of
# its 8-bit-weight graphs (CPUs with VNNI or AMX) and its 7-bit ones (any x86 CPU), as the card's
# "Quality gate" table records them (`python -m bench.gate` prints that table); the floors sit
# bench.gate.FLOOR_MARGIN under them.
SHIPPED = shipped_scores()
FLOORS = floors(SHIPPED["john"])
MODERN_FLOORS = floors(SHIPPED["help"])
EVERYDAY_FLOORS = floors(SHIPPED["everyday"])


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    from export.onnx_export import export_checkpoint

    package = tmp_path_factory.mktemp("default_pkg") / "default"
    export_checkpoint(DEFAULT_MODEL / "model.pt", package, int8=True, log=lambda _: None)
    server = ServerThread(package, model=(f"default={package}",), int8=True, threads=2)
    yield server
    server.stop()


def test_gate_covers_every_shipped_direction():
    assert sorted(john_set()) == sorted(FLOORS)
    assert all(len(s) == GATE_VERSES for s, _ in john_set().values())


@pytest.mark.parametrize("direction", sorted(FLOORS))
def test_served_int8_default_model_translates(default_server, direction):
    sources, refs = john_set()[direction]
    hyps = translate(default_server.stub(), sources, direction)
    assert len(hyps) == GATE_VERSES and all(hyps)
    bleu = score("john", hyps, refs)
    assert bleu >= FLOORS[direction], f"{direction}: BLEU {bleu:.2f} < floor {FLOORS[direction]}"



def test_modern_gate_covers_every_shipped_direction():
    assert sorted(help_set()) == sorted(MODERN_FLOORS)
    assert all(len(s) == HELP_PARAGRAPHS for s, _ in help_set().values())


@pytest.mark.parametrize("direction", sorted(MODERN_FLOORS))
def test_served_int8_default_model_translates_modern_text(default_server, direction):
    sources, refs = help_set()[direction]
    hyps = translate(default_server.stub(), sources, direction)
    assert len(hyps) == len(sources) and all(hyps)
    assert not [h for h in hyps if "\u2047" in h or "<unk>" in h]  # no unknown piece: byte fallback
    chrf = score("help", hyps, refs)
    assert chrf >= MODERN_FLOORS[direction], f"{direction}: chrF {chrf:.2f} < floor {MODERN_FLOORS[direction]}"


@pytest.mark.parametrize("direction", sorted(EVERYDAY_FLOORS))
def test_served_int8_default_model_translates_everyday_phrases(default_server, direction):
    sources, refs = everyday_set([direction])[direction]
    hyps = translate(default_server.stub(), sources, direction)
    assert len(hyps) == len(sources) == EVERYDAY_PHRASES and all(hyps)
    chrf = score("everyday", hyps, refs)
    assert chrf >= EVERYDAY_FLOORS[direction], f"{direction}: chrF {chrf:.2f} < floor {EVERYDAY_FLOORS[direction]}"


# One sentence per source language with every kind of span a translation must copy.
COPY_SOURCES = {
    "en": "Open https://www.libreoffice.org/download/ or write to help@example.org: the file is 25 MB and "
          "the error reads $(ARG1).",
    "de": "Öffnen Sie https://www.libreoffice.org/download/ oder schreiben Sie an help@example.org: die Datei "
          "ist 25 MB groß und der Fehler lautet $(ARG1).",
    "fr": "Ouvrez https://www.libreoffice.org/download/ ou écrivez à help@example.org : le fichier fait 25 MB "
          "et l'erreur indique $(ARG1).",
    "es": "Abra https://www.libreoffice.org/download/ o escriba a help@example.org: el archivo ocupa 25 MB y "
          "el error dice $(ARG1).",
}
COPIED_SPANS = ("https://www.libreoffice.org/download/", "help@example.org", "25 MB", "$(ARG1)")


@pytest.mark.parametrize("direction", sorted(MODERN_FLOORS))
def test_urls_addresses_numbers_and_placeholders_come_through_exactly(default_server, direction):
    [out] = translate(default_server.stub(), [COPY_SOURCES[parse_direction(direction)[0]]], direction)
    missing = [span for span in COPIED_SPANS if span not in out]
    assert not missing, f"{direction}: {missing} not in {out!r}"
