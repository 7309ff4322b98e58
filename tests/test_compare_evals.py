"""bench/compare_evals.py: two real modern_eval reports (sacrebleu scores of two systems on the same
lines) compared per domain, the verdict, and the errors for reports that cannot be compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.compare_evals import ReportMismatch, compare, main, render
from bench.modern_eval import System, evaluate
from corpus.bible import Pair

SETS = {("modern", "en-de"): [Pair("en", "de", "Click OK.", "Klicken Sie auf OK.", "a#1"),
                              Pair("en", "de", "Open the file.", "Öffnen Sie die Datei.", "a#2")],
        ("modern", "de-en"): [Pair("de", "en", "Klicken Sie auf OK.", "Click OK.", "a#1")],
        ("bible", "en-de"): [Pair("en", "de", "In the beginning was the Word.", "Im Anfang war das Wort.", "1")]}
ANSWERS = {"Click OK.": "Klicken Sie auf OK.", "Open the file.": "Öffnen Sie die Datei.",
           "Klicken Sie auf OK.": "Click OK.", "In the beginning was the Word.": "Im Anfang war das Wort."}


def report(name: str, right: set[str], tmp_path: Path, limit: int = 200) -> Path:
    """A report as ``modern_eval --json`` writes it: ``name`` answers the sources in ``right`` with
    their reference and the rest with a wrong word."""
    system = System(name, lambda texts, s, t: [ANSWERS[x] if x in right else "Haus" for x in texts],
                    frozenset({"en-de", "de-en"}))
    data = {"settings": {"part": "dev", "limit": limit, "beam": 1}, **evaluate(SETS, [system])}
    path = tmp_path / f"{name}-{len(right)}-{limit}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_each_domain_is_the_mean_over_its_directions_bleu_for_the_bible(tmp_path: Path):
    old = json.loads(report("ours-int8", {"Click OK."}, tmp_path).read_text())
    new = json.loads(report("ours-fp32", set(ANSWERS), tmp_path).read_text())
    deltas = compare(old, new, "ours-int8", "ours-fp32")
    assert [(d.split, d.metric, d.directions) for d in deltas] == [("modern", "chrf", 2), ("bible", "bleu", 1)]
    modern, bible = deltas
    scores = {(s["split"], s["direction"]): s["scores"]["ours-int8"] for s in old["sets"]}
    assert modern.old == pytest.approx((scores["modern", "en-de"]["chrf"] + scores["modern", "de-en"]["chrf"]) / 2)
    assert modern.new == 100.0 and bible.new == 100.0 and bible.old == scores["bible", "en-de"]["bleu"]
    assert modern.worst[0] == "en-de" and modern.worst[1] == pytest.approx(100.0 - scores["modern", "en-de"]["chrf"],
                                                                           abs=0.01)
    assert render(deltas).splitlines()[-1] == "above the old model on every domain"
    same = compare(old, old, "ours-int8", "ours-int8")
    assert render(same).splitlines()[-1] == "not above the old model on: modern, bible"
    assert [d.metric for d in compare(old, new, "ours-int8", "ours-fp32", metric="chrf")] == ["chrf", "chrf"]


def test_the_command_prints_the_table_and_require_gain_sets_the_status(tmp_path: Path, capsys):
    weak, strong = report("ours-int8", {"Click OK."}, tmp_path), report("ours-int8", set(ANSWERS), tmp_path)
    assert main([str(weak), str(strong), "--require-gain"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| domain | metric | directions | old | new | new - old | worst direction |"
    assert out[2].startswith("| modern | chrf | 2 |") and out[3].startswith("| bible | bleu | 1 | ")
    assert main([str(strong), str(weak), "--require-gain"]) == 1
    assert main([str(strong), str(weak)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "not above the old model on: modern, bible"


def test_reports_that_cannot_be_compared_are_one_clear_error(tmp_path: Path, capsys):
    a = report("ours-int8", {"Click OK."}, tmp_path)
    other_limit = report("ours-int8", {"Click OK."}, tmp_path, limit=300)
    assert main([str(a), str(other_limit)]) == 2
    assert capsys.readouterr().err == "error: the reports differ in --limit (200 against 300): run both the same way\n"
    not_json = tmp_path / "x.json"
    not_json.write_text("{", encoding="utf-8")
    assert main([str(a), str(not_json)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {not_json}: cannot read a modern_eval report (")
    not_report = tmp_path / "y.json"
    not_report.write_text("[]", encoding="utf-8")
    assert main([str(not_report), str(a)]) == 2
    assert capsys.readouterr().err == (f"error: {not_report}: not a bench.modern_eval --json report "
                                       "(no 'sets' and 'systems')\n")
    assert main([str(a), str(a), "--system", "ours-fp32"]) == 2
    assert capsys.readouterr().err == f"error: {a}: no system 'ours-fp32' (it holds ours-int8)\n"
    fewer = json.loads(a.read_text())
    fewer["sets"][0]["lines"] = 1
    with pytest.raises(ReportMismatch, match=r"^modern en-de: 2 lines against 1$"):
        compare(json.loads(a.read_text()), fewer, "ours-int8", "ours-int8")
