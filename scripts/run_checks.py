"""Checks scripts/run.sh makes before it starts a server (each prints why it fails):

    python scripts/run_checks.py port-free 127.0.0.1 50051        # exit 2 if something listens there
    python scripts/run_checks.py package-current PACKAGE CHECKPOINT  # exit 1 if it must be exported
    python scripts/run_checks.py package-unused PACKAGE           # exit 2 if a running nmt-serve serves it
    python scripts/run_checks.py listener-is PORT PID             # exit 1 if PORT is not PID's (Linux)

port-free needs only the standard library (run.sh calls it before .venv exists). Which
process listens on a port, or serves a package, is read from /proc (Linux); elsewhere
those two checks pass with a note.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2  # as cli.EXIT_* (this runs before the project is installed)
PROC = Path("/proc")


def port_free(host: str, port: int) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            pids = listening_pids(port)
            who = f" by pid {', '.join(map(str, sorted(pids)))}" if pids else ""
            print(f"run.sh: port {port} on {host} is already in use{who} ({e.strerror}); a server there would "
                  f"answer for the one this script starts. Stop it, or pick another port: "
                  f"PORT={port + 1} bash scripts/run.sh", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK


def listening_pids(port: int) -> set[int] | None:
    """The processes with a socket listening on ``port`` (None: cannot tell here). Processes of
    other users are left out (their file descriptors cannot be read)."""
    tables = [PROC / "net" / name for name in ("tcp", "tcp6")]
    if not any(t.exists() for t in tables):
        return None
    inodes = set()
    for table in tables:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                pids.add(int(proc.name))
        except OSError:  # gone, or another user's
            continue
    return pids


def listener_is(port: int, pid: int) -> int:
    pids = listening_pids(port)
    if pids is None:
        print("run.sh: cannot tell which process listens here (no /proc); trusting it", file=sys.stderr)
        return EXIT_OK
    if pid in pids:
        return EXIT_OK
    others = f"pid {', '.join(map(str, sorted(pids)))}" if pids else "another user's process"
    print(f"run.sh: port {port} answers, but from {others}, not from the server this script started "
          f"(pid {pid}); stop that process or pick another port: PORT={port + 1} bash scripts/run.sh",
          file=sys.stderr)
    return EXIT_FAILED


def package_current(package: str, checkpoint: str) -> int:
    """0 when ``package`` is a valid package exported from exactly this checkpoint (the sha256
    recorded in its model.json) with the int8 graphs run.sh serves; else 1, saying why."""
    from engine.package import ModelPackage, PackageError
    from training.checkpoint import resolve, sha256_file

    try:
        pkg = ModelPackage.load(package)
    except PackageError as e:
        return _stale(package, str(e) if Path(package).exists() else "it does not exist yet")
    recorded = pkg.provenance.get("checkpoint_sha256")
    if not recorded:
        return _stale(package, "its model.json does not record the checkpoint's sha256 (an older export)")
    try:
        path = resolve(checkpoint)
    except FileNotFoundError as e:
        return _stale(package, str(e))
    if not path.is_file():
        return _stale(package, f"checkpoint {path} does not exist")
    if sha256_file(path) != recorded:
        return _stale(package, f"it was exported from another checkpoint than {path}")
    if "int8" not in pkg.variants:
        return _stale(package, "it has no int8 graphs")
    if "fp32" not in pkg.resident_variants:
        return _stale(package, "it has no step and rows graphs for device-resident decoding (an older export)")
    return EXIT_OK


def _stale(package: str, why: str) -> int:
    print(f"run.sh: exporting {package}: {why}", file=sys.stderr)
    return EXIT_FAILED


def serving_pids(package: str) -> set[int] | None:
    """Running nmt-serve processes (this user's) whose --model or $NMT_MODEL names ``package``."""
    if not (PROC / "self" / "cmdline").exists():
        return None
    target = Path(package).resolve()
    found = set()
    for proc in PROC.iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if not any(a.endswith(("nmt-serve", "server.main")) for a in args):
                continue
            env = dict(kv.partition("=")[::2] for kv in
                       (proc / "environ").read_bytes().decode(errors="replace").split("\0") if kv)
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        specs = [v for flag, v in itertools.pairwise(args) if flag == "--model"]
        specs += [a.split("=", 1)[1] for a in args if a.startswith("--model=")]
        specs += [x for x in env.get("NMT_MODEL", "").split(",") if x] if not specs else []
        if any((cwd / spec.rpartition("=")[2]).resolve() == target for spec in specs):
            found.add(int(proc.name))
    return found


def package_unused(package: str) -> int:
    pids = serving_pids(package)
    if pids is None:
        print("run.sh: cannot tell whether a server uses the package here (no /proc)", file=sys.stderr)
        return EXIT_OK
    if pids:
        print(f"run.sh: {package} must be exported again, but nmt-serve (pid {', '.join(map(str, sorted(pids)))}) "
              f"serves it; stop that server first, or export elsewhere: PACKAGE=packages/new bash scripts/run.sh",
              file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def main(argv: list[str]) -> int:
    commands = {"port-free": (2, lambda a: port_free(a[0], int(a[1]))),
                "package-current": (2, lambda a: package_current(a[0], a[1])),
                "package-unused": (1, lambda a: package_unused(a[0])),
                "listener-is": (2, lambda a: listener_is(int(a[0]), int(a[1])))}
    if not argv or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][0]:
        print(__doc__, file=sys.stderr)
        return EXIT_USAGE
    try:
        return commands[argv[0]][1](argv[1:])
    except ValueError as e:  # a port or pid that is not a number
        print(f"run.sh: {argv[0]}: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
