"""Debian packages as a data source: fetched by name with ``apt-get download`` and unpacked
with the standard library (a .deb is an ``ar`` archive holding ``data.tar.*``), into a cache.

Nothing here installs a package or needs root: ``apt-get download`` only writes the .deb into
the working directory. Where apt is not available (another distribution, a container without
package lists), put the .deb files in the cache's ``debs/`` folder by hand and the readers use
them; the error says exactly that.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

from cli import UsageError

CACHE_ENV = "NMT_CACHE"  # where fetched packages and built corpora live
DOWNLOAD_BATCH = 40  # packages per ``apt-get download`` call
_VERSION = re.compile(r"^[^_]+_([^_]+)_")


# The data reserved for independent evaluation (DESIGN.md) is never downloaded: every reader names
# its packages in a list reviewed by hand, and the one that chooses them from apt's indices (debconf)
# takes only server and tool sections, no desktop's.


class PackageUnavailable(UsageError):
    """apt-get is here but could not download the package (not in this release's indices)."""


def cache_dir() -> Path:
    """``$NMT_CACHE``, else ``$XDG_CACHE_HOME/nmt-transformer``, else ``~/.cache/nmt-transformer``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "nmt-transformer"


def _ar_members(data: bytes) -> dict[str, bytes]:
    """The members of an ``ar`` archive (the .deb container format)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive (a .deb starts with '!<arch>')")
    out, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        out[name] = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)  # members are 2-byte aligned
    return out


def find_deb(name: str, debs: Path) -> Path | None:
    found = sorted(debs.glob(f"{name}_*.deb"))
    return found[-1] if found else None


def package_version(deb: Path) -> str:
    """The version in a .deb's file name (``name_1%3a2.0-1_all.deb`` -> ``1:2.0-1``)."""
    m = _VERSION.match(deb.name)
    return m.group(1).replace("%3a", ":") if m else ""


def fetch_debs(names: Iterable[str], cache: Path | None = None) -> dict[str, Path]:
    """The .deb of every package in ``names`` that apt can download, fetched in batches (one
    ``apt-get download`` per batch, one per package where a batch fails); those it cannot are
    named on stderr and left out."""
    debs = (cache or cache_dir()) / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(names))
    missing = [n for n in names if find_deb(n, debs) is None]
    if missing and shutil.which("apt-get"):
        for i in range(0, len(missing), DOWNLOAD_BATCH):
            batch = missing[i:i + DOWNLOAD_BATCH]
            proc = subprocess.run(["apt-get", "download", "-q", *batch], cwd=debs, capture_output=True, text=True)
            if proc.returncode:  # one unknown name fails the whole call: try them one by one
                for name in batch:
                    if find_deb(name, debs) is None:
                        subprocess.run(["apt-get", "download", "-q", name], cwd=debs, capture_output=True)
    out = {}
    for name in names:
        found = find_deb(name, debs)
        if found is None:
            print(f"corpus: Debian package {name} could not be downloaded; left out", file=sys.stderr)
        else:
            out[name] = found
    return out


def fetch_deb(name: str, cache: Path | None = None) -> Path:
    """The .deb of package ``name`` in the cache, downloaded with ``apt-get download`` if absent."""
    debs = (cache or cache_dir()) / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = find_deb(name, debs)
    if found:
        return found
    if not shutil.which("apt-get"):
        raise UsageError(f"Debian package {name} is needed and apt-get is not here: put {name}_*.deb into {debs}")
    proc = subprocess.run(["apt-get", "download", "-q", name], cwd=debs, capture_output=True, text=True)
    found = find_deb(name, debs)
    if proc.returncode or not found:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise PackageUnavailable(f"apt-get download {name} failed ({detail[-1] if detail else 'no output'}); run "
                         f"'apt-get update' once, or put {name}_*.deb into {debs}")
    return found


def _files_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, with links left out instead of failing the whole package
    (packages link to absolute paths such as ``/usr/sbin/rmt``; the readers need files only)."""
    if member.issym() or member.islnk():
        return None
    return tarfile.data_filter(member, dest)


def unpacked(name: str, cache: Path | None = None) -> Path:
    """The root of the package's files (``usr/...``), unpacked once into the cache."""
    cache = cache or cache_dir()
    deb = fetch_deb(name, cache)
    return _unpack(deb, cache / "unpacked" / deb.stem, lambda path: True)


def extracted(name: str, select: Callable[[str], bool], label: str, cache: Path | None = None) -> Path:
    """The root of the package's files whose path (``usr/...``) ``select`` accepts, unpacked once
    into the cache under ``label`` (one label per kind of selection): a few catalogs out of a
    package of hundreds of megabytes."""
    cache = cache or cache_dir()
    deb = fetch_deb(name, cache)
    return _unpack(deb, cache / "extracted" / label / deb.stem, select)


def _unpack(deb: Path, root: Path, select: Callable[[str], bool]) -> Path:
    """The files of ``deb``'s data archive whose path ``select`` accepts, under ``root``, once
    (a ``.complete`` marker; a half-done unpack is redone)."""
    done = root / ".complete"
    if done.exists():
        return root
    members = _ar_members(deb.read_bytes())
    data_name = next((n for n in members if n.startswith("data.tar")), None)
    if data_name is None:
        raise ValueError(f"{deb} holds no data.tar member")
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(members[data_name])) as tar:
        for member in tar:
            if member.isfile() and select(member.name.removeprefix("./")):
                tar.extract(member, tmp, filter=_files_only)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    done.touch()
    return root


def control_file(name: str, member: str, cache: Path | None = None) -> bytes | None:
    """One file of the package's control archive (``templates``, ``control``), or None."""
    deb = fetch_deb(name, cache)
    members = _ar_members(deb.read_bytes())
    control_name = next((n for n in members if n.startswith("control.tar")), None)
    if control_name is None:
        raise ValueError(f"{deb} holds no control.tar member")
    with tarfile.open(fileobj=io.BytesIO(members[control_name])) as tar:
        for info in tar:
            if info.isfile() and info.name.removeprefix("./") == member:
                f = tar.extractfile(info)
                return f.read() if f else None
    return None


_FREE_FORM = ((r"GNU (?:Lesser|Library) General Public License|\bLGPL", "LGPL"),
              (r"GNU General Public License|\bGPL", "GPL"), (r"Mozilla Public License", "MPL"),
              (r"Apache License", "Apache"), (r"Artistic License", "Artistic"),
              (r"Creative Commons", "CC"), (r"\bBSD\b", "BSD"), (r"\bMIT\b|\bExpat\b", "Expat"))


def license_of(copyright_text: str) -> str:
    """The licence a machine-readable copyright file (DEP-5) gives its ``Files: *`` stanza (else
    its first ``License:``); for a free-form file the first licence it names, marked as such;
    "" where none is named."""
    if not copyright_text.startswith(("Format:", "Format-Specification:")):
        found = [(m.start(), name) for pattern, name in _FREE_FORM if (m := re.search(pattern, copyright_text))]
        return f"{min(found)[1]} (free-form copyright file)" if found else ""
    first = ""
    for stanza in re.split(r"\n\s*\n", copyright_text):
        fields = dict(re.findall(r"^(Files|License):[ \t]*(.*)$", stanza, re.M))
        if "License" not in fields or not fields["License"].strip():
            continue
        first = first or fields["License"].strip()
        if fields.get("Files", "").split()[:1] == ["*"]:
            return fields["License"].strip()
    return first


def provenance(names: Iterable[str], select: Callable[[str], bool], label: str,
               cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of every package of ``names`` apt can fetch, its licence read from
    the copyright file among the files ``select`` extracts under ``label`` ("" where it is not
    machine-readable)."""
    return {package: (package_version(deb), package_license(extracted(package, select, label, cache), package))
            for package, deb in fetch_debs(names, cache).items()}


def package_license(root: Path, name: str) -> str:
    """The licence of an unpacked package, from ``usr/share/doc/{name}/copyright``; "" if unknown."""
    path = root / "usr/share/doc" / name / "copyright"
    return license_of(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else ""
