"""What ``--model`` names: a model package, or a Hugging Face model to convert into one.

    nmt-serve --model Helsinki-NLP/opus-mt-en-de                 # a model id (owner/name[@revision])
    nmt-serve --model romance=Helsinki-NLP/opus-mt-en-ROMANCE    # named; several targets: one pair each
    nmt-serve --model ~/models/opus-mt-en-de                     # a downloaded Hugging Face directory

A package directory (its model.json) is served as it is. A model id, or a directory holding a
Hugging Face config.json, is converted once by a child process, ``python -m export.model_cache``
(export/ is never imported here: DESIGN.md's layering; and torch's memory goes with the child),
into ``--model-cache``; later starts find the package there, and a new revision of the model
(or a changed directory) is converted again. The child's progress lines go to the log; what
goes wrong is one line (ModelSourceError), the start-up error.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path

from engine.contract import MANIFEST

log = logging.getLogger("nmt.server")
ROOT = Path(__file__).resolve().parents[1]  # the project: the child imports the same modules
# owner/name, hf:owner/name, either with @revision (export/hub.py's MODEL_ID, with the revision)
MODEL_ID = re.compile(r"(hf:)?[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?")


class ModelSourceError(ValueError):
    """A --model that cannot become a package; the message says why and what to give instead."""


def default_cache() -> Path:
    """Where converted packages are kept unless --model-cache says: $XDG_CACHE_HOME/nmt/packages,
    else ~/.cache/nmt/packages."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nmt" / "packages"


def is_hugging_face(spec: str) -> bool:
    """Whether ``spec`` names a model to convert: an existing directory without model.json whose
    config.json names a Transformers model_type, or, when no such path exists, a model id."""
    path = Path(spec)
    if path.exists():
        if not path.is_dir() or (path / MANIFEST).exists():
            return False
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
        return isinstance(config, dict) and "model_type" in config  # ours (a training run's) has sections instead
    return MODEL_ID.fullmatch(spec) is not None


def default_name(spec: str) -> str:
    """A model's name when --model gives none: the directory's, or the id's name without its revision."""
    if is_hugging_face(spec) and not Path(spec).exists():
        return spec.split("/")[-1].partition("@")[0]
    return Path(spec).name


def package_directory(spec: str, cache: str = "", languages: str = "", name: str = "") -> str:
    """The package directory to load for ``spec``: ``spec`` itself, or the package the child
    converted (or had converted before) into ``cache``. ModelSourceError says why not."""
    if not is_hugging_face(spec):
        return spec
    where = Path(cache) if cache else default_cache()
    env = dict(os.environ)
    if (ROOT / "export" / "model_cache.py").is_file():  # a source checkout: the child finds it as this process did
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    tail: deque[str] = deque(maxlen=20)
    with tempfile.TemporaryDirectory(prefix="nmt-model-source-") as tmp:
        result = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "export.model_cache", spec, "--cache", str(where), "--result", str(result),
                   *(["--languages", languages] if languages else [])]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              text=True, errors="replace", env=env) as child:
            assert child.stdout is not None
            for line in child.stdout:
                line = line.rstrip()
                if line:
                    tail.append(line)
                    log.info("model %s: %s", name or default_name(spec), line)
        outcome = _read(result)
    if "package" in outcome:
        return str(outcome["package"])
    if "error" in outcome:
        raise ModelSourceError(_prefixed(spec, str(outcome["error"])))
    last = tail[-1] if tail else f"it exited with status {child.returncode}"
    raise ModelSourceError(f"--model {spec}: the conversion failed: {last}")


def _prefixed(spec: str, error: str) -> str:
    """The child's one line, with a note when ``spec`` looks like a mistyped path (its first part exists here)."""
    first = spec.split("/")[0]
    if not Path(spec).exists() and first and Path(first).is_dir():
        return f"--model {spec}: no such directory ({first}/ exists: a typo?); as a model id: {error}"
    return error if spec in error else f"--model {spec}: {error}"


def _read(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
