"""Other engines on our weights, for benchmarks: each module converts our checkpoints for one
(CTranslate2, Hugging Face Transformers/Optimum, Marian), and each is also a command
(``python -m bench.peers.NAME CHECKPOINT OUT_DIR``) built from the two helpers below."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

CONVERT_ERRORS = (RuntimeError, ValueError, FileNotFoundError, FileExistsError)  # said in one line, exit 1


def converter_parser(description: str, out_help: str) -> argparse.ArgumentParser:
    """A converter's command line: the checkpoint, where to write, --force; add its own options."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a checkpoint file or a run directory (its average.pt, else its last step)")
    p.add_argument("out_dir", help=out_help)
    p.add_argument("--force", action="store_true", help="replace out_dir if it exists")
    return p


def run_converter(convert: Callable[[], Path], what: str) -> int:
    """Run ``convert``; print where ``what`` was written (0), or the error in one line (1)."""
    try:
        out = convert()
    except CONVERT_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{what} written to {out}")
    return 0
