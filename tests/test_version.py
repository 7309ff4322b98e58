"""One version, defined once (cli/version.py) and told the same everywhere: by ``--version``
of every command in pyproject.toml's [project.scripts], by the installed distribution's
metadata (pyproject.toml reads the module), by nmt-serve's ListModels (initial metadata), by
the gateway (tests/test_openapi.py), and as CHANGELOG.md's newest release."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli.version import VERSION_METADATA, __version__
from nmt.v1 import translator_pb2 as pb
from tests.server_harness import ServerThread

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]
BIN = Path(sys.executable).parent


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_pyproject_reads_the_version_from_the_module():
    assert "version" not in PYPROJECT["project"], "pyproject.toml must not spell the version: cli/version.py does"
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cli.version.__version__"}


def test_the_installed_distribution_has_the_same_version():
    try:
        installed = importlib.metadata.version("nmt-transformer")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the project is not installed (bash scripts/setup.sh installs it)")
    assert installed == __version__, "the installed metadata is stale: run bash scripts/setup.sh again"


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_every_command_prints_the_version(command, capsys):
    module, _, function = SCRIPTS[command].partition(":")
    main = getattr(importlib.import_module(module), function)
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"{command} {__version__}\n"


def test_the_installed_command_prints_the_version():
    """The console script as a user runs it (one of them: each costs an interpreter start)."""
    script = BIN / "nmt-http"
    if not script.exists():
        pytest.skip("the console scripts are not installed (bash scripts/setup.sh installs them)")
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stdout, r.stderr) == (0, f"nmt-http {__version__}\n", "")


def test_the_changelog_records_this_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert releases[:1] == ["Unreleased"], "CHANGELOG.md opens with an [Unreleased] section (Keep a Changelog)"
    assert releases[1:2] == [__version__], f"CHANGELOG.md's newest release must be {__version__}, not {releases[1:2]}"


def test_list_models_sends_the_server_version(tiny_package):
    server = ServerThread(tiny_package)
    try:
        response, call = server.stub().ListModels.with_call(pb.ListModelsRequest(), timeout=30)
    finally:
        server.stop()
    assert [m.name for m in response.models] == ["tiny"]
    assert (VERSION_METADATA, __version__) in tuple(call.initial_metadata())
