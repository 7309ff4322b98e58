"""The cached form of every Debian-built corpus: TSV rows (key, English, translation), one
file per source, split and language, and the pairs of each direction read back from them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from cli import parse_direction
from corpus.bible import Pair

Row = tuple[str, str, str]  # (key, English, translation)


def write_rows(path: Path, rows: Sequence[Row]) -> None:
    """Written whole or not at all (a temporary file renamed over the old one), its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{k}\t{en}\t{xx}\n" for k, en, xx in rows), encoding="utf-8")
    tmp.replace(path)


def read_rows(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        key, en, xx = line.split("\t")
        rows.append((key, en, xx))
    return rows


def directed_pairs(rows_of: Callable[[str], list[Row]], directions: Sequence[str],
                   languages: Sequence[str]) -> list[Pair]:
    """Pairs of every direction (en-xx or xx-en, xx in ``languages``) from ``rows_of(xx)``."""
    out: list[Pair] = []
    for direction in directions:
        src_lang, tgt_lang = parse_direction(direction)
        lang = tgt_lang if src_lang == "en" else src_lang
        if "en" not in (src_lang, tgt_lang) or lang not in languages:
            continue  # these sources pair English with one of ``languages`` only
        for key, en, xx in rows_of(lang):
            src, tgt = (en, xx) if src_lang == "en" else (xx, en)
            out.append(Pair(src_lang, tgt_lang, src, tgt, key))
    return out
