"""``nmt-translate -i FILE.docx -o OUT.docx``: a document (.docx, .odt, .html, .htm, .md, .srt,
.vtt: the format by the input's extension) translated whole through the server, with the same
module the gateway's /translate_file uses (documents/): its structure and formatting kept,
its segments sent in batches as bulk work, and the output written only when every segment is
translated (OUTPUT.partial, renamed), never half. A segment the server refuses stops the run
naming it ("paragraph 12: ..."). Text files (.txt and any other name) keep nmt-translate's
line-by-line mode with --resume (clients/translate_file.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from cli import UsageError
from clients.client import AsyncTranslatorClient, OnRetry, TranslationError
from clients.progress import Progress
from documents.document import DocumentError, Segment
from documents.formats import EXTENSIONS, extension, read_document
from documents.translate import Batching, name_segment, translate_segments
from nmt.v1 import translator_pb2 as pb

DOCUMENT_EXTENSIONS = tuple(e for e in EXTENSIONS if e != ".txt")  # .txt stays line by line


def is_document(path: str | None) -> bool:
    return bool(path) and path != "-" and extension(str(path)) in DOCUMENT_EXTENSIONS


def translate_document(source_path: Path, output: Path | None, client_args: dict, job, max_chars: int,
                       max_texts: int, quiet: bool, notice: OnRetry) -> None:
    """Translate ``source_path`` into ``output`` (None: standard output). ``client_args``: what
    AsyncTranslatorClient takes (connection, timeout); ``job``: the run's FileSettings.
    UsageError for a file that cannot be read or a segment over ``max_chars``; TranslationError
    (its message naming the segment) when the server fails."""
    try:
        document = read_document(source_path.name, source_path.read_bytes())
    except DocumentError as e:
        raise UsageError(f"{source_path}: {e}") from None
    for s in document.segments:
        if max_chars and len(s.text) > max_chars:
            raise UsageError(f"{source_path}: {s.where}: {len(s.text)} characters; the server's limit is {max_chars}")
    progress = Progress(len(document.segments), unit="segments", rate_unit="segments/s", enabled=not quiet)

    async def run() -> list[pb.Translation]:
        async with AsyncTranslatorClient(on_retry=notice, **client_args) as client:
            async def call(segments: list[Segment], attention: bool) -> list[pb.Translation]:
                options = {**job.options, "return_attention": attention, "num_hypotheses": 1}
                try:
                    # A file is bulk work: the server admits a person's one-sentence requests ahead of it.
                    response = await client.translate_response([s.text for s in segments], job.source, job.target,
                                                               model=job.model, timeout=job.timeout,
                                                               priority=pb.PRIORITY_BULK, **options)
                except TranslationError as e:
                    raise TranslationError(e.code, name_segment(e.details, segments), e.attempts) from None
                progress.update(done=len(segments), counted=len(segments))
                return list(response.translations)

            batching = Batching(texts_per_call=max(1, min(job.batch_lines, max_texts or job.batch_lines)),
                                in_flight=job.in_flight)
            return await translate_segments(document.segments, call, batching)

    try:
        answers = asyncio.run(run())
    finally:
        progress.close()
    data = document.render(answers)
    if output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)  # bytes as they are (a .docx is binary)
        sys.stdout.buffer.flush()
        return
    partial = output.with_name(output.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, output)
