"""The glossary and do-not-translate parameters of the gateway's translate calls, our extension
of LibreTranslate's /translate (which has none) and keys of /v1/translate:

- ``keep``: spans to give back as they are, a list of strings (a single string is one span);
- ``glossary``: terms to translate as given, an object ``{"source term": "target term"}`` or a
  list of ``{"source": ..., "target": ...}`` objects;
- ``glossary_name``: a glossary the server loaded (``nmt-serve --glossary NAME=FILE``).

In a form or a query string, whose values are strings, ``keep`` and ``glossary`` may be JSON
text (``keep=["Acme","C++"]``); a ``keep`` that is not a JSON list is one span. The server
checks the limits and answers what is wrong (docs/translate.md); the gateway only reads the shapes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nmt.v1 import translator_pb2 as pb

TERM_KEYS = ("keep", "glossary", "glossary_name")
GLOSSARY_SHAPE = 'an object {"source term": "target term"} or a list of {"source": ..., "target": ...} objects'


class TermsInvalid(ValueError):
    """A parameter of the wrong shape; the message names it (the gateway answers 400)."""


@dataclass(frozen=True)
class Terms:
    keep: tuple[str, ...] = ()
    glossary: tuple[tuple[str, str], ...] = ()
    name: str = ""

    def apply(self, request: pb.TranslateRequest, keep: Iterable[str] = ()) -> None:
        """Put the terms, and the further spans ``keep`` (each once), into ``request``."""
        request.keep.extend(dict.fromkeys([*self.keep, *keep]))
        request.glossary.extend(pb.GlossaryEntry(source=s, target=t) for s, t in self.glossary)
        request.glossary_name = self.name


NO_TERMS = Terms()


def _decoded(value: Any, name: str) -> Any:
    """A form's JSON text as JSON; anything else as it is."""
    if isinstance(value, str) and value.lstrip().startswith(("[", "{")):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise TermsInvalid(f"{name}: not valid JSON ({e.msg} at character {e.pos + 1})") from None
    return value


def terms_of(p: Mapping[str, Any]) -> Terms:
    """The terms of a request's parameters (a JSON body, a form or a query string)."""
    keep = _decoded(p.get("keep", []), "keep")
    if isinstance(keep, str):
        keep = [keep]
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise TermsInvalid("keep: expected a list of strings")
    glossary = _decoded(p.get("glossary", []), "glossary")
    if isinstance(glossary, dict):
        entries = list(glossary.items())
    elif isinstance(glossary, list) and all(isinstance(e, dict) and set(e) == {"source", "target"} for e in glossary):
        entries = [(e["source"], e["target"]) for e in glossary]
    else:
        raise TermsInvalid(f"glossary: expected {GLOSSARY_SHAPE}")
    if not all(isinstance(s, str) and isinstance(t, str) for s, t in entries):
        raise TermsInvalid(f"glossary: expected {GLOSSARY_SHAPE}, with strings")
    name = p.get("glossary_name", "")
    if not isinstance(name, str):
        raise TermsInvalid("glossary_name: expected a glossary's name (a string)")
    return Terms(tuple(keep), tuple(entries), name.strip())
