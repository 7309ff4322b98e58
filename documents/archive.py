"""The zip container of .docx and .odt files, checked before any library unpacks it: a file
that is no zip is corrupt, and one whose members would unpack to more than the limit (a zip
bomb: a few kilobytes that inflate to gigabytes) is refused by the sizes its directory
declares. Python's zipfile never inflates a member past its declared size (it checks the size
and the CRC as it reads), so the declared sizes bound what the format's library reads."""

from __future__ import annotations

import io
import zipfile

from documents.document import DocumentError, Limits


def check_zip(data: bytes, what: str, limits: Limits) -> None:
    """DocumentError naming the problem when ``data`` is no zip archive, has more members than
    ``limits.max_members`` or unpacks to more than ``limits.max_unpacked_bytes``."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise DocumentError(f"the {what} file is corrupt: it is not a zip archive as a {what} file is ({e})") \
            from None
    if len(members) > limits.max_members:
        raise DocumentError(f"the {what} file holds {len(members)} files, more than the limit of {limits.max_members}")
    unpacked = sum(m.file_size for m in members)
    if unpacked > limits.max_unpacked_bytes:
        raise DocumentError(f"the {what} file unpacks to {unpacked} bytes, more than the limit of "
                            f"{limits.max_unpacked_bytes} bytes")
