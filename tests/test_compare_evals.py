"""bench/compare_evals.py: two real modern_eval reports (sacrebleu scores of two systems on the same
lines) compared per domain, the verdict, and the errors for reports that cannot be compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.compare_evals import SIGNIFICANT, ReportMismatch, compare, main, passes, render
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
    assert render(deltas).splitlines()[-3] == "above the old model on every domain"
    same = compare(old, old, "ours-int8", "ours-int8")
    assert render(same).splitlines()[-3:] == ["not above the old model on: modern, bible",
                                              "significantly below (P(new >= old) < 0.05) on: none",
                                              "significantly above (P(new <= old) < 0.05) on: none"]
    # two identical models: every resample differs by exactly 0
    assert [(d.low, d.high, d.p_not_above, d.p_not_below) for d in same] == [(0.0, 0.0, 1.0, 1.0)] * 2
    assert [d.metric for d in compare(old, new, "ours-int8", "ours-fp32", metric="chrf")] == ["chrf", "chrf"]


def test_the_command_prints_the_table_and_require_gain_sets_the_status(tmp_path: Path, capsys):
    weak, strong = report("ours-int8", {"Click OK."}, tmp_path), report("ours-int8", set(ANSWERS), tmp_path)
    assert main([str(weak), str(strong), "--require-gain"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("| domain | metric | directions | old | new | new - old | 95% interval | P(new <= old) "
                      "| worst direction |")
    assert out[2].startswith("| modern | chrf | 2 |") and out[3].startswith("| bible | bleu | 1 | ")
    assert main([str(strong), str(weak), "--require-gain"]) == 1
    assert main([str(strong), str(weak)]) == 0
    assert capsys.readouterr().out.splitlines()[-3] == "not above the old model on: modern, bible"


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
    assert main([str(a), str(a), "--samples", "0"]) == 2
    assert capsys.readouterr().err == "error: --samples must be at least 1, not 0\n"
    assert main([str(a), str(a), "--system", "ours-fp32"]) == 2
    assert capsys.readouterr().err == f"error: {a}: no system 'ours-fp32' (it holds ours-int8)\n"
    fewer = json.loads(a.read_text())
    fewer["sets"][0]["lines"] = 1
    with pytest.raises(ReportMismatch, match=r"^modern en-de: 2 lines against 1$"):
        compare(json.loads(a.read_text()), fewer, "ours-int8", "ours-int8")


# 40 lines of one direction: enough for the bootstrap to tell a gain on most of them from chance
MANY = {("modern", "en-de"): [Pair("en", "de", f"Open file {i}.", f"Öffnen Sie die Datei {i}.", f"m#{i}")
                              for i in range(40)]}


def many(name: str, right: int, tmp_path: Path) -> Path:
    """A report on MANY: ``right`` lines answered with their reference, the rest with a wrong word."""
    answers = {p.src: p.tgt for p in MANY["modern", "en-de"][:right]}
    system = System("ours-int8", lambda texts, s, t: [answers.get(x, "Haus") for x in texts], frozenset({"en-de"}))
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"settings": {"part": "dev", "limit": 200, "beam": 1}, **evaluate(MANY, [system])}),
                    encoding="utf-8")
    return path


def test_the_bootstrap_tells_a_real_difference_from_chance(tmp_path: Path, capsys):
    weak, strong, close = many("weak", 10, tmp_path), many("strong", 30, tmp_path), many("close", 11, tmp_path)
    old, new = json.loads(weak.read_text()), json.loads(strong.read_text())
    gain, = compare(old, new, "ours-int8", "ours-int8")
    # the resampled corpus scores are sacrebleu's: the point estimate lies inside the interval
    assert gain.low < gain.delta < gain.high and gain.delta > 40
    assert gain.significant_gain and not gain.significant_loss and gain.p_not_above < SIGNIFICANT
    loss, = compare(new, old, "ours-int8", "ours-int8")
    assert loss.significant_loss and loss.p_not_below < SIGNIFICANT
    assert passes([gain], "significant") and not passes([loss], "significant") and passes([gain], "strict")
    # one line better of forty: above by the strict rule, but not beyond chance
    slight, = compare(old, json.loads(close.read_text()), "ours-int8", "ours-int8")
    assert slight.delta > 0 and not slight.significant_gain and not slight.significant_loss
    assert passes([slight], "strict") and not passes([slight], "significant")
    assert main([str(weak), str(close), "--require-significant"]) == 1
    assert main([str(weak), str(strong), "--require-significant"]) == 0
    assert main([str(strong), str(weak), "--require-significant"]) == 1
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "significantly below (P(new >= old) < 0.05) on: modern", "significantly above (P(new <= old) < 0.05) on: none"]


def test_reports_on_different_lines_are_refused(tmp_path: Path):
    a = json.loads(report("ours-int8", {"Click OK."}, tmp_path).read_text())
    b = json.loads(report("ours-int8", {"Click OK."}, tmp_path).read_text())
    b["sets"][0]["outputs"][0]["source"] = "Close the file."
    with pytest.raises(ReportMismatch, match=r"^modern en-de: the reports hold different lines$"):
        compare(a, b, "ours-int8", "ours-int8")
