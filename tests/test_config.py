"""Server configuration: settings that would start SERVING and then fail every request are
refused at start-up, naming the flag."""

from __future__ import annotations

import pytest

from server.config import ConfigError, ServerConfig, parse_args


@pytest.mark.parametrize("flags, message", [
    (["--max-queue", "0"], "--max-queue is 0; it must be at least 1"),
    (["--max-batch-rows", "0"], "--max-batch-rows is 0; it must be at least 1"),
    (["--stream-window", "0"], "--stream-window is 0; it must be at least 1"),
    (["--max-texts", "-1"], "--max-texts is -1; it must be at least 1"),
    (["--max-queue", "8"], "--max-queue 8 is smaller than --max-texts 64: a request of more texts than the queue "
                           "holds could never be accepted"),
    (["--max-batch-rows", "4"], "--max-batch-rows 4 is smaller than --max-beam 8: a beam needs one row per "
                                "hypothesis"),
    (["--max-tokens-in-flight", "1000"], "--max-tokens-in-flight 1000 is less than one text at the advertised "
                                         "limits needs (--max-beam x (--max-tokens + --max-output-tokens) = 4096)"),
    (["--port", "70000"], "--port is 70000; ports end at 65535"),
    (["--threads", "-3"], "--threads is -3; it must be at least 0"),
    (["--lameduck-seconds", "-1"], "--lameduck-seconds is -1.0; it must be 0 or more"),
    (["--grace-seconds", "inf"], "--grace-seconds is inf; it must be 0 or more"),
    (["--metrics-port", "-2"], "--metrics-port is -2; give a port, 0 for a free one or -1 for none"),
    (["--metrics-port", "70000"], "--metrics-port is 70000; ports end at 65535"),
    (["--device", "gpu"], "--device is 'gpu'; it must be auto, cuda or cpu"),
    (["--log-level", "loud"], "--log-level is 'loud'; it must be DEBUG, INFO, WARNING or ERROR"),
    (["--host", ""], "--host is empty; give an address such as 127.0.0.1"),
    (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
])
def test_inconsistent_limits_fail_at_start_up(flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--model", "x", *flags], {})
    assert e.value.code == 2
    assert capsys.readouterr().err == f"nmt-serve: error: {message} (see nmt-serve --help)\n"


def test_a_bad_environment_variable_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--model", "x"], {"NMT_MAX_TEXTS": "many"})
    assert e.value.code == 2
    assert capsys.readouterr().err == ("nmt-serve: error: NMT_MAX_TEXTS='many': expected an integer "
                                       "(see nmt-serve --help)\n")


def test_the_server_listens_on_this_machine_only_unless_told():
    cfg = parse_args(["--model", "x"], {})
    assert (cfg.host, cfg.metrics_host) == ("127.0.0.1", "127.0.0.1")
    assert parse_args(["--model", "x"], {"NMT_HOST": "0.0.0.0", "NMT_METRICS_HOST": "0.0.0.0"}).host == "0.0.0.0"


def test_every_setting_has_help_with_its_default_and_variable():
    from dataclasses import fields

    from server.config import build_parser

    text = " ".join(build_parser().format_help().split())
    for f in fields(ServerConfig):
        assert f.metadata["help"]
    assert "--threads THREADS onnxruntime intra-op threads on the CPU; 0 = its default (default: 0; $NMT_THREADS)" \
        in text
    assert "(default: 127.0.0.1; $NMT_HOST)" in text and "(default: on; $NMT_INT8)" in text


def test_consistent_small_limits_are_fine():
    cfg = parse_args(["--model", "x", "--max-queue", "8", "--max-texts", "8", "--max-beam", "1",
                      "--max-batch-rows", "1"], {})
    assert (cfg.max_queue, cfg.max_texts, cfg.max_batch_rows) == (8, 8, 1)


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigError) as e:
        ServerConfig(max_queue=0, stream_window=0)
    assert str(e.value) == "--max-queue is 0; it must be at least 1; --stream-window is 0; it must be at least 1"


def test_the_token_comes_from_a_file_or_the_environment(tmp_path):
    (tmp_path / "token").write_text("  s3cret\n")
    assert parse_args(["--model", "x", "--auth-token-file", str(tmp_path / "token")], {}).bearer_token() == "s3cret"
    assert parse_args(["--model", "x"], {"NMT_AUTH_TOKEN": "t0ken"}).bearer_token() == "t0ken"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        ServerConfig(auth_token_file=str(tmp_path / "empty")).bearer_token()
    with pytest.raises(ConfigError, match="cannot read"):
        ServerConfig(auth_token_file=str(tmp_path / "missing")).bearer_token()
    assert ServerConfig(auth_token="x").redacted()["auth_token"] == "***"


def test_the_sentence_limit_is_automatic_or_within_texts_and_queue(capsys):
    from server.config import SENTENCES_PER_TEXT

    assert ServerConfig(max_texts=8).sentences_per_request == 8 * SENTENCES_PER_TEXT
    assert ServerConfig(max_texts=64, max_queue=100).sentences_per_request == 100
    assert ServerConfig(max_sentences=300).sentences_per_request == 300
    with pytest.raises(SystemExit):
        parse_args(["--model", "x", "--max-sentences", "2000"], {})
    assert ("--max-sentences 2000 must be between --max-texts 64 and --max-queue 1024: each text is one "
            "sentence at least, and a request's sentences wait in the queue together") in capsys.readouterr().err


def test_a_model_needs_a_name_and_a_directory():
    with pytest.raises(ConfigError) as e:
        ServerConfig(model=("=packages/default", "de=", "ok=packages/default"))
    assert str(e.value) == ("--model '=packages/default': the name before '=' is empty; give NAME=DIR, or DIR alone "
                            "(named after the directory); --model 'de=': no directory; give NAME=DIR or DIR")


@pytest.mark.parametrize(("flag", "allow_spinning"), [(False, "0"), (True, None)])
def test_the_server_never_spins_unless_asked(tiny_package, flag, allow_spinning):
    """nmt-serve's sessions: threads that never spin (SERVER_SPIN), or onnxruntime's own spinning
    with --spin-threads; never the offline engines' spinning within runs."""
    from server.main import load_models
    from server.metrics import Metrics
    from tests.server_harness import session_entry

    models = load_models(ServerConfig(model=(str(tiny_package),), threads=2, spin_threads=flag), Metrics())
    decoder = next(iter(models.values())).scheduler.rt.decoder
    entries = {key: session_entry(decoder, key)
               for key in ("session.intra_op.allow_spinning", "session.force_spinning_stop")}
    assert entries == {"session.intra_op.allow_spinning": allow_spinning, "session.force_spinning_stop": None}
