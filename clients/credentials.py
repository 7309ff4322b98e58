"""The bearer token of the command-line clients, kept off the command line where other users
of the machine can read it (``ps``, /proc): from a file (``--auth-token-file``) or from the
environment (``$NMT_AUTH_TOKEN``; the older ``$NMT_TOKEN`` is still read)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

TOKEN_ENV = "NMT_AUTH_TOKEN"
OLD_TOKEN_ENV = "NMT_TOKEN"


def add_token_arguments(p: argparse.ArgumentParser) -> None:
    """``--auth-token-file PATH`` and ``--auth-token TOKEN`` (alias ``--token``), one or the other."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--auth-token-file", type=Path, metavar="PATH",
                   help=f"read the server's bearer token from this file (one line; make it readable only by "
                   f"you). Without this flag or --auth-token the token comes from ${TOKEN_ENV} (or "
                   f"${OLD_TOKEN_ENV}), if set")
    g.add_argument("--auth-token", "--token", dest="token", metavar="TOKEN",
                   help="the bearer token itself. Visible to other users of this machine in the process list: "
                   f"prefer --auth-token-file or ${TOKEN_ENV}")


def resolve_token(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token from --auth-token, else --auth-token-file, else the environment; None: no token.
    Raises ValueError for a token file that cannot be read or holds no single-line token."""
    if args.token:
        return args.token
    path = args.auth_token_file
    if path is not None:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--auth-token-file: cannot read {path}: {e}") from None
        if not token or "\n" in token:
            raise ValueError(f"--auth-token-file: {path} must hold the token on one line")
        return token
    return environ.get(TOKEN_ENV) or environ.get(OLD_TOKEN_ENV) or None
