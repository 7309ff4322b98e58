"""``nmt-bulk``: translate a large input on Ray, in a pool of actors that each hold the engine.

    nmt-bulk corpus.en -o corpus.de -s en -t de --actors 2          # a local Ray on this machine
    nmt-bulk corpus.en -o corpus.de -s en -t de --resume            # after a kill: only what is left
    nmt-bulk data/ -o out.de -s en -t de --column text              # a directory of JSONL or Parquet
    nmt-bulk corpus.en -o corpus.de -s en -t de --ray-address auto  # join a running Ray cluster

The input (a text file, JSONL or Parquet with a text column, or a directory of one of them:
``bulk/inputs.py``) is cut into blocks of ``--block-lines`` rows. Each actor loads the package
as ``nmt-serve`` does and translates a block through the server's own code (``bulk/local.py``),
so the output is what ``nmt-translate -i INPUT -o OUTPUT`` gets from a server, byte for byte:
one line per input row in input order, an empty row kept empty, a row that cannot be
translated left empty and listed in OUTPUT.errors.tsv. Every finished block is saved at once
(OUTPUT.partial.blocks/), and the blocks are appended to OUTPUT.partial in order; a killed run
continued with ``--resume`` translates only the blocks not yet saved. OUTPUT appears (renamed
from OUTPUT.partial) when every row is done.

Without ``--ray-address`` it starts a Ray on this machine, with as many CPUs as it has; with
one it joins that cluster, where every node must read the package at the same path. Each
actor asks Ray for ``--threads`` CPUs (and one GPU with ``--device cuda``); an actor that dies
is restarted and its block sent again. Exit status as nmt-translate's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bulk.inputs import FORMATS, read_rows
from cli import (
    EXIT_FAILED,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_output_file,
    exit_status_help,
    fail,
    language,
)
from clients.progress import Progress
from clients.translate_file import (
    EXIT_FAILED_LINES,
    Failure,
    FileSettings,
    FileTranslator,
    PartialOutput,
    format_translation,
    report_failures,
    warn_length_limited,
)
from engine.defaults import BEAM_SIZE
from server.config import INT8

BLOCK_LINES = 1000  # rows per block: what a kill can cost, and the unit actors take
TASKS_PER_ACTOR = 2  # blocks queued at each actor, so it never waits for the driver
DEFAULT_PACKAGE = "packages/default"


@dataclass(frozen=True)
class ActorSettings:
    """What each actor loads and how it runs."""

    package: str
    threads: int = 1
    int8: bool = INT8
    device: str = "cpu"


class BlockWorker:
    """A Ray actor's state: one package loaded, translating blocks of rows as nmt-translate's
    file client does (``FileTranslator`` over the server's service, in this process)."""

    def __init__(self, actor: ActorSettings, job: FileSettings) -> None:
        from bulk.local import LocalClient  # in the actor's process: the engine loads there, not in the driver

        self.client = LocalClient(actor.package, threads=actor.threads, int8=actor.int8, device=actor.device)
        self.job = job

    def translate(self, start: int, lines: list[str]) -> dict[str, Any]:
        """The block of rows ``start`` .. ``start + len(lines)``: each row's output line, the
        rows that failed (1-based row numbers of the whole input) and those the length limit cut."""
        outputs = [""] * len(lines)
        failures: list[tuple[int, str, str]] = []
        limited: list[int] = []

        def emit(i: int, t, failure: Failure | None) -> None:
            if t is not None and t.length_limited:
                limited.append(start + i + 1)
            outputs[i] = format_translation(t, self.job.nbest)
            if failure:
                failures.append((start + failure.line, failure.code, failure.message))

        translator = FileTranslator(self.client, self.job, self.client.max_chars, self.client.max_texts)
        asyncio.run(translator.run(lines, 0, emit, Progress(len(lines), enabled=False)))
        return {"start": start, "outputs": outputs, "failures": failures, "limited": limited}


class BlockStore:
    """Finished blocks saved as they arrive (OUTPUT.partial.blocks/K.json, written atomically),
    so that a resumed run keeps blocks that finished ahead of an earlier, unfinished one."""

    def __init__(self, partial: Path, fresh: bool) -> None:
        self.dir = partial.with_name(partial.name + ".blocks")
        if fresh and self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(exist_ok=True)

    def saved(self, first: int) -> dict[int, dict[str, Any]]:
        """The blocks saved by an earlier run from block ``first`` on; older ones are removed
        (already in OUTPUT.partial), as are torn temporary files."""
        found: dict[int, dict[str, Any]] = {}
        for p in self.dir.iterdir():
            if p.suffix == ".json" and p.stem.isdigit() and int(p.stem) >= first:
                found[int(p.stem)] = json.loads(p.read_text(encoding="utf-8"))
            else:
                p.unlink()
        return found

    def save(self, k: int, block: dict[str, Any]) -> None:
        tmp = self.dir / f"{k}.tmp"
        tmp.write_text(json.dumps(block, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, self.dir / f"{k}.json")

    def drop(self, k: int) -> None:
        (self.dir / f"{k}.json").unlink(missing_ok=True)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class InOrder:
    """Appends finished blocks to OUTPUT.partial strictly in row order; a block whose first rows
    are already there (a run killed while writing it) adds only the rest."""

    def __init__(self, out: PartialOutput, store: BlockStore, block_lines: int, progress: Progress) -> None:
        self.out, self.store, self.progress = out, store, progress
        self.written = out.done
        self.next = out.done // block_lines
        self.waiting: dict[int, dict[str, Any]] = {}
        self.failures: list[Failure] = []
        self.limited: list[int] = []

    def add(self, k: int, block: dict[str, Any]) -> None:
        self.waiting[k] = block
        while self.next in self.waiting:
            block = self.waiting.pop(self.next)
            skip = self.written - block["start"]
            # Failures first (flushed as recorded), then the lines: a kill between the two drops
            # the rows of this block on resume, and they report again, as nmt-translate's do.
            for line, code, message in block["failures"]:
                if line > self.written:
                    failure = Failure(line, code, message)
                    self.out.record_failure(failure)
                    self.failures.append(failure)
            self.limited.extend(x for x in block["limited"] if x > self.written)
            for text in block["outputs"][skip:]:
                self.out.write(text)
            self.out.flush()
            self.progress.update(done=len(block["outputs"]) - skip)
            self.written += len(block["outputs"]) - skip
            self.store.drop(self.next)
            self.next += 1


def translate_rows(rows: list[str], out: PartialOutput, store: BlockStore, actor: ActorSettings, job: FileSettings,
                   actors: int, block_lines: int, progress: Progress) -> InOrder:
    import ray

    order = InOrder(out, store, block_lines, progress)
    n_blocks = -(-len(rows) // block_lines)
    for k, block in sorted(store.saved(order.next).items()):
        order.add(k, block)
    todo = deque(k for k in range(order.next, n_blocks) if k not in order.waiting)
    if not todo:
        return order
    resources = {"num_cpus": actor.threads, "num_gpus": 1 if actor.device == "cuda" else 0}
    remote = ray.remote(BlockWorker).options(max_restarts=2, max_task_retries=2, **resources)
    pool = [remote.remote(actor, job) for _ in range(min(actors, len(todo)))]
    pending: dict[Any, tuple[int, int]] = {}  # task -> (block, actor)
    try:
        while todo or pending:
            queued = Counter(i for _, i in pending.values())
            for i, a in enumerate(pool):
                for _ in range(min(TASKS_PER_ACTOR - queued[i], len(todo))):
                    k = todo.popleft()
                    start = max(k * block_lines, order.written)
                    ref = a.translate.remote(start, rows[start:min((k + 1) * block_lines, len(rows))])
                    pending[ref] = (k, i)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                k, _ = pending.pop(ref)
                block = ray.get(ref)
                store.save(k, block)
                order.add(k, block)
    finally:
        for a in pool:  # their CPUs (and GPUs) go back to the cluster now, not when the driver exits
            ray.kill(a)
    return order


def start_ray(address: str | None) -> bool:
    """Start (or join) Ray unless this program already runs it; True when this call did, and so
    shuts it down at the end."""
    import ray
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False  # ours only: Ray Data's would interleave
    if ray.is_initialized():
        return False
    try:
        # "local": a Ray of our own, even when another runs on this machine (ray.init(None) would
        # join that one, or fail on the address file a killed head leaves behind).
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except ConnectionError as e:
        raise UsageError(f"--ray-address {address}: {last_line(e)}") from None
    return True


def run(args: argparse.Namespace) -> int:
    job = FileSettings(args.source, args.target, beam_size=args.beam or BEAM_SIZE, nbest=args.nbest,
                       batch_lines=args.batch_lines, in_flight=args.in_flight,
                       max_output_tokens=args.max_output_tokens, split=args.split)
    actor = ActorSettings(str(Path(args.package).resolve()), args.threads, args.int8, args.device)
    check_package(actor.package, job)
    try:
        import ray
        import ray.data
    except ImportError:
        raise UsageError("nmt-bulk needs Ray: pip install 'nmt-transformer[bulk]'") from None
    ray_started = start_ray(args.ray_address)
    try:
        rows = read_rows(args.input, args.format, args.column)
        meta = {"input_sha256": rows.digest, "lines": len(rows.texts), "source": job.source, "target": job.target,
                "package": actor.package, "int8": actor.int8, "beam_size": job.beam_size, "nbest": job.nbest,
                "max_output_tokens": job.max_output_tokens, "split": job.split, "block_lines": args.block_lines}
        out = PartialOutput(Path(args.output), meta, args.resume, args.overwrite)
        store = BlockStore(out.partial, fresh=not args.resume)
        if out.done and not args.quiet:
            print(f"resuming: {out.done} of {len(rows.texts)} rows already written; translating the rest",
                  file=sys.stderr)
        progress = Progress(len(rows.texts) - out.done, unit="rows", rate_unit="rows/s", enabled=not args.quiet)
        started = time.monotonic()
        try:
            order = translate_rows(rows.texts, out, store, actor, job, args.actors, args.block_lines, progress)
        except (KeyboardInterrupt, Exception) as e:
            out.close()
            progress.close()
            why = "interrupted" if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {last_line(e)}"
            print(f"stopped: {why}", file=sys.stderr)
            print(f"the rows finished so far are in {out.partial} and {store.dir}; run the same command with "
                  "--resume to translate the rest", file=sys.stderr)
            return EXIT_FAILED
        progress.close()
        out.finish()
        store.remove()
        seconds = time.monotonic() - started
        if not args.quiet:
            print(f"wrote {args.output}: {len(rows.texts)} rows from {len(rows.files)} file(s), "
                  f"{args.actors} actor(s), {seconds:.1f} s", file=sys.stderr)
        warn_length_limited(order.limited, "row", "nmt-bulk")
        return report_failures(out.earlier_failures + order.failures, out.errors_path)
    finally:
        if ray_started:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()


def last_line(e: BaseException) -> str:
    """The line that says what went wrong: a failed Ray task's text is the remote traceback,
    whose cause comes last."""
    text = str(e).strip()
    return text.splitlines()[-1] if text else ""


def check_package(path: str, job: FileSettings) -> None:
    """The package exists and serves the pair (before any Ray process starts). The files'
    hashes are left to the actors, which check them as they load the graphs."""
    from engine.package import ModelPackage

    try:
        package = ModelPackage.load(path, verify_hashes=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"--package: {e}") from None
    pair = f"{job.source}-{job.target}"
    if pair not in package.pairs:
        raise UsageError(f"language pair {pair} is not supported by {path}; supported: {', '.join(package.pairs)}")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-bulk", description=__doc__,
                       epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE, EXIT_FAILED_LINES))
    p.add_argument("input", help="a text file (one row a line), JSONL (.jsonl), Parquet (.parquet), or a directory "
                   "of one of them")
    p.add_argument("-o", "--output", required=True, help="the translation, one line per input row, written "
                   "atomically into an existing folder")
    p.add_argument("-s", "--source", required=True, type=language, help="source language, e.g. en")
    p.add_argument("-t", "--target", required=True, type=language, help="target language, e.g. de")
    p.add_argument("--package", default=DEFAULT_PACKAGE, help=f"the model package (default: {DEFAULT_PACKAGE})")
    p.add_argument("--format", choices=("auto", *FORMATS), default="auto", help="input format (default: from the "
                   "file names: .jsonl/.ndjson/.json, .parquet, anything else text)")
    p.add_argument("--column", default="text", help="the text column of JSONL or Parquet rows (default: text)")
    p.add_argument("--actors", type=int, default=1, help="actors, each with the model loaded (default: 1)")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads per actor, the CPUs each asks "
                   "Ray for (default: 1)")
    p.add_argument("--int8", action=argparse.BooleanOptionalAction, default=INT8,
                   help="CPU: the int8 graphs, as nmt-serve serves by default (--no-int8: fp32)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: one GPU per actor")
    p.add_argument("--ray-address", help="join this Ray cluster ('auto': the one this machine belongs to); "
                   "default: start one here")
    p.add_argument("--block-lines", type=int, default=BLOCK_LINES, help=f"rows per block: the unit an actor takes "
                   f"and a resume keeps (default: {BLOCK_LINES})")
    p.add_argument("--resume", action="store_true", help="continue OUTPUT.partial left by an interrupted run")
    p.add_argument("--overwrite", action="store_true", help="discard OUTPUT.partial and start over")
    p.add_argument("--beam", type=int, help=f"beam size, 1: greedy (default: {BEAM_SIZE}, as nmt-translate)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per row, as nmt-translate --nbest")
    p.add_argument("--max-output-tokens", type=int, default=0, help="most target tokens per sentence (default: "
                   "the server's rule)")
    p.add_argument("--no-split", dest="split", action="store_false", help="translate each row as one sentence")
    p.add_argument("--batch-lines", type=int, default=32, help="rows per batch inside an actor, as nmt-translate's")
    p.add_argument("--in-flight", type=int, default=4, help="batches an actor decodes together, as nmt-translate's")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        for name in ("actors", "threads", "block_lines", "beam", "nbest", "batch_lines", "in_flight"):
            if getattr(args, name) is not None and getattr(args, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if args.beam is not None and args.nbest > args.beam > 1:
            raise UsageError(f"--nbest {args.nbest} is more than --beam {args.beam}")
        if args.max_output_tokens < 0:
            raise UsageError(f"--max-output-tokens must be 0 (the server's default) or more, not "
                             f"{args.max_output_tokens}")
        if not Path(args.input).exists():
            raise UsageError(f"{args.input}: no such file or directory")
        check_output_file(args.output, "-o/--output")
        return run(args)
    except UsageError as e:
        return fail("nmt-bulk", str(e), EXIT_USAGE)
    except KeyboardInterrupt:
        return fail("nmt-bulk", "interrupted", EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())

