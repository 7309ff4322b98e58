"""``python -m corpus.build``: fetch, extract, align, clean and split the modern corpus.

    python -m corpus.build                     # every source, en <-> de, fr, es
    python -m corpus.build --sources debian    # Debian's descriptions, catalogs, debconf, manuals
    python -m corpus.build --force             # rebuild from the cached packages
    python -m corpus.build --pack corpus.tar.xz     # build, then pack the pairs to carry elsewhere
    python -m corpus.build --unpack corpus.tar.xz   # on a machine without apt (a GPU host): use them

Sources: ``libreoffice`` (LibreOffice's help and UI strings, corpus/libreoffice.py) and
``debian`` (translated package descriptions, programs' message catalogs, debconf templates, the
Debian Reference and Handbook, manual pages and Ding's German-English dictionary,
corpus/debian_text.py). The Debian packages and apt's translation indices are fetched by name
into the cache (``$NMT_CACHE``, default ~/.cache/nmt-transformer) and the aligned pairs written
there as TSV; training reads them through those modules. Prints how many pairs each source and
split holds, and for the Debian sources why pairs were dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

from cli import EXIT_OK, EXIT_USAGE, UsageError, fail
from corpus import debian, debian_text, libreoffice

BUILDERS = ("libreoffice", "debian")


def pack(path: Path, folders: list[Path]) -> None:
    """The built pairs (TSV, stats, reports and package lists) as one xz-compressed tar, small enough
    to travel with a checkout to a host without apt: LibreOffice's and Debian's seven sources make
    about 38 MB (215 MB of TSV; packing them takes about 3 minutes on one core)."""
    with tarfile.open(path, "w:xz") as tar:
        for folder in folders:
            tar.add(folder, arcname=folder.name)


def unpack(path: Path) -> list[str]:
    """Pairs packed by ``pack`` into this machine's cache; the folders it wrote."""
    dest = debian.cache_dir() / "corpus"
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(path, "r:*") as tar:
            names = sorted({m.name.split("/", 1)[0] for m in tar.getmembers()})
            tar.extractall(dest, filter="data")
    except (OSError, tarfile.TarError) as e:
        raise UsageError(f"--unpack {path}: {e}") from e
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m corpus.build", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--languages", default=",".join(libreoffice.LANGUAGES),
                   help="languages paired with English (default: %(default)s)")
    p.add_argument("--sources", default=",".join(BUILDERS), help="which corpora to build (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild even when the cached corpus is there")
    p.add_argument("--pack", type=Path, metavar="FILE", help="after building, write the pairs to FILE (.tar.xz)")
    p.add_argument("--unpack", type=Path, metavar="FILE", help="put pairs packed with --pack into the cache "
                   "instead of building (for a machine without apt)")
    p.add_argument("--sample", metavar="TSV", help="also write a fixed sample of the test split there (language, "
                   "key, English, translation; the quality gate's modern lines)")
    p.add_argument("--sample-lines", type=int, default=40, help="paragraphs per language in --sample "
                   "(default: %(default)s)")
    args = p.parse_args(argv)
    try:
        if args.unpack:
            print(f"unpacked {', '.join(unpack(args.unpack))} into {debian.cache_dir() / 'corpus'}")
            return EXIT_OK
        languages = [x.strip() for x in args.languages.split(",") if x.strip()]
        builders = [x.strip() for x in args.sources.split(",") if x.strip()]
        unknown = sorted(set(builders) - set(BUILDERS))
        if unknown:
            raise UsageError(f"--sources: {', '.join(unknown)} is not one of {', '.join(BUILDERS)}")
        built = []
        if "libreoffice" in builders:
            out = libreoffice.build(languages, force=args.force)
            built.append(out)
            stats = json.loads((out / "stats.json").read_text())
            for pair, counts in sorted(stats.items()):
                print(pair, " ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v))
            print(f"corpus in {out}")
        if "debian" in builders:
            out = debian_text.build(languages, force=args.force)
            built.append(out)
            report = json.loads((out / "report.json").read_text())
            for name, entry in sorted(report.items()):
                kept = " ".join(f"{k}={v}" for k, v in entry["kept"].items())
                dropped = ", ".join(f"{k} {v}" for k, v in sorted(entry["dropped"].items(), key=lambda kv: -kv[1]))
                print(f"{name} {kept} (dropped: {dropped})")
            print(f"corpus in {out}")
        if args.pack:
            pack(args.pack, built)
            print(f"packed {', '.join(f.name for f in built)} into {args.pack} ({args.pack.stat().st_size:,} bytes)")
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
