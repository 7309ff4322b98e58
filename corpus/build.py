"""``python -m corpus.build``: fetch, extract, align, clean and split the modern corpus.

    python -m corpus.build                     # every source, en <-> de, fr, es
    python -m corpus.build --sources debian    # package descriptions and message catalogs only
    python -m corpus.build --force             # rebuild from the cached packages

Sources: ``libreoffice`` (LibreOffice's help and UI strings, corpus/libreoffice.py) and
``debian`` (translated package descriptions and programs' message catalogs,
corpus/debian_text.py). The Debian packages and apt's translation indices are fetched by name
into the cache (``$NMT_CACHE``, default ~/.cache/nmt-transformer) and the aligned pairs written
there as TSV; training reads them through those modules. Prints how many pairs each source and
split holds, and for the Debian sources why pairs were dropped.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli import EXIT_OK, EXIT_USAGE, UsageError, fail
from corpus import debian_text, libreoffice

BUILDERS = ("libreoffice", "debian")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m corpus.build", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--languages", default=",".join(libreoffice.LANGUAGES),
                   help="languages paired with English (default: %(default)s)")
    p.add_argument("--sources", default=",".join(BUILDERS), help="which corpora to build (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild even when the cached corpus is there")
    p.add_argument("--sample", metavar="TSV", help="also write a fixed sample of the test split there (language, "
                   "key, English, translation; the quality gate's modern lines)")
    p.add_argument("--sample-lines", type=int, default=40, help="paragraphs per language in --sample "
                   "(default: %(default)s)")
    args = p.parse_args(argv)
    try:
        languages = [x.strip() for x in args.languages.split(",") if x.strip()]
        builders = [x.strip() for x in args.sources.split(",") if x.strip()]
        unknown = sorted(set(builders) - set(BUILDERS))
        if unknown:
            raise UsageError(f"--sources: {', '.join(unknown)} is not one of {', '.join(BUILDERS)}")
        if "libreoffice" in builders:
            out = libreoffice.build(languages, force=args.force)
            stats = json.loads((out / "stats.json").read_text())
            for pair, counts in sorted(stats.items()):
                print(pair, " ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v))
            print(f"corpus in {out}")
        if "debian" in builders:
            out = debian_text.build(languages, force=args.force)
            report = json.loads((out / "report.json").read_text())
            for name, entry in sorted(report.items()):
                kept = " ".join(f"{k}={v}" for k, v in entry["kept"].items())
                dropped = ", ".join(f"{k} {v}" for k, v in sorted(entry["dropped"].items(), key=lambda kv: -kv[1]))
                print(f"{name} {kept} (dropped: {dropped})")
            print(f"corpus in {out}")
    except UsageError as e:
        return fail("corpus.build", str(e), EXIT_USAGE)
    if args.sample:
        rows = libreoffice.sample_test(languages, args.sample_lines)
        with open(args.sample, "w", encoding="utf-8") as f:
            f.writelines("\t".join(r) + "\n" for r in rows)
        print(f"{len(rows)} test paragraphs sampled into {args.sample}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
