"""The soak's judge of hostile-text answers (bench/load/soak.py): what counts as unfaithful."""

from __future__ import annotations

import pytest

from bench.load import hostile, soak


@pytest.mark.parametrize(("source", "output", "problem"), [
    ("The price is €.", "Der Preis ist €.", None),
    ("The price is €.", "Der Kaufpreis ist <ph1>.", "holds <ph1>"),
    ("Type <ph1> as it is.", "Geben Sie <ph1> so ein.", None),
    ("<2fr> Select the cells.", "<2fr> Wählen Sie die Zellen.", None),
    ("Select the cells.", "<2fr> Wählen Sie die Zellen.", "holds <2fr>"),
    ("The values 150 and 157 are valid.", "Die Werte 150 und 143 sind gültig. 157", "numbers the text does not: 143"),
    ("...", "...", None),
    ("...", "und sie schweigen nicht", "letterless '...' came back as"),
    ("\x00\x00\x00", "<ph1>", "letterless"),
])
def test_unfaithful(source: str, output: str, problem: str | None) -> None:
    found = soak.unfaithful(source, output)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_every_hostile_text_is_faithful_to_itself_and_every_bomb_is_http() -> None:
    assert all(soak.unfaithful(t, t) is None for t in soak.HOSTILE_TEXTS)
    assert soak.EXPECTED.keys() == soak.METHOD.keys() == soak.MIX.keys()
    assert all(raw.startswith(b"POST /translate HTTP/1.1\r\n") for raw in hostile.BOMBS.values())
