"""The mixed-load benchmark (bench/load/mixed.py) end to end against a real server with the tiny
model: it runs its three phases, reports every figure and the same answers idle and mixed.
Timings are printed by the tool, never asserted here."""

from __future__ import annotations

import json

from bench.load import mixed


def test_three_phases_report_and_answers_equal_idle_and_mixed(tiny_package, tmp_path, capsys):
    out = tmp_path / "mixed.json"
    argv = ["--package", str(tiny_package), "--int8", "--seconds", "1", "--bulk-texts", "4", "--max-batch-rows", "8",
            "--json", str(out)]
    assert mixed.main(argv) == 0
    r = json.loads(out.read_text())
    assert r["command"] == "python -m bench.load.mixed " + " ".join(argv)
    assert r["interactive_idle"]["requests"] > 0 and r["interactive_mixed"]["requests"] > 0
    assert r["bulk_alone"]["sentences"] >= 4 * r["bulk_alone"]["requests"] > 0  # a verse may be two sentences
    assert r["bulk_mixed"]["sentences"] >= 4 * r["bulk_mixed"]["requests"] > 0
    same, compared = map(int, r["same_translations"].split("/"))
    assert same == compared  # a sentence decoded in a mixed batch equals it decoded alone
    assert "| interactive p99 ms |" in capsys.readouterr().out
