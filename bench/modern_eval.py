"""Score a model package on the held-out modern test split, with Apertium side by side.

    python -m bench.modern_eval --package packages/default --variants int8 --beam 1 --limit 200

Test sets, en<->de/fr/es (``--splits``, comma-separated):
- ``modern``: the LibreOffice help's test split (``corpus.libreoffice``: whole pages held out,
  one reference per paragraph);
- ``bible``: the Bible's (John, ``corpus.bible``);
- ``descriptions``: Debian's translated package descriptions, whole source packages held out
  (``corpus.debian_text``);
- ``catalogs``: programs' and games' message catalogs, whole packages held out (a Wesnoth
  campaign's dialogue, a terminal's and an editor's UI messages, command-line tools' messages;
  ``corpus.catalogs``);
- ``debconf``: the questions packages ask at installation, whole source packages held out
  (``corpus.debconf``);
- ``manuals``: the Debian Reference and the Debian Administrator's Handbook, whole pages held
  out (``corpus.manuals``);
- ``manpages``: translated manual pages, whole pages held out (``corpus.manpages``);
- ``kde-docs``: KDE's application handbooks, desktop help prose, whole handbooks held out
  (``corpus.kdedocs``; no French test handbook);
- ``gimp-help``: the GIMP's manual, whole pages held out (``corpus.gimphelp``);
- ``examples``, ``phrases``: the example sentences and the phrases of Ding's German-English
  dictionary, whole entries held out (``corpus.dictionary``; en-de and de-en only);
- ``dialogue``, ``courtesy``, ``messages``, ``requests``: the everyday selections of those
  held-out splits (``corpus.selections``): a held-out game's sentences; short greetings, thanks,
  requests and closings; held-out programs' short sentences (instructions, errors,
  confirmations); German requests whose separable verb sends its particle to the end (en-de and
  de-en only);
- ``everyday``: short everyday phrases (greetings, e-mail, requests, dates, prices, units,
  instructions) with references written for the purpose (``bench/data/everyday.tsv``);
- ``everyday-unseen``: the phrases of ``everyday`` none of whose four texts is in a training
  split of any corpus source (the dictionary holds "Hello!" / "Hallo!" and a fifth of the list):
  what the model makes of phrases it was not shown.

Our package is decoded by the server's own decoding loop
on the CPU (``export.verify.translate_onnx``, as ``nmt-verify`` does), once per graph
variant. Apertium, the rule-based translator, translates en-es (mode ``eng-spa``) and es-en
(``spa-eng``); it is Debian's ``apertium-eng-spa``:

    apt-get install -y apertium-eng-spa

It runs with ``-u``, so unknown words come out bare instead of marked ``*word`` (the marks
would only cost it score). All lines go through one ``apertium -u -f txt`` process, one
paragraph each, separated by a blank line: a blank line ends a sentence for Apertium, so
every line is translated exactly as it is alone (checked on 200 lines of each direction).
A single newline is only a blank to it (the tagger and transfer read across it: 56 of 200
en-es lines then came out differently), and ``-f line`` drops every line's final period. The
count of lines that come back is checked. ``--no-apertium`` skips it; without it, a run that
needs Apertium fails with one line when it is not installed.

Scores per direction and system, on the same lines: sacrebleu's corpus BLEU and chrF, and how
many outputs hold an unknown mark (``<unk>``, or ``⁇``, SentencePiece's rendering of it).
Prints a markdown table and each system's speed (lines/s, wall clock, decoding only);
``--json`` keeps the scores and every output.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sacrebleu

from cli import (
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_output_file,
    exit_status_help,
    fail,
    parse_direction,
)
from corpus.bible import Pair

PROG = "python -m bench.modern_eval"
DIRECTIONS = ("en-de", "de-en", "en-fr", "fr-en", "en-es", "es-en")
SPLITS = ("modern", "bible", "descriptions", "catalogs", "debconf", "manuals", "manpages", "kde-docs", "gimp-help",
          "examples", "phrases", "dialogue", "courtesy", "messages", "requests", "everyday", "everyday-unseen")
DEBIAN_SPLITS = {name: f"debian-{name}" for name in ("descriptions", "catalogs", "debconf", "manuals", "manpages",
                                                      "kde-docs", "gimp-help", "examples", "phrases")}
# corpus/selections.py
SELECTION_SPLITS = {name: f"debian-{name}" for name in ("dialogue", "courtesy", "messages", "requests")}
EVERYDAY = Path(__file__).parent / "data" / "everyday.tsv"
MODERN_SOURCE = "libreoffice-help"
APERTIUM_MODES = {"en-es": "eng-spa", "es-en": "spa-eng"}
APERTIUM = "apertium"
UNK_MARKS = ("<unk>", "\u2047")  # "⁇": how SentencePiece decodes the unknown piece

# A system: (texts, source language, target language) -> one output per text.
Translate = Callable[[Sequence[str], str, str], list[str]]


@dataclass(frozen=True)
class System:
    name: str
    translate: Translate
    directions: frozenset[str]  # what it translates; other directions are left blank in the table


class ApertiumMissing(UsageError):
    """Apertium (or one of its modes) is not installed."""


def apertium_modes() -> set[str]:
    """The modes ``apertium -l`` lists; ApertiumMissing when the command is not installed."""
    if shutil.which("apertium") is None:
        raise ApertiumMissing("apertium is not installed (apt-get install -y apertium-eng-spa), "
                              "or pass --no-apertium")
    listed = subprocess.run(["apertium", "-l"], capture_output=True, text=True, check=True).stdout
    return {line.strip() for line in listed.splitlines() if line.strip()}


def check_apertium(directions: Sequence[str]) -> dict[str, str]:
    """{direction: mode} of the requested directions Apertium serves; ApertiumMissing when a
    mode is not installed."""
    wanted = {d: APERTIUM_MODES[d] for d in directions if d in APERTIUM_MODES}
    if not wanted:
        return {}
    missing = sorted(set(wanted.values()) - apertium_modes())
    if missing:
        raise ApertiumMissing(f"apertium has no mode {', '.join(missing)} (apt-get install -y apertium-eng-spa), "
                              "or pass --no-apertium")
    return wanted


def apertium_translate(texts: Sequence[str], mode: str) -> list[str]:
    """Translate every text in one ``apertium -u -f txt MODE`` call, a blank line between texts."""
    lines = [" ".join(t.split()) for t in texts]  # a newline inside a text would split it
    todo = [i for i, line in enumerate(lines) if line]
    out = [""] * len(lines)
    if not todo:
        return out
    text = "".join(lines[i] + "\n\n" for i in todo)
    done = subprocess.run(["apertium", "-u", "-f", "txt", mode], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"apertium {mode} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    got = done.stdout.strip("\n").split("\n\n")
    if len(got) != len(todo):
        raise RuntimeError(f"apertium {mode} returned {len(got)} paragraphs for {len(todo)} lines")
    for i, line in zip(todo, got):
        out[i] = " ".join(line.split())
    return out


def apertium_system(directions: Sequence[str]) -> System:
    modes = check_apertium(directions)
    return System(APERTIUM, lambda texts, src, tgt: apertium_translate(texts, modes[f"{src}-{tgt}"]),
                  frozenset(modes))


SHORTLIST_MODES = ("on", "off", "both")


def package_systems(package_dir: str | Path, variants: Sequence[str], beam: int, threads: int,
                    shortlist: str = "on") -> list[System]:
    """One system per graph variant of the package, decoded by the engine on the CPU. A package
    with a vocabulary shortlist is scored with it (``on``, as a server serves it), over the whole
    vocabulary (``off``), or both ways (``both``: ``ours-VARIANT`` and ``ours-VARIANT-shortlist``,
    the same graphs, so the difference is the shortlist's cost alone)."""
    from engine.package import ModelPackage, PackageError
    from export.verify import cpu_runtime, translate_onnx
    from training.tokenizer import Tokenizer

    try:
        package = ModelPackage.load(package_dir)
    except PackageError as e:
        raise UsageError(f"--package: {e}") from e
    missing = [v for v in variants if v not in package.variants]
    if missing:
        raise UsageError(f"--variants: {package_dir} has no {', '.join(missing)} variant; "
                         f"it has {', '.join(package.variants)}")
    if shortlist == "both" and not set(variants) & set(package.shortlist_variants):
        raise UsageError(f"--shortlist both: {package_dir} has no vocabulary shortlist for {', '.join(variants)} "
                         "(python -m export.shortlist_graph adds one)")
    tokenizer = Tokenizer(package.tokenizer_path)
    out = []
    for variant in variants:
        has = variant in package.shortlist_variants
        uses = {"on": [has], "off": [False], "both": [False, True] if has else [False]}[shortlist]
        for with_shortlist in uses:
            rt = cpu_runtime(package, variant, threads, shortlist=with_shortlist)

            def translate(texts: Sequence[str], src: str, tgt: str, rt=rt) -> list[str]:
                return translate_onnx(rt, tokenizer, list(texts), tgt, beam_size=beam)

            name = f"ours-{variant}" + ("-shortlist" if with_shortlist and shortlist == "both" else "")
            out.append(System(name, translate, frozenset(package.pairs)))
    return out


def load_sets(splits: Sequence[str], directions: Sequence[str], limit: int = 0,
              part: str = "test") -> dict[tuple[str, str], list[Pair]]:
    """{(split, direction): pairs of ``part`` ("test", or "dev" to choose between models without
    looking at test scores)}, the first ``limit`` of each (0: all), in the given order. The phrase
    list has one part, the same for both."""
    from corpus import debian_text, libreoffice, selections
    from corpus.bible import bible_pairs

    out: dict[tuple[str, str], list[Pair]] = {}
    for split in splits:
        if split == "modern":
            found = libreoffice.pairs(MODERN_SOURCE, directions, part)
        elif split == "bible":
            found = bible_pairs(directions, part)
        elif split == "everyday":
            found = everyday_pairs(directions)
        elif split == "everyday-unseen":
            seen, texts = trained_texts(), everyday_rows()
            found = [p for p in everyday_pairs(directions) if not texts[str(p.key)] & seen]
        elif split in SELECTION_SPLITS:
            found = selections.pairs(SELECTION_SPLITS[split], directions, part)
        else:
            found = debian_text.pairs(DEBIAN_SPLITS[split], directions, part)
        for direction in directions:
            rows = [p for p in found if p.direction == direction]
            if rows:
                out[split, direction] = rows[:limit] if limit else rows
    return out


def everyday_table(path: Path = EVERYDAY) -> dict[str, dict[str, str]]:
    """{phrase key ("greeting:0"): its row (columns category, en, de, fr, es)} of the phrase list."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:] if line.strip()]
    return {f"{r['category']}:{i}": r for i, r in enumerate(rows)}


def everyday_pairs(directions: Sequence[str], path: Path = EVERYDAY) -> list[Pair]:
    """The everyday phrase list as pairs of every direction."""
    table = everyday_table(path)
    out = []
    for direction in directions:
        src, tgt = parse_direction(direction)
        out += [Pair(src, tgt, r[src], r[tgt], key) for key, r in table.items()]
    return out


def everyday_rows(path: Path = EVERYDAY) -> dict[str, frozenset[str]]:
    """{phrase key ("greeting:0"): the near keys (corpus.clean.near_key) of its four texts}."""
    from corpus.clean import near_key

    return {key: frozenset(near_key(r[lang]) for lang in ("en", "de", "fr", "es"))
            for key, r in everyday_table(path).items()}


def trained_texts(languages: Sequence[str] = ("de", "fr", "es")) -> set[str]:
    """The near keys of both sides of every training pair of every corpus source (LibreOffice's,
    Debian's, the phrasebook and its name swaps; built on first use), for telling the phrases a model was shown
    from the rest."""
    from corpus import debian_text, libreoffice, phrasebook
    from corpus.clean import near_key

    out: set[str] = set()
    for lang in languages:
        rows = [r for source in debian_text.SOURCES for r in debian_text.read_rows(source, "train", lang)]
        rows += [r for source in libreoffice.SOURCES for r in libreoffice.read_rows(source, "train", lang)]
        rows += phrasebook.read_rows("train", lang) + phrasebook.name_rows("train", lang)
        out.update(near_key(text) for _, en, xx in rows for text in (en, xx))
    return out


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | int]:
    """Corpus BLEU and chrF (sacrebleu defaults) and the outputs holding an unknown mark."""
    return {"bleu": round(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score, 2),
            "unk": sum(any(m in h for m in UNK_MARKS) for h in hypotheses)}


def evaluate(sets: Mapping[tuple[str, str], Sequence[Pair]], systems: Sequence[System],
             log: Callable[[str], None] = lambda _: None) -> dict:
    """Every system on every set it serves: scores, seconds and outputs (the ``--json`` layout)."""
    results = []
    for (split, direction), pairs in sets.items():
        src_lang, tgt_lang = parse_direction(direction)
        sources, references = [p.src for p in pairs], [p.tgt for p in pairs]
        scores: dict[str, dict] = {}
        outputs: dict[str, list[str]] = {}
        for system in systems:
            if direction not in system.directions:
                continue
            start = time.monotonic()
            hyps = system.translate(sources, src_lang, tgt_lang)
            seconds = time.monotonic() - start
            if len(hyps) != len(sources):
                raise RuntimeError(f"{system.name} returned {len(hyps)} outputs for {len(sources)} lines")
            scores[system.name] = {**score(hyps, references), "seconds": round(seconds, 3)}
            outputs[system.name] = hyps
            s = scores[system.name]
            log(f"{split} {direction} {system.name}: BLEU {s['bleu']:.2f} chrF {s['chrf']:.2f} "
                f"unk {s['unk']} ({len(pairs)} lines, {seconds:.1f}s)")
        results.append({
            "split": split, "direction": direction, "lines": len(pairs), "scores": scores,
            "outputs": [{"key": str(p.key), "source": p.src, "reference": p.tgt,
                         **{name: hyps[i] for name, hyps in outputs.items()}} for i, p in enumerate(pairs)],
        })
    return {"systems": [s.name for s in systems], "sets": results, "timing": timing(results, [s.name for s in systems])}


def timing(results: Sequence[Mapping], names: Sequence[str]) -> dict[str, dict[str, float | int]]:
    """{system: lines, seconds, lines/s} over every set it translated."""
    out = {}
    for name in names:
        ran = [r for r in results if name in r["scores"]]
        lines = sum(r["lines"] for r in ran)
        seconds = sum(r["scores"][name]["seconds"] for r in ran)
        out[name] = {"lines": lines, "seconds": round(seconds, 3),
                     "lines_per_s": round(lines / seconds, 2) if seconds > 0 else 0.0}
    return out


def table(report: Mapping) -> str:
    """The scores as a markdown table: one row per set, BLEU / chrF per system ("—" where a
    system does not serve the direction), the line count, and the outputs with unknown marks."""
    names = report["systems"]
    head = ["split", "direction", *(f"{n} BLEU / chrF" for n in names), "lines", *(f"{n} unk" for n in names)]
    rows = [head, ["---"] * len(head)]
    for r in report["sets"]:
        s = r["scores"]
        rows.append([r["split"], r["direction"],
                     *(f"{s[n]['bleu']:.2f} / {s[n]['chrf']:.2f}" if n in s else "—" for n in names),
                     str(r["lines"]), *(str(s[n]["unk"]) if n in s else "—" for n in names)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def timing_table(report: Mapping) -> str:
    rows = [["system", "lines", "seconds", "lines/s"], ["---"] * 4]
    for name, t in report["timing"].items():
        rows.append([name, str(t["lines"]), f"{t['seconds']:.1f}", f"{t['lines_per_s']:.2f}"])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def examples(report: Mapping, system: str, n: int, split: str = "modern") -> str:
    """``n`` outputs of ``system`` per direction of ``split``, as markdown, evenly spread from its
    worst to its best line by sentence chrF (the first of equal ones): what the model does
    well and badly, not a chosen showcase."""
    out = []
    for r in report["sets"]:
        if r["split"] != split or system not in r["scores"]:
            continue
        scored = sorted(r["outputs"], key=lambda o: sacrebleu.sentence_chrf(o[system], [o["reference"]]).score)
        picks = [scored[round(i * (len(scored) - 1) / max(n - 1, 1))] for i in range(n)] if scored else []
        src, tgt = parse_direction(r["direction"])
        out += [f"**{src}->{tgt}**", ""]
        out += [f"- {o['source']}\n  -> {o[system]}\n  (ref: {o['reference']})" for o in picks]
        out.append("")
    return "\n".join(out)


def _names(text: str, allowed: Sequence[str], flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise UsageError(f"{flag}: {', '.join(bad) or 'nothing'} is not one of {', '.join(allowed)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__, epilog=exit_status_help(EXIT_USAGE))
    p.add_argument("--package", required=True, help="the model package (the directory nmt-export wrote)")
    p.add_argument("--variants", "--variant", default="int8",
                   help="graph variants to score, comma-separated: fp32, int8")
    p.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument("--directions", default=",".join(DIRECTIONS), help="directions, comma-separated")
    p.add_argument("--splits", default="modern", help="test sets, comma-separated: modern (LibreOffice help), "
                   "bible (John), descriptions (Debian's package descriptions), catalogs (programs' and games' "
                   "messages), debconf (installation questions), manuals (Debian's manuals), manpages (manual "
                   "pages), kde-docs (KDE's handbooks), gimp-help (the GIMP's manual), examples and phrases (Ding's "
                   "dictionary, en-de and de-en), dialogue (a held-out game's sentences), courtesy (held-out "
                   "greetings, thanks, requests, closings), messages (held-out programs' short "
                   "sentences), requests (German requests with a separable verb, en-de and de-en), everyday "
                   "(short everyday phrases), everyday-unseen "
                   "(those of them in no training split)")
    p.add_argument("--part", choices=("test", "dev"), default="test",
                   help="the splits' part: test, or dev to choose between models (the phrase list has one part)")
    p.add_argument("--limit", type=int, default=0, help="first N lines per direction and split (0: all)")
    p.add_argument("--no-apertium", action="store_true", help="skip Apertium (en-es, es-en)")
    p.add_argument("--json", type=Path, help="write the scores and every output here")
    p.add_argument("--shortlist", choices=SHORTLIST_MODES, default="on",
                   help="a package with a vocabulary shortlist: decode with it (on, as served), without it (off), "
                        "or both ways, side by side (both)")
    p.add_argument("--examples", type=int, default=0, help="also print N outputs per direction of every "
                   "split, evenly spread from the worst to the best by sentence chrF (of the first variant)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        directions = _names(args.directions, DIRECTIONS, "--directions")
        splits = _names(args.splits, SPLITS, "--splits")
        variants = _names(args.variants, ("fp32", "int8", "int8w8"), "--variants")
        if args.beam < 1 or args.threads < 1 or args.limit < 0:
            raise UsageError("--beam and --threads must be at least 1, --limit at least 0")
        if args.json:
            check_output_file(args.json, "--json")
        systems = package_systems(args.package, variants, args.beam, args.threads, args.shortlist)
        if not args.no_apertium and any(d in APERTIUM_MODES for d in directions):
            systems.append(apertium_system(directions))
    except UsageError as e:
        return fail(PROG, str(e), EXIT_USAGE)
    sets = load_sets(splits, directions, args.limit, args.part)
    settings = {"package": str(args.package), "variants": variants, "beam": args.beam, "threads": args.threads,
                "shortlist": args.shortlist, "splits": splits, "part": args.part, "directions": directions,
                "limit": args.limit, "apertium": any(s.name == APERTIUM for s in systems)}
    report = {"settings": settings,
              **evaluate(sets, systems, log=lambda line: print(line, file=sys.stderr, flush=True))}
    print(table(report))
    print()
    print(timing_table(report))
    if args.examples:
        print()
        for split in splits:
            print(f"### {split}\n")
            print(examples(report, report["systems"][0], args.examples, split))
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
