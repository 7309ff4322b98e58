"""What every command shares (cli/): every option has help and shows its default, the exit
statuses are in every --help, old flag names still work (hidden, with a warning), and
errors are one line."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cli import EXIT_USAGE, options_without_help

ROOT = Path(__file__).resolve().parents[1]


def _parsers() -> dict[str, Callable[[], argparse.ArgumentParser]]:
    from bench.nmt_bench import build_parser as bench
    from clients.loadtest import build_parser as loadtest
    from clients.translate_file import build_parser as translate
    from export.hf_import import build_parser as import_
    from export.onnx_export import build_parser as export
    from export.verify import build_parser as verify
    from server.config import build_parser as serve
    from server.health_probe import build_parser as health
    from training.evaluate import build_parser as evaluate
    from training.train import build_parser as train

    return {"nmt-translate": translate, "nmt-loadtest": loadtest, "nmt-serve": serve, "nmt-export": export,
            "nmt-train": train, "nmt-bench": bench, "nmt-evaluate": evaluate, "nmt-verify": verify,
            "nmt-health": health, "nmt-import": import_}


@pytest.mark.parametrize("command", list(_parsers()))
def test_every_option_has_help_and_shows_its_default(command):
    parser = _parsers()[command]()
    assert parser.prog == command
    assert options_without_help(parser) == []
    text = parser.format_help()
    assert "exit status: 0 " in text and f"; {EXIT_USAGE} a usage or input mistake, nothing done" in text


# (command, old spelling, new spelling, value): the renames of this release.
RENAMES = [
    ("nmt-translate", "--token", "--auth-token", "s3cret"),
    ("nmt-loadtest", "--token", "--auth-token", "s3cret"),
    ("nmt-bench", "--beam-size", "--beam", "2"),
    ("nmt-bench", "--pair", "--directions", "en-de"),
    ("nmt-bench", "--file", "--input", "x.tsv"),
    ("nmt-bench", "--out", "--json", "x.json"),
    ("nmt-bench", "--chart", "--png", "x.png"),
    ("nmt-evaluate", "--out", "--json", "x.json"),
    ("nmt-health", "--tls-client-cert", "--tls-cert", "c.pem"),
    ("nmt-health", "--tls-client-key", "--tls-key", "k.pem"),
]
REQUIRED = {"nmt-translate": ["-s", "en", "-t", "de"], "nmt-loadtest": ["-s", "en", "-t", "de"],
            "nmt-bench": ["--checkpoint", "c", "--package", "p"], "nmt-evaluate": ["ckpt"], "nmt-health": []}


@pytest.mark.parametrize("command, old, new, value", RENAMES, ids=lambda x: str(x))
def test_old_flag_names_still_work_hidden_and_warn(command, old, new, value, capsys):
    parser = _parsers()[command]()
    base = REQUIRED[command]
    assert vars(parser.parse_args([*base, old, value])) == vars(parser.parse_args([*base, new, value]))
    assert capsys.readouterr().err == (f"{command}: warning: {old} is deprecated and will be removed in the next "
                                       f"release; use {new}\n")
    help_words = parser.format_help().replace(",", " ").split()
    assert new in help_words and old not in help_words


def test_a_bad_flag_is_one_line_and_exit_2():
    r = subprocess.run([sys.executable, "-m", "clients.loadtest", "-s", "en", "-t", "de", "--rate", "fast"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == EXIT_USAGE
    assert r.stderr == ("nmt-loadtest: error: argument --rate: expected comma-separated numbers, got 'fast' "
                        "(see nmt-loadtest --help)\n")


def test_a_missing_input_file_is_the_same_mistake_in_every_command(tmp_path):
    missing = tmp_path / "missing.txt"
    give = "does not exist; give a UTF-8 text file, one sentence a line"
    cases = [
        (["clients.translate_file", "-s", "en", "-t", "de", "-i", str(missing)],
         f"nmt-translate: error: -i/--input: {missing} {give}"),
        (["clients.loadtest", "-s", "en", "-t", "de", "-i", str(missing)],
         f"nmt-loadtest: error: -i/--input: {missing} {give}"),
        (["bench.nmt_bench", "--checkpoint", "c", "--package", "p", "--input", str(missing)],
         f"nmt-bench: error: --input: {missing} {give}"),
        (["training.train", "--out", str(tmp_path / "run"), "--directions", "en-de", "--train-files",
          f"en-de={missing}:{missing}"], f"nmt-train: error: corpus file: {missing} {give}"),
        (["export.onnx_export", str(missing), str(tmp_path / "package")],
         f"nmt-export: error: cannot export {missing}: checkpoint {missing} does not exist"),
    ]
    for args, message in cases:
        r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
        assert (r.returncode, r.stderr) == (EXIT_USAGE, message + "\n"), args
    assert not (tmp_path / "run").exists() and not (tmp_path / "package").exists()  # refused before any work


def test_what_a_command_cannot_do_is_refused_before_any_work(tmp_path, tiny_checkpoint):
    """A direction the corpus lacks, a negative step count, a direction the checkpoint was not
    trained for: one line, exit 2, no run directory left behind."""
    run = tmp_path / "run"
    cases = [
        (["training.train", "--out", str(run), "--directions", "en-xx"],
         "nmt-train: error: direction en-xx: the Bible corpus has no language 'xx'; it has de, en, es, fr (for "
         "others, give --train-files)"),
        (["training.train", "--out", str(run), "--max-steps", "-1"],
         "nmt-train: error: train.max_steps is -1; it must be at least 1"),
        (["training.evaluate", str(tiny_checkpoint), "--directions", "de-fr"],
         f"nmt-evaluate: error: {tiny_checkpoint} was not trained for de-fr; it translates en-de, de-en"),
    ]
    for args, message in cases:
        r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
        assert (r.returncode, r.stderr) == (EXIT_USAGE, message + "\n"), args
    assert not run.exists()
