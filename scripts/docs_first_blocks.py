"""Run the first shell block of every docs page as a reader would: from a clean clone.

    python3 scripts/docs_first_blocks.py                        # clone HEAD into a temporary directory
    python3 scripts/docs_first_blocks.py --checkout DIR         # an existing clean clone instead
    python3 scripts/docs_first_blocks.py docs/training.md       # some pages only
    python3 scripts/docs_first_blocks.py --plan                 # how each line would be run; runs nothing

It clones the repository it sits in at its HEAD (committed work only) into a fresh temporary
directory, or takes ``--checkout DIR``, a clone of its own (never the repository this script is
in: its untracked files are deleted between pages), and runs ``bash scripts/setup.sh`` there once.
Then, for every docs/*.md page that has a shell block (README.md's opening block is run by CI),
it returns the clone to its committed state (``git checkout -- .`` and ``git clean -ffdx``,
keeping ``.venv``), and runs the page's first shell block from the clone's root, one logical
line after another in one bash session (variables and ``$!`` carry over; ``set -o pipefail``;
a line's exit status other than 0 fails the page). It prints one line per page, passed, FAILED
(the line and the last lines of the page's output) or skipped (why), with the seconds it took,
and exits 1 when a page failed (``--keep`` keeps the clone and each page's log and session
script). The session's environment is the caller's without an activated virtual environment or
PYTHONPATH: a page finds only what the clone's set-up made, by the names the page writes.
Standard library only: it runs before any .venv exists.

A page's first shell block is the first fenced block in bash, sh, shell, zsh, console (its ``$``
lines) or no language that has a command, as tests/test_docs.py reads blocks; its mark says
``<!-- example: run from a clean clone by scripts/docs_first_blocks.py -->``. A logical line is a
line with the ones its trailing backslashes join to it; blank and comment-only lines are not run.

Serving lines. A line that starts a server that keeps serving is one of the project's three
serving commands, after any ``NAME=value`` assignments and with a directory before the command's
name allowed (``.venv/bin/nmt-serve``):

- ``bash scripts/run.sh`` (unless ``DEMO_ONLY`` is set on the line: then it stops its server
  itself), port ``PORT=`` on the line or 50051: gRPC;
- ``nmt-serve``, port ``--port`` or 50051: gRPC;
- ``nmt-http``, port ``--port`` or 5000: HTTP.

A known list, not a marker in the docs: these are the only commands here that never return, the
pages show them as a reader types them (in one terminal, the next lines in another), and their
ports are flags with documented defaults. A serving line is run in the background (with ``&``
added where it has none; where it has one, ``$!`` is the server, as for the reader), and the
session goes on only once the server answers on 127.0.0.1 at its port: gRPC, its health check
says SERVING (scripts/wait_serving.py of the clone, server/child.py's ``wait_serving``); HTTP,
``/readyz`` answers 200 (the gateway reaches a SERVING server). Waiting stops when the
background process exits first, or after ``--serve-timeout`` seconds. Those ports must be free
when the page starts (else the page fails: another server would answer). The bash session is a
process group of its own, and at the end of the page, passed or not, the whole group gets
SIGTERM (the servers drain) and, ``--grace`` seconds later, SIGKILL. Containers are not in that
group: where a line ran ``docker-compose``, ``docker-compose down -v --remove-orphans`` follows in
the clone (containers, network and volumes of the page's stack).

Skipped lines. A line whose trailing comment says ``needs Docker``, ``needs the internet`` or
``needs a GPU`` is skipped, with the reason, only when that is absent here:

- Docker: ``docker info`` (an engine answers) and ``docker-compose version`` both exit 0;
- the internet: the Hugging Face hub answers (huggingface_hub's endpoint, ``HF_ENDPOINT``
  honoured; ``HF_HUB_OFFLINE`` set means absent), the only place a docs line fetches from
  besides pip, which the set-up needs anyway;
- a GPU: ``nvidia-smi -L`` lists one.

Nothing is stubbed: a line runs as written or is not run at all. A page all of whose lines are
skipped is reported skipped; otherwise it passes when every line it ran passed, and says how many
it skipped and why.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK_TEXT = "<!-- example: run from a clean clone by scripts/docs_first_blocks.py -->"
EXCLUDED = ("README.md",)  # CI (.ci/run) runs README.md's opening block

# ---------------------------------------------------------------- blocks (tests/test_docs.py reads them so too)
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh"}
OPEN_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MARK = re.compile(r"^\s*<!--\s*(run|example|examples)\s*(?::([^>]*))?-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    language: str
    lines: tuple[str, ...]  # without the block's indentation
    mark: str  # "run", "example" or ""
    why: str = ""  # the mark's text after "example:" (the page's "examples:" text for its blocks)

    @property
    def commands(self) -> list[str]:
        if self.language == "console":
            return [line[2:] for line in self.lines if line.startswith("$ ")]
        return [line for line in self.lines if line.strip() and not line.lstrip().startswith("#")]

    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a page, each with its language and the mark on the line above it."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    page_mark, page_why = "", ""
    out, i = [], 0
    while i < len(lines):
        m = OPEN_FENCE.match(lines[i])
        if not m:
            mark = MARK.match(lines[i])
            if mark and mark.group(1) == "examples" and not out:
                page_mark, page_why = "example", (mark.group(2) or "").strip()
            i += 1
            continue
        indent, fence, language = m.groups()
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(above)
        own = mark.group(1) if mark and mark.group(1) != "examples" else ""
        why = (mark.group(2) or "").strip() if own else page_why if page_mark else ""
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        out.append(Block(page, i - len(body), language.lower(), tuple(body), own or page_mark, why))
        i += 1
    return out


def first_block(page: Path, text: str | None = None) -> Block | None:
    """The page's first shell block that has a command (None: the page has none)."""
    return next((b for b in blocks(page, text) if b.language in SHELL_LANGUAGES and b.commands), None)


# ---------------------------------------------------------------- lines and what they need
GRPC, HTTP = "gRPC", "HTTP"
SERVERS = {"nmt-serve": (GRPC, 50051), "nmt-http": (HTTP, 5000)}  # their --port defaults (cli, gateway)
RUN_SH = ("bash", "scripts/run.sh")  # gRPC on PORT or 50051, unless DEMO_ONLY is set
COMPOSE = "docker-compose "  # a page that runs it ends with `docker-compose down -v --remove-orphans`
NEEDS = re.compile(r"\bneeds (Docker|the internet|a GPU)\b")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Line:
    number: int  # in the page, from 1 (its first line)
    text: str  # as written; continuation lines joined by backslash-newline
    command: str  # without the trailing comment
    serves: str = ""  # "gRPC" or "HTTP" for a serving line
    port: int = 0  # where it serves
    needs: tuple[str, ...] = ()  # "Docker", "the internet", "a GPU"

    @property
    def background(self) -> bool:
        """The runner adds the ``&`` a serving line does not have."""
        return bool(self.serves) and not self.command.endswith("&")

    def to_run(self) -> str:
        return f"{self.command} &" if self.background else self.text


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment) of one shell line: a ``#`` that starts a word outside quotes starts the comment."""
    quote, escaped = "", False
    for i, c in enumerate(line):
        if escaped:
            escaped = False
        elif c == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def serving(command: str) -> tuple[str, int]:
    """("gRPC" or "HTTP", port) when the command starts a server that keeps serving, else ("", 0)."""
    try:
        words = shlex.split(command.removesuffix("&"))
    except ValueError:
        return "", 0
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if tuple(words[:2]) == RUN_SH:
        return ("", 0) if env.get("DEMO_ONLY") else (GRPC, int(env.get("PORT", 50051)))
    name = Path(words[0]).name if words else ""
    if name not in SERVERS:
        return "", 0
    kind, port = SERVERS[name]
    for i, word in enumerate(words):
        if word == "--port" and i + 1 < len(words):
            port = int(words[i + 1])
        elif word.startswith("--port="):
            port = int(word.partition("=")[2])
    return kind, port


def logical_lines(block: Block) -> list[Line]:
    """The block's commands one logical line each, classified (serving, needs)."""
    out: list[Line] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(block.lines, block.line + 1):
        if block.language == "console":
            if not raw.startswith("$ "):
                continue
            raw = raw[2:]
        if not pending:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            start = number
        pending.append(raw)
        if raw.endswith("\\"):
            continue
        text = "\n".join(pending)
        pending = []
        command, comment = split_comment(text.replace("\\\n", " "))
        command = re.sub(r"\s+", " ", command)
        kind, port = serving(command)
        out.append(Line(start, text, command, kind, port, tuple(NEEDS.findall(comment))))
    return out


def docs_pages(root: Path) -> list[Path]:
    return [p for p in sorted((root / "docs").glob("*.md")) if first_block(p) is not None]


# ---------------------------------------------------------------- what this machine has
def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _command_ok(args: list[str], timeout: float = 60) -> tuple[bool, str]:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return False, f"{args[0]} is not installed"
    except subprocess.TimeoutExpired:
        return False, f"`{' '.join(args)}` did not answer within {timeout:.0f} s"
    if r.returncode != 0:
        return False, f"`{' '.join(args)}`: {_first_line(r.stderr) or _first_line(r.stdout) or f'exit {r.returncode}'}"
    return True, r.stdout


def docker_absent(clone: Path) -> str:
    ok, why = _command_ok(["docker", "info"])
    if not ok:
        return f"no Docker engine answers ({why})"
    ok, why = _command_ok(["docker-compose", "version"])
    return "" if ok else f"no docker-compose ({why})"


HUB_PROBE = """
import os, sys, urllib.error, urllib.request
if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
    sys.exit("HF_HUB_OFFLINE is set")
from huggingface_hub import constants
try:
    urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=15)
except urllib.error.HTTPError:
    pass  # it answered
except OSError as e:
    sys.exit(f"the Hugging Face hub cannot be reached ({getattr(e, 'reason', e)})")
"""


def internet_absent(clone: Path) -> str:
    try:
        r = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", HUB_PROBE], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "the Hugging Face hub did not answer within 60 s"
    return "" if r.returncode == 0 else _first_line(r.stderr.splitlines()[-1] if r.stderr else "") or "no answer"


def gpu_absent(clone: Path) -> str:
    ok, out = _command_ok(["nvidia-smi", "-L"])
    if not ok:
        return out
    return "" if "GPU" in out else "nvidia-smi -L lists no GPU"


CHECKS: dict[str, Callable[[Path], str]] = {"Docker": docker_absent, "the internet": internet_absent,
                                            "a GPU": gpu_absent}


# ---------------------------------------------------------------- waiting for a server
def alive(pid: int) -> bool:
    """Whether the process runs (an exited one not yet reaped has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def wait_ready(kind: str, port: int, pid: int, timeout: float, clone: Path) -> str:
    """"" once the server on 127.0.0.1:port answers (gRPC: SERVING; HTTP: /readyz 200), else why not."""
    deadline = time.monotonic() + timeout
    waiter = None
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, never through a proxy
    if kind == GRPC:
        waiter = subprocess.Popen([str(clone / ".venv" / "bin" / "python"), str(clone / "scripts" / "wait_serving.py"),
                                   "--address", f"127.0.0.1:{port}", "--timeout", str(timeout)], cwd=clone,
                                  stdin=subprocess.DEVNULL)
    try:
        while time.monotonic() < deadline:
            if waiter is not None:
                if waiter.poll() == 0:
                    return ""
                if waiter.returncode is not None and alive(pid):
                    return f"127.0.0.1:{port} did not become SERVING"
            else:
                try:
                    with direct.open(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                        if r.status == 200:
                            return ""
                except OSError:  # refused, not yet listening, or 503 (HTTPError) while the server warms up
                    pass
            if not alive(pid):
                return f"it exited before it served {kind} on 127.0.0.1:{port}"
            time.sleep(0.2)
        return f"it did not serve {kind} on 127.0.0.1:{port} within {timeout:.0f} s"
    finally:
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
            waiter.wait()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------- one page
@dataclass
class Result:
    page: str
    status: str  # "passed", "FAILED", "skipped"
    seconds: float
    detail: str = ""


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for their reaper do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(pgid: int, grace: float) -> None:
    """SIGTERM to every process the page started (the servers drain), SIGKILL after ``grace`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.2)
        if not group_alive(pgid):
            return


def session_script(lines: list[Line], run: list[bool], status: Path, serve_timeout: float, clone: Path) -> str:
    """The bash session of a page: each line to run, its exit status checked, servers waited for."""
    wait = [sys.executable, str(Path(__file__).resolve()), "--wait"]
    out = ["set -o pipefail", f"__status() {{ printf '%s\\n' \"$*\" >> {shlex.quote(str(status))}; }}"]
    for i, (line, go) in enumerate(zip(lines, run, strict=True)):
        if not go:
            continue
        out += [f"__status start {i}", line.to_run(), '__rc=$?; if [ "$__rc" -ne 0 ]; then exit "$__rc"; fi']
        if line.serves:
            args = [*map(shlex.quote, [*wait, line.serves, str(line.port)]), '"$!"',
                    *map(shlex.quote, [str(serve_timeout), str(status), str(clone)])]
            out += [f"__status wait {i}", " ".join(args) + " || exit 1"]
    out.append("__status end")
    return "\n".join(out) + "\n"


def page_env() -> dict[str, str]:
    """This environment without an activated virtual environment or PYTHONPATH: the page's commands
    find only what the clone's set-up made, under the names the page writes."""
    env = dict(os.environ)
    drop = set()
    for prefix in (env.pop("VIRTUAL_ENV", ""), sys.prefix if sys.prefix != sys.base_prefix else ""):
        if prefix:
            drop.add(str(Path(prefix) / "bin"))
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p.rstrip("/") not in drop)
    for name in ("PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    return env


def tail(path: Path, n: int = 15) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
    return "\n".join(f"    | {line}" for line in lines or ["(no output)"])


def run_page(name: str, clone: Path, logs: Path, args: argparse.Namespace,
             absent: Callable[[str], str]) -> Result:
    started = time.monotonic()
    block = first_block(clone / name)
    assert block is not None
    lines = logical_lines(block)
    skipped: dict[int, str] = {}
    for i, line in enumerate(lines):
        whys = [f"needs {need}: {why}" for need in line.needs if (why := absent(need))]
        if whys:
            skipped[i] = "; ".join(whys)
    run = [i not in skipped for i in range(len(lines))]
    reasons = sorted(set(skipped.values()))
    if not any(run):
        return Result(name, "skipped", time.monotonic() - started, "; ".join(reasons))
    busy = sorted({line.port for line, go in zip(lines, run, strict=True) if go and line.serves
                   and not port_free(line.port)})
    if busy:
        return Result(name, "FAILED", time.monotonic() - started,
                      f"port {', '.join(map(str, busy))} on 127.0.0.1 is in use by another process: "
                      "its server would answer for the page's")
    reset(clone)
    stem = name.replace("/", "_")
    status, log = logs / f"{stem}.status", logs / f"{stem}.log"
    status.write_text("")
    script = logs / f"{stem}.sh"
    script.write_text(session_script(lines, run, status, args.serve_timeout, clone))
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", str(script)], cwd=clone, env=page_env(), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            rc = proc.wait(args.page_timeout)
        except subprocess.TimeoutExpired:
            timed_out, rc = True, -1
        finally:
            stop_group(proc.pid, args.grace)
            proc.wait()
            if any(go and line.command.startswith(COMPOSE) for line, go in zip(lines, run, strict=True)):
                out.flush()  # the containers, network and volumes of the page's stack outlive its processes
                try:
                    subprocess.run(["docker-compose", "down", "-v", "--remove-orphans"], cwd=clone, env=page_env(),
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=600)
                except (OSError, subprocess.TimeoutExpired) as e:
                    out.write(f"docs_first_blocks: docker-compose down: {e}\n".encode())
    seconds = time.monotonic() - started
    events = status.read_text().splitlines()
    if not timed_out and rc == 0 and events[-1:] == ["end"]:
        detail = f"{len(skipped)} of {len(lines)} lines skipped: {'; '.join(reasons)}" if skipped else ""
        return Result(name, "passed", seconds, detail)
    last = next((e.split() for e in reversed(events) if e.split()[0] in ("start", "wait")), None)
    if last is None:
        return Result(name, "FAILED", seconds, f"the session ended before its first line (exit {rc})\n{tail(log)}")
    line = lines[int(last[1])]
    why = next((e.partition(" ")[2] for e in reversed(events) if e.startswith("why ")), "")
    what = (f"timed out after {args.page_timeout:.0f} s" if timed_out else
            f"started in the background, but {why}" if last[0] == "wait" else f"exit status {rc}")
    return Result(name, "FAILED", seconds,
                  f"line {line.number}: {line.command}\n  {what}; the page's output ends:\n{tail(log)}")


# ---------------------------------------------------------------- the clone
def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def reset(clone: Path) -> None:
    """The clone as committed, with the set-up's .venv kept: what a reader has after set-up."""
    if Path(git("rev-parse", "--show-toplevel", cwd=clone).strip()).resolve() == ROOT:
        raise RuntimeError(f"{clone} is the repository this script is in, not a clone: not cleaning it")
    git("checkout", "-q", "--", ".", cwd=clone)
    git("clean", "-ffdxq", "-e", "/.venv", "-e", "/*.egg-info", cwd=clone)


def checkout(path: Path) -> Path:
    """``path`` if it is a clone this script may clean: a git work tree, not this repository, no
    change to a tracked file."""
    path = path.resolve()
    top = Path(git("rev-parse", "--show-toplevel", cwd=path).strip())
    if top == ROOT:
        raise SystemExit(f"--checkout {path} is the repository this script is in; give a clone of it "
                         "(its untracked files are deleted between pages)")
    if git("status", "--porcelain", "--untracked-files=no", cwd=top).strip():
        raise SystemExit(f"--checkout {top} has changes to tracked files; give a clean clone")
    return top


# ---------------------------------------------------------------- the command
def plan(root: Path, names: Iterable[str]) -> str:
    out = []
    for name in names:
        block = first_block(root / name)
        assert block is not None
        out.append(f"{name}:{block.line}")
        for line in logical_lines(block):
            how = [f"serves {line.serves} on 127.0.0.1:{line.port}" + (", put in the background"
                                                                       if line.background else "")] \
                if line.serves else []
            how += [f"needs {need}" for need in line.needs]
            out.append(f"  {line.number:>4}  {line.command}" + (f"    [{'; '.join(how)}]" if how else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--wait"]:  # the session's own call: wait for the server a line started
        kind, port, pid, timeout, status, clone = argv[1:]
        why = wait_ready(kind, int(port), int(pid), float(timeout), Path(clone))
        if why:
            print(f"docs_first_blocks: {why}", file=sys.stderr)
            with open(status, "a") as f:
                f.write(f"why {why}\n")
        return 1 if why else 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pages", nargs="*", help="pages to run, e.g. docs/training.md (default: every docs page with a "
                                            "shell block)")
    p.add_argument("--checkout", type=Path, help="an existing clean clone to run in (default: a fresh clone of HEAD "
                                                  "in a temporary directory, removed at the end)")
    p.add_argument("--plan", action="store_true", help="print how each first block's lines would run, run nothing")
    p.add_argument("--serve-timeout", type=float, default=900, help="seconds a serving line may take to answer "
                                                                    "(default: %(default)s)")
    p.add_argument("--page-timeout", type=float, default=1800, help="seconds a page may take (default: %(default)s)")
    p.add_argument("--grace", type=float, default=30, help="seconds between SIGTERM and SIGKILL for what a page "
                                                          "started (default: %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep the temporary clone and the pages' logs")
    args = p.parse_args(argv)
    names = args.pages or [str(p.relative_to(ROOT)) for p in docs_pages(ROOT)]
    for name in names:
        if Path(name).name in EXCLUDED or first_block(ROOT / name) is None:
            p.error(f"{name}: not a docs page with a shell block")
    if args.plan:
        print(plan(ROOT, names))
        return 0
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="docs-first-blocks-"))
    try:
        if args.checkout:
            clone = checkout(args.checkout)
        else:
            clone = work / "clone"
            git("clone", "-q", str(ROOT), str(clone), cwd=work)
        print(f"clone: {clone} at {git('rev-parse', '--short', 'HEAD', cwd=clone).strip()}", flush=True)
        logs = work / "logs"
        logs.mkdir()
        t = time.monotonic()
        with (logs / "setup.log").open("wb") as out:
            rc = subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, env=page_env(), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if rc != 0:
            print(f"bash scripts/setup.sh  FAILED  {time.monotonic() - t:.0f} s\n{tail(logs / 'setup.log')}")
            return 1
        print(f"bash scripts/setup.sh  passed  {time.monotonic() - t:.0f} s", flush=True)
        known: dict[str, str] = {}

        def absent(need: str) -> str:
            if need not in known:
                known[need] = CHECKS[need](clone)
            return known[need]

        results = []
        for name in names:
            r = run_page(name, clone, logs, args, absent)
            results.append(r)
            head = f"{r.page:<24} {r.status:<8} {r.seconds:6.0f} s"
            print(f"{head}  {r.detail}" if r.detail else head, flush=True)
        failed = [r for r in results if r.status == "FAILED"]
        print(f"{len(results) - len(failed)} of {len(results)} pages passed or skipped, "
              f"{len(failed)} failed; {time.monotonic() - began:.0f} s in all")
        if args.keep:
            print(f"kept: {work}")
        return 1 if failed else 0
    finally:
        if args.checkout and not args.keep:
            reset(clone)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
