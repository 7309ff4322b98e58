"""LibreTranslate's file translation, the gateway's side: the upload as LibreTranslate takes it,
the limits a document is held to, and the store of translated files behind /download_file.

POST /translate_file takes a multipart form: ``file``, ``source`` (``auto``: told from the
document's text), ``target`` and ``api_key``, and answers ``{"translatedFileUrl":
"http://HOST/download_file/NAME"}``; GET /download_file/NAME gives the file back as an
attachment named as LibreTranslate names it (``report_de.docx`` for ``report.docx`` into
German), with its format's media type. The formats are documents/'s.

The store is a folder (--files-dir, else a private one made at start and removed at exit).
A stored file's name is a random token of 32 hex digits, a dot and its download name made
safe (letters, digits, ``.``, ``_`` and ``-`` only): a name of any other shape is not looked up
at all (404), so no name reaches outside the folder. Files older than --files-ttl are removed
whenever a file is stored or fetched, and an expired one is 404 even before that.
A document is translated whole or refused: the first segment that fails fails the request
with the reason and where ("paragraph 12: ..."); nothing is stored half translated.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from starlette.datastructures import UploadFile
from starlette.requests import Request

from documents.document import Segment
from documents.formats import EXTENSIONS, extension, supported

TOKEN_HEX = 32  # 128 random bits
STORED_NAME = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}\.[A-Za-z0-9][A-Za-z0-9._-]{{0,200}}")
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
FIELDS = ("source", "target", "api_key")  # the form's fields besides the file


class FileError(Exception):
    """A refusal with LibreTranslate's status and message (the app answers ``{"error": ...}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Form:
    fields: dict[str, str]  # source, target, api_key: the query string's, the form's over them
    file: UploadFile | None


@dataclass(frozen=True)
class Upload:
    name: str  # the file's name as sent (its extension picks the format)
    data: bytes
    fields: dict[str, str]


async def read_form(request: Request) -> Form:
    """The fields and the file of /translate_file's multipart form (read before anything is
    checked: the API key is among the fields)."""
    fields = {k: v for k, v in request.query_params.items() if k in FIELDS}
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    file = None
    if media in ("multipart/form-data", "application/x-www-form-urlencoded"):
        form = await request.form(max_files=1, max_fields=20, max_part_size=64 * 1024)
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                file = value if key == "file" else file
            elif key in FIELDS:
                fields[key] = value
    return Form(fields, file)


async def upload(form: Form, max_bytes: int) -> Upload:
    """The file of the form, checked in LibreTranslate's order and words: a missing file, source
    or target, an empty file name, a format none reads (named, with the ones read), and a file
    over ``max_bytes`` (naming the limit)."""
    if form.file is None:
        raise FileError(400, "Invalid request: missing file parameter")
    for name in ("source", "target"):
        if not form.fields.get(name):
            raise FileError(400, f"Invalid request: missing {name} parameter")
    name = PurePath(form.file.filename or "").name
    if not name:
        raise FileError(400, "Invalid request: empty file")
    if not supported(name):
        raise FileError(400, f"Invalid request: file format not supported ({extension(name) or 'no extension'}; "
                             f"supported: {', '.join(EXTENSIONS)})")
    data = await form.file.read(max_bytes + 1)
    await form.file.close()
    if len(data) > max_bytes:
        raise FileError(400, f"Invalid request: the file is larger than this gateway's limit of {max_bytes} bytes "
                             f"(--max-file-bytes)")
    return Upload(name, data, form.fields)


def check_segments(segments: Sequence[Segment], max_chars_per_text: int, max_file_chars: int) -> None:
    """LibreTranslate's 400 for too much text: a segment over the model's characters per text
    (named by where it is), or a document over the gateway's characters per file."""
    total = sum(len(s.text) for s in segments)
    if max_file_chars and total > max_file_chars:
        raise FileError(400, f"Invalid request: request ({total}) exceeds text limit ({max_file_chars}): the file "
                             f"holds more characters to translate than this gateway's --max-file-chars")
    if max_chars_per_text:
        for s in segments:
            if len(s.text) > max_chars_per_text:
                raise FileError(400, f"Invalid request: {s.where}: request ({len(s.text)}) exceeds text limit "
                                     f"({max_chars_per_text})")


def download_name(name: str, target: str) -> str:
    """LibreTranslate's name for the translation of ``name``: ``report.docx`` -> ``report_de.docx``,
    made safe for a file name and a header (ASCII letters, digits, ".", "_", "-")."""
    path = PurePath(name)
    stem = UNSAFE.sub("_", path.stem).strip("._") or "file"
    return f"{stem[:150]}_{UNSAFE.sub('', target)[:20]}{UNSAFE.sub('', path.suffix)}"


class FileStore:
    """Translated files waiting to be downloaded, for ``ttl`` seconds each."""

    def __init__(self, directory: str, ttl: float) -> None:
        self.ttl = ttl
        self.own = not directory  # a folder of its own, removed by close()
        self.path = Path(tempfile.mkdtemp(prefix="nmt-http-files-")) if self.own else Path(directory)
        if not self.own:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)

    def put(self, data: bytes, name: str) -> str:
        """Store ``data``; the stored name (the token, a dot, ``name``) for /download_file."""
        self.sweep()
        stored = f"{secrets.token_hex(TOKEN_HEX // 2)}.{name}"
        partial = self.path / f".{stored}.partial"
        with open(partial, "xb") as f:
            f.write(data)
        os.replace(partial, self.path / stored)  # never seen half written
        return stored

    def get(self, stored: str) -> tuple[Path, str] | None:
        """(the file, its download name), or None when the name is not of a stored file's shape,
        there is no such file, or it has expired."""
        self.sweep()
        if not STORED_NAME.fullmatch(stored):
            return None
        path = self.path / stored
        try:
            if time.time() - path.stat().st_mtime > self.ttl or not path.is_file():
                return None
        except OSError:
            return None
        return path, stored[TOKEN_HEX + 1:]

    def sweep(self) -> None:
        """Remove the files older than the TTL (and partial ones left by a crash)."""
        now = time.time()
        with contextlib.suppress(OSError), os.scandir(self.path) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime > self.ttl:
                        os.unlink(entry.path)

    def close(self) -> None:
        if self.own:
            shutil.rmtree(self.path, ignore_errors=True)
