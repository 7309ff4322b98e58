"""What every ``nmt-*`` command shares: its exit statuses, its help layout (every option
shows its default), one-line errors, checks of the files a user names, and the old
spellings of renamed flags (accepted, hidden from --help, with a warning, for one release).

Exit statuses, the same for the same outcome in every command and mode:

    0   done
    1   failed while running: the server is unreachable or answered with an error, the run
        was interrupted, a check found a difference (nmt-verify) or a server not SERVING
        (nmt-health); the command can be run again as it is
    2   a usage or input mistake, found before any work: a bad flag or value, a file or
        directory that is missing or of the wrong kind, an unknown language pair, a model
        package that is not valid, a port already in use, an output file another run is
        writing (nmt-translate); the message says what to change
    3   nmt-translate: done, but some lines could not be translated (left empty, listed)
    75  nmt-train --chunk-minutes: saved but not finished; the same command continues it

Only the standard library here: the clients import this module too.
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from cli.version import __version__

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_UNFINISHED = 75  # EX_TEMPFAIL

# Where the server listens and the clients and the gateway look for it, unless told otherwise.
LOCALHOST = "127.0.0.1"
GRPC_PORT = 50051
GRPC_ADDRESS = f"{LOCALHOST}:{GRPC_PORT}"
# How the clients and the gateway spread calls over the addresses their target resolves to: every
# replica behind one name (a Kubernetes headless Service, docker-compose replicas) gets calls,
# and one that fails is skipped. A name with one address behaves as before.
LB_POLICY = "round_robin"
MAX_CONNECTIONS = 1000  # TCP connections the server and the gateway each hold open at once (--max-connections)


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nothing listens on now (for a server started next, in tests and benchmarks)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]

_MEANING = {
    EXIT_OK: "done",
    EXIT_FAILED: "failed while running (run it again as it is)",
    EXIT_USAGE: "a usage or input mistake, nothing done (the message says what to change)",
    EXIT_PARTIAL: "done, but some lines failed (left empty and listed)",
    EXIT_UNFINISHED: "saved but not finished (the same command continues it)",
}


def exit_status_help(*codes: int, done: str = _MEANING[EXIT_OK]) -> str:
    """The epilog line of a command's --help: what each of its exit statuses means."""
    return "exit status: " + "; ".join([f"{EXIT_OK} {done}", *(f"{c} {_MEANING[c]}" for c in codes)])


class UsageError(ValueError):
    """A mistake in what the user asked for (a bad value, in the widest sense). The message says
    what is wrong and what to do; the command prints it on one line and exits with EXIT_USAGE."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default at the end of its help: flags
    are "off", a None default is left to the help text (which says what happens without
    the option), lists are joined with commas."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction) or \
                action.default is False:
            shown = "off" if not action.default else "on"
        elif action.default is None or action.default == []:
            return text
        elif isinstance(action.default, list | tuple):
            shown = ",".join(str(x) for x in action.default)
        elif action.default == "":
            shown = '""'
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})" if text else f"(default: {shown})"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with our help layout, ``--version`` (with ``--help``: not on a parent parser made
    with add_help=False), and errors on one line (no usage block above them)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        if self.add_help:
            self.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                              help="print the command's name and version, and exit")

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> int:
    """Print ``prog: error: message`` on stderr; return ``code`` for main() to exit with."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return code


def deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """Accept ``old`` as a hidden spelling of the option ``new`` (same destination, type and
    action) that says once on stderr that it is deprecated."""
    target = next(a for a in parser._actions if new in a.option_strings)
    alias = copy.copy(target)
    base = type(target)

    class Deprecated(base):  # type: ignore[valid-type, misc]
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"{parser.prog}: warning: {option_string} is deprecated and will be removed in the next "
                  f"release; use {new}", file=sys.stderr, flush=True)
            super().__call__(parser, namespace, values, option_string)

    alias.__class__ = Deprecated
    alias.option_strings = [old]
    alias.help = argparse.SUPPRESS
    alias.required = False
    parser._add_action(alias)


def deprecated_env(environ: Mapping[str, str], old: str, new: str, prog: str) -> str | None:
    """The value of ``$new``, else of the deprecated ``$old`` (with a warning on stderr)."""
    if environ.get(new):
        return environ[new]
    if environ.get(old):
        print(f"{prog}: warning: ${old} is deprecated and will be removed in the next release; use ${new}",
              file=sys.stderr, flush=True)
        return environ[old]
    return None


def check_input_file(path: str | Path, flag: str, what: str = "a file") -> Path:
    """The file a user named to be read; UsageError if it is missing, a directory or unreadable."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{flag}: {p} does not exist; give {what}")
    if p.is_dir():
        raise UsageError(f"{flag}: {p} is a directory; give {what}")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{flag}: cannot read {p} (permission denied)")
    return p


def check_output_file(path: str | Path, flag: str) -> Path:
    """A file to be written: its folder must exist (a typo should not create a tree) and it must
    not be a directory."""
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        raise UsageError(f"{flag}: {p} is a directory; give a file name")
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"{flag}: cannot write {p}: the folder {parent} {why}; create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag}: cannot write in {parent} (permission denied)")
    return p


def language(code: str) -> str:
    """A language code as the server keeps them: ``EN`` and `` en `` are ``en``."""
    return code.strip().lower()


def parse_direction(direction: str) -> tuple[str, str]:
    """A language pair ("en-de", also the "en-de" of a model's pairs) as (source, target);
    UsageError for anything else."""
    parts = direction.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise UsageError(f"direction {direction!r} must look like 'en-de'")
    return parts[0], parts[1]


def options_without_help(parser: argparse.ArgumentParser) -> list[str]:
    """Options whose --help shows no text or no default (for the tests that keep help complete)."""
    formatter = parser.formatter_class(prog=parser.prog)
    missing = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or \
                isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        text = formatter._get_help_string(action) if hasattr(formatter, "_get_help_string") else action.help
        if not action.help or not (action.required or "default" in (text or "")):
            missing.append("/".join(action.option_strings))
    return missing

