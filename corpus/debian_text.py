"""Debian's human translations as training, dev and test pairs: the translated package
descriptions (``debian-descriptions``, corpus/ddtp.py), the message catalogs programs and games
ship (``debian-catalogs``, corpus/catalogs.py), the debconf templates packages ask their
questions with (``debian-debconf``, corpus/debconf.py), the translated manuals
(``debian-manuals``, corpus/manuals.py) and manual pages (``debian-manpages``,
corpus/manpages.py), KDE's application handbooks (``debian-kde-docs``, corpus/kdedocs.py), the
GIMP's manual (``debian-gimp-help``, corpus/gimphelp.py), and the example sentences and phrases of
Ding's German-English dictionary (``debian-examples``, ``debian-phrases``, corpus/dictionary.py),
cleaned (corpus/clean.py) and
split by package (the manuals and manual pages by page, the handbooks by application, the dictionary
by entry) so nothing leaks.

    python -m corpus.build --sources debian     # fetch, clean, split; prints the report

The result is cached as TSV (``{source}.{split}.en-{lang}.tsv``: key, English, translation)
beside ``report.json``: per source, language and split the pairs kept, and per reason the
pairs dropped; ``{source}.packages.tsv`` names each package read with its version and licence
(from its copyright file; empty where that is not machine-readable). Standard library only.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from cli import UsageError
from corpus import catalogs, ddtp, debconf, debian, dictionary, gimphelp, kdedocs, manpages, manuals
from corpus.bible import Pair
from corpus.clean import dedup, drop_reason, near_key
from corpus.tsv import directed_pairs, write_rows
from corpus.tsv import read_rows as read_tsv

LANGUAGES = ("de", "fr", "es")
SOURCES = ("debian-descriptions", "debian-catalogs", "debian-debconf", "debian-manuals", "debian-manpages",
           "debian-examples", "debian-phrases", "debian-kde-docs", "debian-gimp-help")
SPLITS = ("train", "dev", "test")
CACHE_VERSION = 3  # bump when the extraction or clean-up changes: cached pairs are rebuilt
Reader = Callable[[str, Path | None], Iterator[tuple[str, str, str, str]]]
READERS: dict[str, Reader] = {
    "debian-descriptions": lambda lang, cache: ddtp.rows(lang, cache),
    "debian-catalogs": lambda lang, cache: catalogs.rows(lang, cache=cache),
    "debian-debconf": debconf.rows,
    "debian-manuals": manuals.rows,
    "debian-manpages": manpages.rows,
    "debian-examples": lambda lang, cache: dictionary.rows("examples", lang, cache),
    "debian-phrases": lambda lang, cache: dictionary.rows("phrases", lang, cache),
    "debian-kde-docs": kdedocs.rows,
    "debian-gimp-help": gimphelp.rows,
}
# {package: (version, licence)} of the packages a source reads (the descriptions' are apt's indices)
PROVENANCE: dict[str, Callable[[Path | None], dict[str, tuple[str, str]]]] = {
    "debian-catalogs": lambda cache: catalogs.packages(cache=cache),
    "debian-debconf": debconf.packages,
    "debian-manuals": manuals.packages,
    "debian-manpages": manpages.packages,
    "debian-examples": dictionary.packages,
    "debian-phrases": dictionary.packages,
    "debian-kde-docs": kdedocs.packages,
    "debian-gimp-help": gimphelp.packages,
}


def corpus_dir(cache: Path | None = None) -> Path:
    return (cache or debian.cache_dir()) / "corpus" / f"debian-v{CACHE_VERSION}"


def build_source(source: str, lang: str, cache: Path | None = None) -> dict[str, object]:
    """Fetch, clean, dedup and split one source for English and ``lang``; its report."""
    by_split: dict[str, list[tuple[str, str, str]]] = {s: [] for s in SPLITS}
    dropped: Counter[str] = Counter()
    for split, key, en, xx in READERS[source](lang, cache):
        reason = drop_reason(en, xx, lang)
        if reason:
            dropped[reason] += 1
        else:
            by_split[split].append((key, en, xx))
    # Held-out text first; training then loses every pair whose English is held out.
    test, d_test = dedup(by_split["test"])
    dev, d_dev = dedup(by_split["dev"], banned={r[1] for r in test})
    held_out = {near_key(en) for _, en, _ in test + dev}
    train, d_train = dedup(by_split["train"], banned=held_out)
    out = corpus_dir(cache)
    for split, rows in (("train", train), ("dev", dev), ("test", test)):
        write_rows(out / f"{source}.{split}.en-{lang}.tsv", rows)
    return {"kept": {"train": len(train), "dev": len(dev), "test": len(test)},
            "dropped": dict(sorted((dropped + d_test + d_dev + d_train).items()))}


def build(languages: Sequence[str] = LANGUAGES, sources: Sequence[str] = SOURCES, cache: Path | None = None,
          force: bool = False) -> Path:
    """Every source and language not built yet (or all with ``force``); returns the corpus folder."""
    out = corpus_dir(cache)
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    for source in sources:
        if source not in SOURCES:
            raise UsageError(f"Debian corpus source {source!r} is not one of {', '.join(SOURCES)}")
        for lang in languages:
            if lang not in LANGUAGES:
                raise UsageError(f"Debian corpus language {lang!r} is not one of {', '.join(LANGUAGES)}")
            name = f"{source}/en-{lang}"
            # Built means reported and every split on disk: a split file deleted by hand (to
            # rebuild one source after its reader changed) is rebuilt, not read as missing.
            files = [out / f"{source}.{split}.en-{lang}.tsv" for split in SPLITS]
            if name in report and all(f.exists() for f in files) and not force:
                continue
            report[name] = build_source(source, lang, cache)
            report_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        provenance = out / f"{source}.packages.tsv"
        if source in PROVENANCE and (force or not provenance.exists()):
            write_rows(provenance, [(name, *info) for name, info in sorted(PROVENANCE[source](cache).items())])
    return out


def read_rows(source: str, split: str, lang: str, cache: Path | None = None) -> list[tuple[str, str, str]]:
    """(key, English, translation) rows of one source, split and language, built on first use."""
    if source not in SOURCES:
        raise UsageError(f"Debian corpus source {source!r} is not one of {', '.join(SOURCES)}")
    path = corpus_dir(cache) / f"{source}.{split}.en-{lang}.tsv"
    if not path.exists():
        build([lang], [source], cache)
    return read_tsv(path)


def pairs(source: str, directions: Sequence[str], split: str, cache: Path | None = None) -> list[Pair]:
    """Pairs of one source and split for every direction (en-xx or xx-en) it covers."""
    return directed_pairs(lambda lang: read_rows(source, split, lang, cache), directions, LANGUAGES)
