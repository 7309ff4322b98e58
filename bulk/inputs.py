"""The rows ``nmt-bulk`` translates, in input order, from a text file, JSONL, Parquet, or a
directory of one of them.

Text is read here, by the driver, and split into lines exactly as ``nmt-translate`` splits a
file (``clients.translate_file.split_lines``: newline only, ``\\r\\n`` too, a last line without
a newline counts), so the two give the same output line for line. JSONL and Parquet go
through Ray Data (``read_json(lines=True)``, ``read_parquet``: many files, large files, remote
file systems), which reads only the text column and keeps the rows in order. A directory is
one dataset: its files (hidden ones and ``_``-prefixed ones such as ``_SUCCESS`` left out) in
sorted path order, all of one format. A missing or empty cell is an empty row; it comes back
as an empty line, never dropped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from cli import UsageError
from clients.translate_file import split_lines

FORMATS = ("text", "jsonl", "parquet")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True)
class Rows:
    texts: list[str]
    files: tuple[str, ...]  # what was read, in order
    format: str
    digest: str  # SHA-256 over the files' bytes and the column: what a resumed run must be given again


def files_of(path: Path) -> list[Path]:
    """``path`` itself, or a directory's data files (recursively, sorted, without hidden and
    ``_``-prefixed names)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UsageError(f"{path}: no such file or directory")
    found = sorted(p for p in path.rglob("*") if p.is_file()
                   and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))
    if not found:
        raise UsageError(f"{path}: the directory holds no data files")
    return found


def detect_format(files: list[Path], given: str) -> str:
    """``given`` unless it is "auto"; otherwise from the file suffixes (.jsonl/.ndjson/.json,
    .parquet, anything else is text), which must agree."""
    if given != "auto":
        return given
    kinds = {SUFFIXES.get(f.suffix.lower(), "text") for f in files}
    if len(kinds) > 1:
        raise UsageError(f"the input mixes formats ({', '.join(sorted(kinds))}); give files of one format, "
                         "or --format")
    return kinds.pop()


def read_rows(path: str | Path, fmt: str = "auto", column: str = "text") -> Rows:
    files = files_of(Path(path))
    fmt = detect_format(files, fmt)
    digest = hashlib.sha256()
    texts: list[str] = []
    for f in files:
        data = f.read_bytes()
        digest.update(data)
        digest.update(b"\0")
        if fmt == "text":
            try:
                texts.extend(split_lines(data.decode("utf-8")))
            except UnicodeDecodeError as e:
                raise UsageError(f"{f} is not UTF-8 text: {e}") from None
    digest.update(f"{fmt}\0{column}".encode())
    names = tuple(str(f) for f in files)
    if fmt != "text":
        texts = _read_column(names, fmt, column)
    return Rows(texts, names, fmt, digest.hexdigest())


def _read_column(files: tuple[str, ...], fmt: str, column: str) -> list[str]:
    import pyarrow as pa
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # rows in file order, whatever the read tasks' timing
    ds = ray.data.read_json(list(files), lines=True) if fmt == "jsonl" else ray.data.read_parquet(list(files))
    names = ds.schema().names
    if column not in names:
        raise UsageError(f"the input has no column {column!r}; its columns: {', '.join(names)} (pick one with "
                         "--column)")
    texts: list[str] = []
    for batch in ds.select_columns([column]).iter_batches(batch_format="pyarrow", batch_size=65536):
        values = batch.column(column)
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
                or pa.types.is_null(values.type)):
            raise UsageError(f"column {column!r} holds {values.type}, not text")
        texts.extend("" if v is None else v for v in values.to_pylist())
    return texts
