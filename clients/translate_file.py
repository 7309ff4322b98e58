"""``nmt-translate``: translate texts from the command line, or a whole file, through the server.

    nmt-translate -s en -t de "In the beginning was the Word."
    nmt-translate -s en -t de -i book.en -o book.de           # a file, one sentence a line
    nmt-translate -s en -t de -i book.en -o book.de --resume  # continue an interrupted run
    nmt-translate -s en -t de -i report.docx -o report.de.docx  # a document, its format kept
    cat book.en | nmt-translate -s en -t de > book.de         # stdin to stdout
    nmt-translate -s en -t de --attention-png attn.png "Jesus wept."

Files keep their line count and order exactly: an empty line stays empty, and a line that
cannot be translated (too long for the model, say) is left empty in the output, never
dropped, and reported on stderr and in OUTPUT.errors.tsv (line, code, message; a row is
appended as its line is written). Lines go in batches with several requests in flight.
Output is written in order to OUTPUT.partial as soon as the lines before it are done, and
renamed to OUTPUT at the end, so an interrupted (even killed) run loses nothing and
``--resume`` translates only what is left, keeping the failures already listed. A server
that is unavailable or busy (restarting, say) is retried until --timeout is used up. The
server's bearer token comes from --auth-token-file or $NMT_AUTH_TOKEN (--auth-token works
too, but other users of the machine can read it in the process list). Language codes are
case-insensitive. Exit status 3 covers failed lines of this run or of the run it resumed;
1 (stopped: server unreachable, interrupted, the disk full) leaves OUTPUT.partial to --resume
later. One run at a time writes an output: a run holds OUTPUT.lock (an flock, which the system
drops when the process ends, even killed), and a second run on the same output is refused.

A document (.docx, .odt, .html, .htm, .md, .srt, .vtt, by the input's extension) is translated
whole, its structure and formatting kept, through the module the gateway's /translate_file
uses (clients/translate_document.py, documents/); its output is written only once every
segment is translated, and a segment the server refuses stops the run naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import fcntl
import hashlib
import heapq
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import grpc

from cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_input_file,
    check_output_file,
    exit_status_help,
    fail,
    language,
)
from clients.client import (
    FIRST_CONTACT_SECONDS,
    AsyncTranslatorClient,
    Connection,
    OnRetry,
    Translation,
    TranslationError,
    TranslatorClient,
    served_model,
)
from clients.credentials import add_connection_arguments, connection, explain
from clients.progress import Progress
from clients.translate_document import DOCUMENT_EXTENSIONS, is_document, translate_document
from engine.defaults import BEAM_SIZE
from nmt.v1 import translator_pb2 as pb

EXIT_STOPPED, EXIT_FAILED_LINES = EXIT_FAILED, EXIT_PARTIAL  # this command's names for them


@dataclass(frozen=True)
class Failure:
    line: int  # 1-based, as editors and error messages count
    code: str
    message: str


@dataclass(frozen=True)
class FileSettings:
    """What one nmt-translate run asks of the server, and how hard it pushes."""

    source: str
    target: str
    model: str = ""
    beam_size: int = BEAM_SIZE
    nbest: int = 1
    batch_lines: int = 32
    in_flight: int = 4
    timeout: float = 120.0
    max_output_tokens: int = 0  # per sentence; 0: the server's default
    split: bool = True  # the server splits each line into sentences

    @property
    def options(self) -> dict:
        return {"beam_size": max(self.beam_size, self.nbest), "num_hypotheses": self.nbest,
                "return_scores": self.nbest > 1, "max_output_tokens": self.max_output_tokens,
                "no_sentence_split": not self.split}


def split_lines(text: str) -> list[str]:
    """Lines as ``wc -l`` and editors count them: split on newline only (not on U+2028 and the
    other separators ``str.splitlines`` knows), a final line without a newline counts, ``\\r\\n`` too."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [x[:-1] if x.endswith("\r") else x for x in lines]


def one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def format_translation(t: Translation | None, nbest: int) -> str:
    """One output line: the best text, or with n-best ``text<TAB>score<TAB>stop reason`` per
    hypothesis (``end_of_sentence``, or ``length_limit``: it may be cut short)."""
    if t is None:
        return ""
    if nbest <= 1:
        return one_line(t.text)
    return "\t".join(f"{one_line(h.text).replace(chr(9), ' ')}\t{h.score:.4f}\t{h.stop_reason.name.lower()}"
                     for h in t.hypotheses)


def warn_length_limited(where: list[int], what: str, prog: str = "nmt-translate") -> None:
    """One line on stderr naming the outputs that the output-length limit stopped: they may
    be cut short."""
    if where:
        listed = ", ".join(map(str, where[:10])) + (", ..." if len(where) > 10 else "")
        print(f"{prog}: {len(where)} {what}(s) stopped at the output-length limit and may be cut short "
              f"({what} {listed}); raise --max-output-tokens", file=sys.stderr)


class FileTranslator:
    """Translates lines[start:] with ``job.in_flight`` requests open and hands each line's result
    to ``emit`` strictly in line order, as soon as every line before it is done.

    ``job.in_flight`` workers share the work, earliest lines first: the lines of a batch that the
    server rejected (INVALID_ARGUMENT: one bad line rejects its whole batch, so each of its lines
    goes again alone to find it) before the next batch. No batch starts ``ahead`` lines or more
    past the first line not yet emitted, which bounds the finished lines held in memory while an
    earlier request is slow (to ``ahead + batch``)."""

    def __init__(self, client: AsyncTranslatorClient, job: FileSettings, max_chars: int, max_texts: int,
                 ahead: int | None = None) -> None:
        self.client = client
        self.job = job
        self.max_chars = max_chars
        self.batch = max(1, min(job.batch_lines, max_texts or job.batch_lines))
        self.ahead = ahead or max(256, 4 * job.in_flight * self.batch)
        self.failures: list[Failure] = []  # of the lines emitted so far, in line order
        self.most_held = 0  # the most finished lines that waited at once for an earlier one

    async def run(self, lines: list[str], start: int, emit: Callable[[int, Translation | None, Failure | None], None],
                  progress: Progress) -> None:
        await _Pass(self, lines, start, emit, progress).run()


class _Pass:
    """One pass of a FileTranslator over lines[start:]: the lines settled and waiting for an
    earlier one, where the workers are, and the lines of rejected batches to resend alone."""

    def __init__(self, translator: FileTranslator, lines: list[str], start: int,
                 emit: Callable[[int, Translation | None, Failure | None], None], progress: Progress) -> None:
        self.t, self.lines, self.emit, self.progress = translator, lines, emit, progress
        self.ready: dict[int, tuple[Translation | None, Failure | None]] = {}
        self.next_out = start  # the first line not emitted yet
        self.pos = start  # the first line no worker has taken yet
        self.singles: list[int] = []  # heap: lines of rejected batches, to send one by one
        self.changed = asyncio.Event()  # a line settled or singles grew: waiting workers look again

    def settle(self, i: int, t: Translation | None, failure: Failure | None = None) -> None:
        self.ready[i] = (t, failure)
        while self.next_out in self.ready:
            t, f = self.ready.pop(self.next_out)
            if f:
                self.t.failures.append(f)
            self.emit(self.next_out, t, f)
            self.next_out += 1
            self.progress.update(done=1)
        self.t.most_held = max(self.t.most_held, len(self.ready))
        self.changed.set()

    def take(self) -> list[int] | None:
        """The next lines to send, or None when there is nothing to start now. Lines that
        need no round trip (blank, or longer than the server takes) settle on the way."""
        if self.singles:
            return [heapq.heappop(self.singles)]
        batch: list[int] = []
        if self.pos - self.next_out >= self.t.ahead:
            return None
        n, limit = len(self.lines), self.t.max_chars
        while self.pos < n and len(batch) < self.t.batch and self.pos - self.next_out < self.t.ahead + self.t.batch:
            i, text = self.pos, self.lines[self.pos]
            self.pos += 1
            if not text.strip():
                self.settle(i, None)
            elif limit and len(text) > limit:
                too_long = f"{len(text)} characters; the limit is {limit}"
                self.settle(i, None, Failure(i + 1, "INVALID_ARGUMENT", too_long))
            else:
                batch.append(i)
        return batch or None

    async def send(self, indices: list[int]) -> None:
        job = self.t.job
        texts = [self.lines[i] for i in indices]
        try:
            # A file is bulk work: the server admits a person's one-sentence requests ahead of it.
            result = await self.t.client.translate(texts, job.source, job.target, model=job.model,
                                                   timeout=job.timeout, priority=pb.PRIORITY_BULK, **job.options)
        except TranslationError as e:
            if e.code != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            if len(indices) == 1:
                self.settle(indices[0], None, Failure(indices[0] + 1, e.code.name, _strip_index(e.details)))
            else:
                for i in indices:
                    heapq.heappush(self.singles, i)
                self.changed.set()
            return
        if len(result) != len(indices):
            raise TranslationError(grpc.StatusCode.INTERNAL,
                                   f"the server answered {len(result)} translations for {len(indices)} texts")
        self.progress.update(counted=len(indices))
        for i, t in zip(indices, result):
            self.settle(i, t)

    async def worker(self) -> None:
        while self.next_out < len(self.lines):
            indices = self.take()
            if indices:
                await self.send(indices)
            elif self.next_out < len(self.lines):  # everything left is in flight elsewhere, or too far ahead
                self.changed.clear()
                await self.changed.wait()

    async def run(self) -> None:
        workers = [asyncio.create_task(self.worker()) for _ in range(self.t.job.in_flight)]
        try:
            done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)


def _strip_index(message: str) -> str:
    """``texts[0]: 600 characters; ...`` -> ``600 characters; ...``, ``texts[0], sentence 2 of 3
    ...`` -> ``sentence 2 of 3 ...`` (the line number says which)."""
    for prefix in ("texts[0]: ", "texts[0], "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


# ---------------------------------------------------------------- the output file
class OutputError(Exception):
    """Writing the output failed (a full disk, say); the message names the file and the reason."""


@contextlib.contextmanager
def _writing(what: Path | str) -> Iterator[None]:
    """OSError (ENOSPC, EIO, ...) -> OutputError naming ``what``."""
    try:
        yield
    except OSError as e:
        raise OutputError(f"cannot write {what}: {e.strerror or e}") from None


class OutputLock:
    """OUTPUT.lock, locked (flock, exclusive) by the run that writes OUTPUT and OUTPUT.partial,
    holding that run's pid: a second run on the same output (a --resume started while the first
    still runs) is refused rather than appending to the same file. The system drops the lock when
    the process ends, even killed, so a lock file a killed run left behind holds nothing."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.path = output.with_name(output.name + ".lock")
        self.fd = -1

    def __enter__(self) -> OutputLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").split("\n")[0].strip()
                os.close(fd)
                holder = holder or f"it holds {self.path}"
                raise UsageError(f"another nmt-translate run is writing {self.output} ({holder}); wait for it to "
                                 "end, or stop it, before running this") from None
            # The run before may have removed the file (and a third made it anew) between our open and
            # our lock: hold the lock of the file that is at the path, or try again.
            with contextlib.suppress(FileNotFoundError):
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            os.close(fd)
        self.fd = fd
        with contextlib.suppress(OSError):  # who holds it, for the message above: best effort (a full disk)
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still locked, so no other run locks the file being removed
            os.close(self.fd)
            self.fd = -1


class PartialOutput:
    """OUTPUT.partial written in order, with OUTPUT.partial.json saying what it is a translation of,
    and OUTPUT.errors.tsv (``line<TAB>code<TAB>message``) listing the failed lines among those
    written, each appended and flushed as its (empty) output line is written. On ``--resume`` the
    rows of lines that made it into OUTPUT.partial are kept (``earlier_failures``) and the rest
    dropped: those lines are translated again and report again."""

    def __init__(self, output: Path, meta: dict, resume: bool, overwrite: bool) -> None:
        self.output = output
        self.partial = output.with_name(output.name + ".partial")
        self.meta_path = output.with_name(output.name + ".partial.json")
        self.errors_path = output.with_name(output.name + ".errors.tsv")
        self.done = 0
        self.earlier_failures: list[Failure] = []
        if resume and self.partial.exists():
            old = json.loads(self.meta_path.read_text()) if self.meta_path.exists() else {}
            diff = [k for k in meta if old.get(k) != meta[k]]
            if diff:
                raise UsageError(f"--resume: {self.partial} was made with a different {', '.join(diff)}; "
                                 "start over with --overwrite")
            self.done = self._complete_lines()
            if self.done > meta["lines"]:
                raise UsageError(f"--resume: {self.partial} has more lines than the input")
            self.earlier_failures = self._keep_failures(self.done)
        elif self.partial.exists() and not overwrite:
            raise UsageError(f"{self.partial} is left from an interrupted run: continue it with --resume "
                             "or start over with --overwrite")
        else:
            with _writing(self.partial):
                self.partial.write_bytes(b"")
            self.errors_path.unlink(missing_ok=True)
        with _writing(self.meta_path):
            self.meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        with _writing(self.partial):
            self.file = self.partial.open("a", encoding="utf-8", newline="\n")
        self.errors: TextIO | None = None  # opened at the first failure

    def _complete_lines(self) -> int:
        """Lines that end in a newline; a torn last line (the run died mid-write) is cut off."""
        data = self.partial.read_bytes()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            with self.partial.open("r+b") as f:
                f.truncate(end)
        return data.count(b"\n", 0, end)

    def _keep_failures(self, done: int) -> list[Failure]:
        """The earlier run's failures of lines 1..done (once each); the file is rewritten to hold
        just those. A torn last row, or a row of a line after ``done``, is dropped."""
        if not self.errors_path.exists():
            return []
        kept: dict[int, Failure] = {}
        for row in self.errors_path.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]:
            fields = row.split("\t", 2)
            if len(fields) == 3 and fields[0].isdigit() and 1 <= int(fields[0]) <= done:
                kept.setdefault(int(fields[0]), Failure(int(fields[0]), fields[1], fields[2]))
        failures = sorted(kept.values(), key=lambda x: x.line)
        if failures:
            tmp = self.errors_path.with_name(self.errors_path.name + ".tmp")
            tmp.write_text("".join(_error_row(x) for x in failures), encoding="utf-8")
            os.replace(tmp, self.errors_path)
        else:
            self.errors_path.unlink()
        return failures

    def write(self, line: str) -> None:
        with _writing(self.partial):
            self.file.write(line + "\n")

    def flush(self) -> None:
        with _writing(self.partial):
            self.file.flush()

    def record_failure(self, failure: Failure) -> None:
        with _writing(self.errors_path):
            if self.errors is None:
                self.errors = self.errors_path.open("a", encoding="utf-8", newline="\n")
            self.errors.write(_error_row(failure))
            self.errors.flush()

    def finish(self) -> None:
        with _writing(self.partial):
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
        if self.errors is not None:
            with _writing(self.errors_path):
                os.fsync(self.errors.fileno())
                self.errors.close()
        with _writing(self.output):
            os.replace(self.partial, self.output)
        self.meta_path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close what is open, keeping what was written; a write that fails now (the disk is still
        full) loses only lines that --resume translates again."""
        for f in (self.file, self.errors):
            if f is not None and not f.closed:
                with contextlib.suppress(OSError):
                    f.close()


class _Stdout:
    """Standard output for the file translator: a write that fails is an OutputError."""

    @staticmethod
    def write(text: str) -> None:
        with _writing("to standard output"):
            sys.stdout.write(text)

    @staticmethod
    def flush() -> None:
        with _writing("to standard output"):
            sys.stdout.flush()


def _error_row(x: Failure) -> str:
    message = x.message.replace("\t", " ").replace("\r", " ").replace("\n", " ")
    return f"{x.line}\t{x.code}\t{message}\n"


# ---------------------------------------------------------------- commands
def _model_limits(conn: Connection, job: FileSettings, beam_given: bool,
                  quiet: bool = False) -> tuple[FileSettings, int, int]:
    """Reach the server (within FIRST_CONTACT_SECONDS: a wrong address fails in seconds, not
    after --timeout of retries), wait (within --timeout) for it to have its models if it is still
    loading them, and check the pair against what it serves; return the job (the default beam
    within the server's largest, unless --beam was given), the most characters per text and
    texts per request."""
    def waiting() -> None:
        if not quiet:
            print(f"nmt-translate: the server is loading its models; waiting up to {job.timeout:g} s",
                  file=sys.stderr, flush=True)

    with TranslatorClient(connection=conn, timeout=job.timeout) as probe:
        models = probe.ready_models(job.timeout, first_contact=FIRST_CONTACT_SECONDS, on_wait=waiting)
    try:
        chosen = served_model(models, job.source, job.target, job.model)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not beam_given and chosen.max_beam_size:
        job = dataclasses.replace(job, beam_size=min(job.beam_size, chosen.max_beam_size))
    return job, chosen.max_chars_per_text, chosen.max_texts_per_request


def translate_file(args: argparse.Namespace, conn: Connection, job: FileSettings) -> int:
    if is_document(args.input):
        return _translate_document(args, conn, job)
    if args.resume and not args.output:
        raise UsageError("--resume needs -o/--output (standard output cannot be resumed)")
    if not args.output:
        return _translate_file(args, conn, job)
    with OutputLock(Path(args.output)):  # before anything is read or written: one run per output
        return _translate_file(args, conn, job)


def _translate_file(args: argparse.Namespace, conn: Connection, job: FileSettings) -> int:
    raw = Path(args.input).read_bytes() if args.input and args.input != "-" else sys.stdin.buffer.read()
    try:
        lines = split_lines(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{args.input or 'stdin'} is not UTF-8 text: {e}") from None
    job, max_chars, max_texts = _model_limits(conn, job, args.beam is not None, args.quiet)
    notice = _retry_notice(job.timeout)
    meta = {"input_sha256": hashlib.sha256(raw).hexdigest(), "lines": len(lines), "source": job.source,
            "target": job.target, "model": job.model, "beam_size": job.beam_size, "nbest": job.nbest,
            "max_output_tokens": job.max_output_tokens, "split": job.split}
    out = PartialOutput(Path(args.output), meta, args.resume, args.overwrite) if args.output else None
    start = out.done if out else 0
    quiet = args.quiet
    earlier = out.earlier_failures if out else []
    if out and start and not quiet:
        failed = f" ({len(earlier)} of them failed, listed in {out.errors_path})" if earlier else ""
        print(f"resuming: {start} of {len(lines)} lines already done{failed}; translating the other "
              f"{len(lines) - start}", file=sys.stderr)
    progress = Progress(len(lines) - start, enabled=not quiet)

    limited: list[int] = []  # lines (1-based) whose translation the length limit stopped

    def emit(i: int, t: Translation | None, failure: Failure | None) -> None:
        if t is not None and t.length_limited:
            limited.append(i + 1)
        line = format_translation(t, job.nbest)
        if out:
            out.write(line)
            if failure:
                out.record_failure(failure)
        else:
            _Stdout.write(line + "\n")

    async def run() -> FileTranslator:
        async with AsyncTranslatorClient(connection=conn, timeout=job.timeout, on_retry=notice) as c:
            translator = FileTranslator(c, job, max_chars, max_texts)
            work = asyncio.create_task(translator.run(lines, start, emit, progress))
            flusher = asyncio.create_task(_flush_every(out or _Stdout, 0.5))
            try:  # the flusher ends only when a flush fails (OutputError): that stops the work too
                await asyncio.wait({work, flusher}, return_when=asyncio.FIRST_COMPLETED)
                if flusher.done():
                    flusher.result()
                work.result()
            finally:
                for task in (work, flusher):
                    task.cancel()
                await asyncio.gather(work, flusher, return_exceptions=True)
                (out or _Stdout).flush()
            return translator

    try:
        translator = asyncio.run(run())
        if out:
            out.finish()
    except OutputError as e:  # a full disk, say: one line, and what to do
        if out:
            out.close()
        else:  # what standard output still buffers would fail again at exit, with a traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        progress.close()
        resume = f"; the lines finished so far are in {out.partial}: make room and run the same command with " \
                 "--resume to translate the rest" if out else ""
        print(f"nmt-translate: error: {e}{resume}", file=sys.stderr)
        return EXIT_STOPPED
    except (TranslationError, KeyboardInterrupt) as e:
        if out:
            out.close()
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)
        progress.close()
        print(f"stopped: {why}", file=sys.stderr)
        if out:
            print(f"the lines finished so far are in {out.partial}; run the same command with --resume to "
                  "translate the rest", file=sys.stderr)
        return EXIT_STOPPED
    progress.close()
    warn_length_limited(limited, "line")
    failures = earlier + translator.failures  # both in line order, the earlier run's lines first
    return report_failures(failures, out.errors_path if out else None)


def _translate_document(args: argparse.Namespace, conn: Connection, job: FileSettings) -> int:
    """A document (clients/translate_document.py), translated whole into -o (or standard output)."""
    if args.resume:
        raise UsageError(f"--resume continues a text file translated line by line; {args.input} is a document, "
                         "translated whole: run the command again without --resume")
    if job.nbest > 1:
        raise UsageError("--nbest writes each line's hypotheses with their scores; a document takes one translation")
    job, max_chars, max_texts = _model_limits(conn, job, args.beam is not None, args.quiet)
    output = Path(args.output) if args.output else None
    try:
        with OutputLock(output) if output else contextlib.nullcontext(), _writing(output or "to standard output"):
            translate_document(Path(args.input), output, {"connection": conn, "timeout": job.timeout}, job, max_chars,
                               max_texts, args.quiet, _retry_notice(job.timeout))
    except OutputError as e:
        print(f"nmt-translate: error: {e}", file=sys.stderr)
        return EXIT_STOPPED
    return EXIT_OK


def report_failures(failures: list[Failure], errors_path: Path | None) -> int:
    """The failed lines on stderr (the first 20) and the exit status: EXIT_FAILED_LINES if any."""
    if not failures:
        return EXIT_OK
    where = f" (all listed in {errors_path})" if errors_path else ""
    print(f"{len(failures)} line(s) could not be translated and were left empty{where}:", file=sys.stderr)
    for x in failures[:20]:
        print(f"  line {x.line}: {x.code}: {x.message}", file=sys.stderr)
    if len(failures) > 20:
        print(f"  ... and {len(failures) - 20} more", file=sys.stderr)
    return EXIT_FAILED_LINES


def _retry_notice(timeout: float, every: float = 10.0) -> OnRetry:
    """A line on stderr when a call is retried (at most one every ``every`` seconds), so that a
    wait for a restarting server (or a wrong address) does not pass in silence."""
    last = -every

    def notice(error: TranslationError, _delay: float) -> None:
        nonlocal last
        if time.monotonic() - last >= every:
            last = time.monotonic()
            print(f"nmt-translate: {error}; retrying until the --timeout of {timeout:g} s is used up",
                  file=sys.stderr, flush=True)

    return notice


async def _flush_every(stream, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        stream.flush()


def translate_texts(args: argparse.Namespace, conn: Connection, job: FileSettings) -> int:
    attention = bool(args.attention_png)
    if attention and len(args.texts) != 1:
        raise UsageError("--attention-png draws one sentence: give exactly one text")
    job = _model_limits(conn, job, args.beam is not None, args.quiet)[0]
    with TranslatorClient(connection=conn, timeout=job.timeout, on_retry=_retry_notice(job.timeout)) as client:
        result = client.translate(args.texts, job.source, job.target, model=job.model, timeout=job.timeout,
                                  return_attention=attention, **job.options)
    for t in result:
        print(format_translation(t, job.nbest))
    warn_length_limited([i + 1 for i, t in enumerate(result) if t.length_limited], "text")
    if attention:
        from clients.attention import draw_attention

        t, source = result[0], args.texts[0]
        hyp = t.hypotheses[0]
        if len(t.segments) > 1:  # a matrix is per sentence
            print(f"nmt-translate: the text has {len(t.segments)} sentences; drawing the first", file=sys.stderr)
            hyp, source = t.segments[0].hypotheses[0], t.segments[0].source
        m = draw_attention(hyp, args.attention_png, title=f"{job.source}: {source}\n{job.target}: {hyp.text}")
        print(f"wrote {args.attention_png} ({m.shape[0]} target x {m.shape[1]} source pieces)", file=sys.stderr)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-translate", description=__doc__,
                       epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL))
    p.add_argument("texts", nargs="*", help="texts to translate (otherwise -i FILE or standard input)")
    p.add_argument("-s", "--source", required=True, type=language, help="source language, e.g. en")
    p.add_argument("-t", "--target", required=True, type=language, help="target language, e.g. de")
    p.add_argument("-i", "--input", help="a UTF-8 file, one sentence a line; '-' is standard input (default: "
                   f"standard input, when no texts are given); a document ({', '.join(DOCUMENT_EXTENSIONS)}) is "
                   "translated whole, its format kept")
    p.add_argument("-o", "--output", help="write here, atomically, into an existing folder (default: standard "
                   "output)")
    p.add_argument("--resume", action="store_true", help="continue OUTPUT.partial left by an interrupted run")
    p.add_argument("--overwrite", action="store_true", help="discard OUTPUT.partial and start over")
    add_connection_arguments(p)
    p.add_argument("--model", default="", help="model name, when the server has several (default: the "
                   "server's first)")
    p.add_argument("--beam", type=int, help=f"beam size, 1: greedy (default: {BEAM_SIZE}, the web page's and the "
                   f"HTTP API's, at most the server's largest)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per line, written as text<TAB>score<TAB>stop "
                   "reason columns (end_of_sentence, or length_limit: may be cut short)")
    p.add_argument("--max-output-tokens", type=int, default=0, help="most target tokens per sentence (default: "
                   "the server's, which leaves room for the longest natural translations)")
    p.add_argument("--no-split", dest="split", action="store_false", help="translate each line or text as one "
                   "sentence (default: the server splits it into sentences and joins their translations)")
    p.add_argument("--batch-lines", type=int, default=32, help="lines per request")
    p.add_argument("--in-flight", type=int, default=4, help="requests open at once")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request, retries included: a "
                   "server that is unavailable or busy is retried (backoff up to 2 s) until this is used up")
    p.add_argument("--attention-png", help="draw the cross-attention of one text's translation to this PNG "
                   "(default: none)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        for name in ("beam", "nbest", "batch_lines", "in_flight"):
            if getattr(args, name) is not None and getattr(args, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if args.timeout <= 0:
            raise UsageError(f"--timeout must be more than 0 seconds, not {args.timeout:g}")
        if args.texts and args.input:
            raise UsageError("give texts or -i FILE, not both")
        if args.beam is not None and args.nbest > args.beam > 1:
            raise UsageError(f"--nbest {args.nbest} is more than --beam {args.beam}")
        if args.input and args.input != "-":
            check_input_file(args.input, "-i/--input", "a UTF-8 text file, one sentence a line")
        if args.output:
            check_output_file(args.output, "-o/--output")
        if args.attention_png:
            check_output_file(args.attention_png, "--attention-png")
        conn = connection(args)
        if args.max_output_tokens < 0:
            raise UsageError(f"--max-output-tokens must be 0 (the server's default) or more, not "
                             f"{args.max_output_tokens}")
        job = FileSettings(args.source, args.target, args.model, args.beam or BEAM_SIZE, args.nbest, args.batch_lines,
                  args.in_flight, args.timeout, args.max_output_tokens, args.split)
        if args.texts:
            return translate_texts(args, conn, job)
        if args.attention_png:
            raise UsageError("--attention-png needs the text on the command line")
        return translate_file(args, conn, job)
    except UsageError as e:
        return fail("nmt-translate", str(e), EXIT_USAGE)
    except TranslationError as e:
        return fail("nmt-translate", explain(e, args), EXIT_USAGE if e.code == grpc.StatusCode.INVALID_ARGUMENT
                    else EXIT_FAILED)
    except KeyboardInterrupt:
        return fail("nmt-translate", "interrupted", EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
