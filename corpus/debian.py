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
import shutil
import subprocess
import tarfile
from pathlib import Path

from cli import UsageError

CACHE_ENV = "NMT_CACHE"  # where fetched packages and built corpora live


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
        raise UsageError(f"apt-get download {name} failed ({detail[-1] if detail else 'no output'}); run "
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
    root = cache / "unpacked" / deb.stem
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
        tar.extractall(tmp, filter=_files_only)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    done.touch()
    return root
