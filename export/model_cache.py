"""Hugging Face models converted once for ``nmt-serve --model``: a model id or a downloaded
directory -> a model package in nmt-serve's cache.

    python -m export.model_cache Helsinki-NLP/opus-mt-en-ROMANCE --cache DIR --result FILE [--languages en,fr]

nmt-serve runs this as a child process (server/model_source.py): the server never imports
export/ (DESIGN.md's layering), and torch, Transformers and the conversion's memory go when the
child ends. The child prints what it does on stdout, one line at a time, and writes its outcome
to ``--result`` as JSON: ``{"package": DIR, "converted": true|false}`` or ``{"error": LINE}``.

A model id is fetched as ``nmt-import ID`` fetches it (export/hub.py: the hub's own cache, its
environment honoured, HF_HUB_OFFLINE included); ``ID@REVISION`` pins a branch, tag or commit.
The package is keyed by what it was converted from, so an unchanged model is never converted
twice and a changed one always is:

    CACHE/hub/OWNER--NAME/COMMIT[-LANGUAGES]/    a model id at the commit its revision resolved to
    CACHE/local/NAME-STAMP[-LANGUAGES]/         a directory; STAMP hashes its path and its files'
                                                names, sizes and modification times

LANGUAGES is a hash of ``--languages`` (nmt-import's: NLLB's languages, or the targets of an
OPUS-MT model with several). Packages are converted with every variant nmt-serve may pick (int8
for the CPU, fp16 for CUDA), so one serves on either device. A lock file beside each entry lets
one process convert while another waits for it; an entry that does not load (an older package
format, an interrupted copy) is converted again. Deleting the cache is always safe.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from engine.package import ModelPackage, PackageError
from export.hub import ImportRefused, fetch, hub_id

VARIANTS = ("int8", "fp16")  # what a converted package holds beside fp32: nmt-serve's choices on CPU and CUDA
COMMAND = "nmt-serve --model"  # named in fetch's "give ... that directory"

Log = Callable[[str], None]


def parse_source(source: str) -> tuple[str | None, str | None]:
    """(model id, revision) for ``owner/name``, ``hf:owner/name`` and either with ``@revision``;
    (None, None) for a path."""
    if Path(source).exists():
        return None, None
    base, at, revision = source.rpartition("@")
    if at and revision and hub_id(base) is not None and not Path(base).exists():
        return hub_id(base), revision
    return hub_id(source), None


def _suffix(languages: list[str] | None) -> str:
    if not languages:
        return ""
    return "-" + hashlib.sha256(",".join(sorted(x.strip() for x in languages)).encode()).hexdigest()[:10]


def directory_stamp(directory: Path) -> str:
    """A hash of the directory's resolved path and its files' names, sizes and modification times."""
    h = hashlib.sha256(str(directory.resolve()).encode())
    for f in sorted(p for p in directory.iterdir() if p.is_file()):
        stat = f.stat()
        h.update(f"\0{f.name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def usable(entry: Path) -> str | None:
    """None when ``entry`` is a package nmt-serve can serve as converted here, else why not."""
    if not (entry / "model.json").is_file():
        return "not converted yet"
    try:
        package = ModelPackage.load(entry, verify_hashes=False)  # the server checks the hashes when it loads it
    except PackageError as e:
        return str(e)
    missing = [v for v in VARIANTS if v not in package.variants]
    return f"it has no {', '.join(missing)} graphs" if missing else None


@contextmanager
def locked(entry: Path, log: Log) -> Iterator[None]:
    """Hold ``entry``'s lock file: one process converts, the others wait and then find the package."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f"{entry.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another process is converting into {entry}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached_package(source: str, cache: Path, languages: list[str] | None = None, log: Log = print,
                   convert: Callable[..., object] | None = None) -> tuple[Path, bool]:
    """The package converted from ``source`` (a model id, or a Hugging Face directory) in
    ``cache``, and whether it was converted now. ``convert`` is hf_import.import_directory
    (imported only when a conversion is due: finding a package needs no torch)."""
    model_id, revision = parse_source(source)
    origin: dict[str, str] = {}
    if model_id is not None:
        directory = fetch(model_id, revision, log=log, command=COMMAND)
        owner, _, name = model_id.partition("/")
        entry = cache / "hub" / f"{owner}--{name}" / f"{directory.name}{_suffix(languages)}"
        origin = {"imported_from": model_id, "hub_model_id": model_id, "hub_revision": directory.name}
        what = f"{model_id} at {directory.name}"
    else:
        directory = Path(source)
        if not directory.is_dir():
            raise ImportRefused(f"{directory} is not a directory: give a model package, a Hugging Face model "
                                f"directory or a model id (owner/name)")
        entry = cache / "local" / f"{directory.resolve().name}-{directory_stamp(directory)}{_suffix(languages)}"
        what = str(directory)
    with locked(entry, log):
        why = usable(entry)
        if why is None:
            log(f"{what}: converted before, {entry}")
            return entry, False
        if why != "not converted yet":
            log(f"{entry} cannot be served ({why}): converting again")
        if convert is None:
            convert = _importer()
        log(f"{what}: converting into {entry} (once: later starts use it)")
        convert(directory, entry, int8=True, fp16=True, languages=languages, origin=origin or None, log=log)
    return entry, True


def _importer() -> Callable[..., object]:
    try:
        from export.hf_import import import_directory
    except ImportError as e:  # a server install: no torch, no Transformers
        missing = f"{e.name} is not installed" if e.name else str(e).splitlines()[0]
        raise ImportRefused(f"converting a Hugging Face model needs torch and Transformers ({missing}): pip install "
                            f"'.[export,hf]', or convert it where they are with nmt-import and serve that package "
                            f"directory") from None
    return import_directory


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m export.model_cache", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a model id (owner/name[@revision], hf:owner/name) or a Hugging Face directory")
    p.add_argument("--cache", type=Path, required=True, help="nmt-serve's package cache")
    p.add_argument("--result", type=Path, required=True, help="where to write the outcome (JSON)")
    p.add_argument("--languages", type=lambda v: [x for x in v.split(",") if x.strip()],
                   help="as nmt-import --languages")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # lines in a log, not a redrawn bar
    warnings.filterwarnings("ignore")  # the libraries' advice (sacremoses, ...); refusals are errors

    def log(line: str) -> None:
        print(line, flush=True)

    def result(code: int, **outcome: object) -> int:
        args.result.write_text(json.dumps(outcome))
        return code

    try:
        entry, converted = cached_package(args.source, args.cache, args.languages, log)
    except (ImportRefused, FileNotFoundError) as e:
        return result(EXIT_USAGE, error=str(e))
    except RuntimeError as e:  # the converted graphs do not compute what the model does
        return result(EXIT_FAILED, error=str(e))
    except Exception as e:  # whatever a library raises: one line for the server, the traceback in its log
        import traceback

        traceback.print_exc()
        lines = str(e).strip().splitlines()
        return result(EXIT_FAILED, error=f"{type(e).__name__}: {lines[0] if lines else ''}")
    return result(EXIT_OK, package=str(entry), converted=converted)


if __name__ == "__main__":
    sys.exit(main())
