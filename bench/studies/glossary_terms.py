"""How reliably a forced term gets into a translation, by each way the server could do it
(server/terms.py), on a real package: the numbers behind docs/BENCHMARKS.md's glossary line.

    python -m bench.studies.glossary_terms --package packages/default --pair en-de

The English lines of the LibreOffice help sample (tests/data/libreoffice-gate.tsv) that hold one
of ``TERMS``' words once are translated through the server's own service (server.main's
loading, TranslatorService), freely and then with that word forced:

- ``glossary``: the word -> another translation of it (``TERMS``' third column); ``keep``: the
  word kept in English;
- ``placeholders``: as the server serves a model whose tokenizer has <ph1>..<ph12>;
  ``alignment``: the same model with its placeholders turned off, as an imported model is
  served (the term placed by attention); ``source swap``: no glossary, the word replaced in the
  source by the forced term, for the model to copy (the sentinel way, for comparison).

Per way: the cases, how often the forced term is in the translation exactly once, how often the
translation is otherwise the free one (known where the free one holds the word's usual
translation, ``TERMS``' second column, once: the free translation with that word replaced by the
forced term), and how often the sentence came back untranslated (every check failed).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import dataclass
from pathlib import Path

LINES = Path(__file__).resolve().parents[2] / "tests" / "data" / "libreoffice-gate.tsv"
# English word, the German word the model usually writes for it (a stem), another German translation.
TERMS = (
    ("file", "Datei", "Akte"), ("document", "Dokument", "Schriftstück"), ("dialog", "Dialog", "Maske"),
    ("window", "Fenster", "Ansicht"), ("table", "Tabelle", "Matrix"), ("cell", "Zelle", "Kästchen"),
    ("page", "Seite", "Blatt"), ("button", "Schaltfläche", "Knopf"), ("menu", "Menü", "Auswahlliste"),
    ("toolbar", "Symbolleiste", "Werkzeugleiste"), ("icon", "Symbol", "Piktogramm"),
    ("paragraph", "Absatz", "Abschnitt"), ("column", "Spalte", "Rubrik"), ("row", "Zeile", "Reihe"),
    ("function", "Funktion", "Routine"), ("module", "Modul", "Baustein"), ("library", "Bibliothek", "Sammlung"),
    ("macro", "Makro", "Skript"), ("user", "Benutzer", "Anwender"), ("name", "Name", "Bezeichnung"),
    ("chart", "Diagramm", "Schaubild"), ("image", "Bild", "Abbildung"), ("object", "Objekt", "Gegenstand"),
    ("field", "Feld", "Eingabezeile"), ("list", "Liste", "Aufstellung"), ("command", "Befehl", "Kommando"),
    ("option", "Option", "Einstellung"), ("key", "Taste", "Schalter"), ("selection", "Auswahl", "Markierung"),
    ("formula", "Formel", "Ausdruck"), ("slide", "Folie", "Präsentationsseite"), ("frame", "Rahmen", "Kasten"),
    ("character", "Zeichen", "Buchstabe"), ("data", "Daten", "Werte"), ("value", "Wert", "Betrag"),
    ("container", "Container", "Behälter"), ("procedure", "Prozedur", "Ablauf"), ("sheet", "Blatt", "Bogen"),
)
METHODS = ("placeholders", "alignment", "source swap")


@dataclass(frozen=True)
class Case:
    text: str
    word: str  # the English word, as the text has it
    usual: str  # the stem of its usual translation
    forced: str  # what the translation must have (keep: the word)
    mode: str  # glossary or keep


def whole(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)


def cases(lines: list[str], modes: tuple[str, ...]) -> list[Case]:
    out = []
    for line in lines:
        for en, de, other in TERMS:
            found = whole(en).findall(line)
            if len(found) == 1:
                for mode in modes:
                    out.append(Case(line, found[0], de, other if mode == "glossary" else found[0], mode))
    return out


def otherwise_free(free: str, got: str, case: Case) -> bool | None:
    """Is ``got`` the free translation with the word holding ``case.usual`` replaced by the forced
    term? None where the free translation does not hold that word once."""
    words = re.findall(rf"\w*{re.escape(case.usual)}\w*", free, re.IGNORECASE)
    if len(words) != 1:
        return None
    return got == re.sub(rf"\w*{re.escape(case.usual)}\w*", case.forced, free, count=1, flags=re.IGNORECASE)


async def run(args: argparse.Namespace) -> int:
    from engine.placeholders import Protector
    from nmt.v1 import translator_pb2 as pb
    from server.config import ServerConfig
    from server.main import load_models
    from server.metrics import Metrics
    from server.service import TranslatorService

    source, target = args.pair.split("-")
    cfg = ServerConfig(model=(f"on={args.package}", f"off={args.package}"), device="cpu", threads=args.threads,
                       int8=not args.fp32, metrics_port=-1)
    models = load_models(cfg, Metrics())
    off = models["off"]
    off.__dict__["protector"] = Protector(False)  # served as a model without the symbols is
    off.__dict__.pop("banned", None)
    for m in models.values():
        m.scheduler.start()
    service = TranslatorService(models, cfg, Metrics())
    rows = [line.rstrip("\n").split("\t") for line in LINES.read_text().splitlines()]
    lines = list(dict.fromkeys(r[2] for r in rows))[:args.sentences]
    todo = cases(lines, tuple(args.modes.split(",")))
    gate = asyncio.Semaphore(16)

    async def translate(text: str, model: str, case: Case | None = None) -> str:
        request = pb.TranslateRequest(texts=[text], source_lang=source, target_lang=target, model=model)
        if case and case.mode == "keep":
            request.keep.append(case.word)
        elif case:
            request.glossary.add(source=case.word, target=case.forced)
        async with gate:
            response = await service.translate_here(request)
        return response.translations[0].hypotheses[0].text

    try:
        free = dict(zip(lines, await asyncio.gather(*(translate(t, "off") for t in lines))))
        print(f"{args.package} {args.pair}, {len(lines)} lines, {len(todo)} cases")
        print(f"{'mode':9} {'way':13} {'cases':>5} {'term once':>10} {'rest as free':>13} {'untranslated':>13}")
        for mode in args.modes.split(","):
            mine = [c for c in todo if c.mode == mode]
            for method in METHODS:
                if method == "source swap":
                    outs = await asyncio.gather(*(translate(whole(c.word).sub(c.forced, c.text), "off") for c in mine))
                else:
                    outs = await asyncio.gather(*(translate(c.text, "on" if method == "placeholders" else "off", c)
                                                  for c in mine))
                once = sum(len(whole(c.forced).findall(o)) == 1 for c, o in zip(mine, outs))
                judged = [otherwise_free(free[c.text], o, c) for c, o in zip(mine, outs)]
                known = [j for j in judged if j is not None]
                back = sum(o == c.text for c, o in zip(mine, outs))
                n = max(len(mine), 1)
                print(f"{mode:9} {method:13} {len(mine):5} {once / n:10.0%} "
                      f"{sum(known) / max(len(known), 1):8.0%} ({len(known):3}) {back / n:13.0%}")
                if args.show:
                    for c, o in list(zip(mine, outs))[:args.show]:
                        print(f"    {c.word!r}->{c.forced!r}: {o}")
    finally:
        for m in models.values():
            m.scheduler.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.glossary_terms", description=__doc__.split("\n\n")[0])
    p.add_argument("--package", required=True, help="a model package directory")
    p.add_argument("--pair", default="en-de", help="SRC-TGT; TERMS are English -> German")
    p.add_argument("--sentences", type=int, default=120, help="lines of the sample to use")
    p.add_argument("--modes", default="glossary,keep", help="glossary, keep or both")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fp32", action="store_true", help="the fp32 graphs (default: int8, as served)")
    p.add_argument("--show", type=int, default=0, help="print this many outputs per way")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
