"""The document formats by file extension: what reads each, the media type it is served with,
and the list that /frontend/settings reports (LibreTranslate's ``supportedFilesFormat``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

from documents.document import Document, DocumentError, Limits


@dataclass(frozen=True)
class Format:
    media_type: str
    read: Callable[[bytes, Limits], Document]


def _text(data: bytes, limits: Limits) -> Document:
    from documents.text_file import TextFile

    return TextFile(data)


def _html(data: bytes, limits: Limits) -> Document:
    from documents.html_file import HtmlFile

    return HtmlFile(data, limits)


def _markdown(data: bytes, limits: Limits) -> Document:
    from documents.markdown_file import MarkdownFile

    return MarkdownFile(data)


def _subtitles(kind: str) -> Callable[[bytes, Limits], Document]:
    def read(data: bytes, limits: Limits) -> Document:
        from documents.subtitles import SubtitleFile

        return SubtitleFile(data, kind)

    return read


def _docx(data: bytes, limits: Limits) -> Document:
    from documents.docx_file import DocxFile

    return DocxFile(data, limits)


def _odt(data: bytes, limits: Limits) -> Document:
    from documents.odt_file import OdtFile

    return OdtFile(data, limits)


# Each reader imports its library when a file of its kind comes (python-docx, odfpy and
# markdown-it-py cost nothing until then).
FORMATS: dict[str, Format] = {
    ".txt": Format("text/plain; charset=utf-8", _text),
    ".html": Format("text/html; charset=utf-8", _html),
    ".htm": Format("text/html; charset=utf-8", _html),
    ".md": Format("text/markdown; charset=utf-8", _markdown),
    ".srt": Format("application/x-subrip; charset=utf-8", _subtitles(".srt")),
    ".vtt": Format("text/vtt; charset=utf-8", _subtitles(".vtt")),
    ".docx": Format("application/vnd.openxmlformats-officedocument.wordprocessingml.document", _docx),
    ".odt": Format("application/vnd.oasis.opendocument.text", _odt),
}
EXTENSIONS = tuple(FORMATS)  # as LibreTranslate lists them: with the dot
DEFAULT_LIMITS = Limits()


def extension(name: str) -> str:
    """The file name's extension, lower case, with its dot ("" when it has none)."""
    return PurePath(name).suffix.lower()


def supported(name: str) -> bool:
    return extension(name) in FORMATS


def read_document(name: str, data: bytes, limits: Limits = DEFAULT_LIMITS) -> Document:
    """The document in ``data``, read by the format its name's extension says; DocumentError
    when the format is not supported, the file is larger than ``limits.max_bytes``, or it
    cannot be read."""
    kind = extension(name)
    if kind not in FORMATS:
        raise DocumentError(f"{kind or 'a file without an extension'} is not a supported format; supported: "
                            f"{', '.join(EXTENSIONS)}")
    if len(data) > limits.max_bytes:
        raise DocumentError(f"the file is {len(data)} bytes, more than the limit of {limits.max_bytes} bytes")
    return FORMATS[kind].read(data, limits)


def media_type(name: str) -> str:
    fmt = FORMATS.get(extension(name))
    return fmt.media_type if fmt else "application/octet-stream"
