"""``python -m corpus.build``: fetch, extract, align, clean and split the modern corpus.

    python -m corpus.build                 # LibreOffice help + UI strings, en <-> de, fr, es
    python -m corpus.build --force         # rebuild from the cached packages

The Debian packages are fetched by name (apt-get download) into the cache (``$NMT_CACHE``,
default ~/.cache/nmt-transformer) and the aligned pairs written there as TSV; training reads
them through corpus.libreoffice. Prints how many pairs each source and split holds.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli import EXIT_OK, EXIT_USAGE, UsageError, fail
from corpus import libreoffice


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m corpus.build", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--languages", default=",".join(libreoffice.LANGUAGES),
                   help="languages paired with English (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild even when the cached corpus is there")
    p.add_argument("--sample", metavar="TSV", help="also write a fixed sample of the test split there (language, "
                   "key, English, translation; the quality gate's modern lines)")
    p.add_argument("--sample-lines", type=int, default=40, help="paragraphs per language in --sample "
                   "(default: %(default)s)")
    args = p.parse_args(argv)
    try:
        languages = [x.strip() for x in args.languages.split(",") if x.strip()]
        out = libreoffice.build(languages, force=args.force)
    except UsageError as e:
        return fail("corpus.build", str(e), EXIT_USAGE)
    stats = json.loads((out / "stats.json").read_text())
    for pair, counts in sorted(stats.items()):
        print(pair, " ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v))
    print(f"corpus in {out}")
    if args.sample:
        rows = libreoffice.sample_test(languages, args.sample_lines)
        with open(args.sample, "w", encoding="utf-8") as f:
            f.writelines("\t".join(r) + "\n" for r in rows)
        print(f"{len(rows)} test paragraphs sampled into {args.sample}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
