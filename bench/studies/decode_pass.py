"""``python -m bench.studies.decode_pass PACKAGE``: one pass of served-style decoding (int8, greedy,
one thread) over fixed texts, and nothing else, for an outside timer to compare two packages side
by side, start-up included:

    farm-bench -n 5 --pin 0 --vs 'python -m bench.studies.decode_pass packages/a' \\
        -- python -m bench.studies.decode_pass packages/b

The texts are the capacity study's (``bench.studies.capacity.speed_texts``: the first ``--lines``
dev sources of each ``--splits`` split in all six directions), or one target's lines of ``--file``.
Prints how many sentences it translated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.modern_eval import DIRECTIONS
from bench.studies.capacity import by_target, decode_texts, speed_texts
from cli import EXIT_OK, UsageError, fail

PROG = "python -m bench.studies.decode_pass"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("package", help="an exported package directory")
    p.add_argument("--splits", default="everyday,modern", help="dev splits to take texts from (default: %(default)s)")
    p.add_argument("--lines", type=int, default=50, help="sources per split and direction (default: %(default)s)")
    p.add_argument("--file", help="translate this file's lines instead (one source a line), into --target")
    p.add_argument("--target", help="the target language of --file's lines")
    p.add_argument("--batch", type=int, default=1, help="sentences per call (default: 1, as one request at a time)")
    p.add_argument("--variant", default="int8", help="the package's weights to run (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.batch < 1 or args.lines < 1:
            raise UsageError("--batch and --lines must be at least 1")
        if bool(args.file) != bool(args.target):
            raise UsageError("--file and --target go together")
        from engine.package import ModelPackage
        from export.verify import cpu_runtime
        from training.tokenizer import Tokenizer

        package = ModelPackage.load(args.package)
        if args.file:
            work = [(args.target, Path(args.file).read_text(encoding="utf-8").splitlines())]
        else:
            work = by_target(speed_texts([s for s in args.splits.split(",") if s], DIRECTIONS, args.lines))
        runtime = cpu_runtime(package, args.variant, 1)
        tokenizer = Tokenizer(package.tokenizer_path)
    except (UsageError, OSError, ValueError) as e:
        return fail(PROG, str(e))
    print(f"translated {decode_texts(runtime, tokenizer, work, args.batch)} sentences")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
