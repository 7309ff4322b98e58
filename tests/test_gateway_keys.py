"""Per-key limits of the gateway (gateway/keys.py): the keys file's formats, each key held to
its own limits with 429 and Retry-After (LibreTranslate's "Slowdown:"), characters counted as
LibreTranslate counts them, usage on /metrics by the key's id; a real gateway in front of a real
server with the tiny model, on a clock the test moves."""

from __future__ import annotations

import pytest

from cli import EXIT_USAGE
from gateway.config import GatewayConfig, parse_args
from gateway.keys import LIBRE_SLOWDOWN, KeyRing, Limits, Refused, hashed_id, parse_keys
from gateway.metrics import OFF, UNAUTHORIZED
from tests.gateway_harness import GatewayThread
from tests.server_harness import ServerThread

KEYS = """\
# the gateway's users: a table per key, named as metrics name it
[keys.alice]
key = "k-alice"
requests_per_minute = 2

[keys.bob]
key = "k-bob"
chars_per_minute = 100
chars_per_day = 1000

[keys.carol]
key = "k-carol"
"""


class Clock:
    """time.monotonic for the gateway's limits, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package)
    yield s
    s.stop()


@pytest.fixture()
def keyed(server, tmp_path):
    """A gateway with KEYS and /metrics, its clock, and its metrics token."""
    (tmp_path / "keys.toml").write_text(KEYS)
    (tmp_path / "metrics-token").write_text("m-token\n")
    cfg = parse_args(["--grpc-address", server.address, "--api-keys-file", str(tmp_path / "keys.toml"), "--metrics",
                      "--metrics-token-file", str(tmp_path / "metrics-token")], {})
    clock = Clock()
    g = GatewayThread(cfg, cfg.api_keys(), metrics_token=cfg.metrics_token(), clock=clock)
    yield g, clock
    g.stop()


def translate(g: GatewayThread, key: str, q: str | list[str] = "Jesus wept.", path: str = "/translate"):
    return g.client.post(path, json={"q": q, "source": "en", "target": "de", "api_key": key})


def metrics(g: GatewayThread) -> str:
    r = g.client.get("/metrics", headers={"authorization": "Bearer m-token"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text


def sample(text: str, name: str) -> float:
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")), 0.0)


def test_a_key_with_two_requests_a_minute_gets_two_then_429_with_retry_after(keyed):
    g, clock = keyed
    assert [translate(g, "k-alice").status_code for _ in range(2)] == [200, 200]
    r = translate(g, "k-alice")
    assert r.status_code == 429 and r.headers["retry-after"] == "30"
    assert r.json() == {"error": f"{LIBRE_SLOWDOWN} 2 requests per minute for this API key; retry in 30 s"}
    # The server is not busy: another key is served at once, as is the same key on another route.
    assert translate(g, "k-carol").status_code == 200
    assert g.client.post("/detect", json={"q": "Jesus wept.", "api_key": "k-alice"}).status_code == 429
    clock.now += 29
    assert translate(g, "k-alice").status_code == 429
    clock.now += 1  # Retry-After's seconds later: one request's worth is back
    assert translate(g, "k-alice").status_code == 200
    assert translate(g, "k-alice", path="/v1/translate").status_code == 429


def test_a_character_limit_refuses_a_long_text_and_accepts_a_short_one(keyed):
    g, clock = keyed
    sixty = "Jesus wept. " * 5
    assert translate(g, "k-bob", sixty).status_code == 200
    r = translate(g, "k-bob", [sixty[:30], sixty[:30]])  # a list counts its texts together: 60 of 40 left
    assert r.status_code == 429 and r.json()["error"].startswith(f"{LIBRE_SLOWDOWN} 100 chars per minute")
    assert int(r.headers["retry-after"]) == 12  # 20 characters more come back in 12 s
    assert translate(g, "k-bob", sixty[:30]).status_code == 200  # 30 of 40: fits
    # More than a whole minute's allowance can never pass: not "wait", but too much.
    r = translate(g, "k-bob", "x" * 101)
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: request (101 characters) exceeds this API "
                                                        "key's limit of 100 characters per minute"})
    assert "retry-after" not in r.headers
    clock.now += 60
    r = g.client.post("/translate_file", data={"source": "en", "target": "de", "api_key": "k-bob"},
                      files={"file": ("a.txt", ("Jesus wept.\n" * 9).encode())})  # 99 characters to translate
    assert r.status_code == 200, r.text
    assert translate(g, "k-bob", "Jesus wept.").status_code == 429


def test_usage_by_key_id_on_metrics_and_never_the_key(keyed):
    g, _ = keyed
    translate(g, "k-alice")
    translate(g, "k-bob", "Peace.")
    for _ in range(3):
        translate(g, "k-alice")
    text = metrics(g)
    assert sample(text, 'nmt_http_key_requests_total{key="alice"}') == 2
    assert sample(text, 'nmt_http_key_characters_total{key="alice"}') == 2 * len("Jesus wept.")
    assert sample(text, 'nmt_http_key_refused_total{key="alice",limit="requests_per_minute"}') == 2
    assert sample(text, 'nmt_http_key_characters_total{key="bob"}') == len("Peace.")
    assert "k-alice" not in text and "k-bob" not in text
    assert g.client.get("/metrics").status_code == 401
    assert g.client.get("/metrics", headers={"authorization": "Bearer k-alice"}).json() == {"error": UNAUTHORIZED}


def test_metrics_are_off_unless_asked_for(server):
    g = GatewayThread(GatewayConfig(grpc_address=server.address))
    try:
        r = g.client.get("/metrics")
        assert (r.status_code, r.json()) == (404, {"error": OFF})
    finally:
        g.stop()


def test_a_plain_key_list_still_loads_without_limits_named_by_a_hash(server, tmp_path):
    (tmp_path / "keys").write_text("# two keys\nk-alice\n\n  k-bob  \nk-alice\n")
    cfg = parse_args(["--grpc-address", server.address, "--api-keys-file", str(tmp_path / "keys"), "--metrics"], {})
    keys = cfg.api_keys()
    assert [(k.id, k.secret, k.limits) for k in keys] == [(hashed_id("k-alice"), "k-alice", Limits()),
                                                          (hashed_id("k-bob"), "k-bob", Limits())]
    assert "k-alice" not in repr(keys) and hashed_id("k-alice").startswith("key-")
    g = GatewayThread(cfg, keys)
    try:
        assert [translate(g, "k-bob").status_code for _ in range(5)] == [200] * 5
        assert translate(g, "k-eve").status_code == 403
        assert sample(g.client.get("/metrics").text, f'nmt_http_key_requests_total{{key="{hashed_id("k-bob")}"}}') == 5
    finally:
        g.stop()


@pytest.mark.parametrize("content, message", [
    ("[keys.alice]\nkey = 'k-secret'\nrequests_per_minute = 2\nrequests_per_minue = 3\n",
     "[keys.alice]: unknown setting 'requests_per_minue'; known: key, requests_per_minute, requests_per_day, "
     "chars_per_minute, chars_per_day"),
    ("[keys.alice]\nkey = 'k-secret'\nchars_per_day = -5\n",
     "[keys.alice]: chars_per_day must be a whole number above 0 (leave it out for no limit), not -5"),
    ("[keys.alice]\nkey = 'k-secret'\nchars_per_day = 0\n",
     "[keys.alice]: chars_per_day must be a whole number above 0 (leave it out for no limit), not 0"),
    ("[keys.alice]\nrequests_per_day = 10\n", "[keys.alice]: key must be a string without surrounding spaces"),
    ("[keys.alice]\nkey = 'k-secret'\n[keys.bob]\nkey = 'k-secret'\n", "[keys.bob]: this key is given twice"),
    ("[keys.'a b']\nkey = 'k-secret'\n",
     "[keys.a b]: a key's name is 1 to 64 letters, digits, '_', '.' or '-' (it names the key in metrics and logs)"),
    ("[alice]\nkey = 'k-secret'\n",
     "give one [keys.NAME] table per key (with key = \"...\" and its limits); unknown: 'alice'"),
    ("[keys.alice\nkey = 'k-secret'\n", "is not valid TOML: "),
    ("# no table first\nkeys.alice.key = 'k-secret'\n", ": line 2 is not a key: a key is one word (a keys file with "
                                                        "limits starts with a [keys.NAME] table)"),
])
def test_a_malformed_keys_file_stops_the_start_with_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "keys.toml"
    path.write_text(content)
    with pytest.raises(SystemExit) as e:
        parse_args(["--api-keys-file", str(path)], {})
    assert e.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"nmt-http: error: --api-keys-file: {path}") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err and "k-secret" not in err


def test_the_metrics_token_needs_metrics(tmp_path, capsys):
    (tmp_path / "token").write_text("t\n")
    with pytest.raises(SystemExit):
        parse_args(["--metrics-token-file", str(tmp_path / "token")], {})
    assert "--metrics-token-file guards /metrics, which is off: add --metrics" in capsys.readouterr().err


def test_buckets_refill_evenly_and_a_refusal_takes_nothing():
    clock = Clock()
    [key] = parse_keys("[keys.a]\nkey = 'k-secret'\nrequests_per_day = 3\nchars_per_minute = 60\n", "keys")
    ring = KeyRing([key], clock)
    ring.spend(key, 50)
    with pytest.raises(Refused) as refused:  # 50 characters, 10 left: nothing is taken
        ring.spend(key, 50)
    assert (refused.value.status, refused.value.retry_after) == (429, 40)
    clock.now += 40
    ring.spend(key, 50)
    clock.now += 60
    ring.spend(key, 1)  # the third of the day's 3 requests: the refusal above took none
    with pytest.raises(Refused) as refused:  # the fourth: a request's worth comes back in 8 h, 100 s of it passed
        ring.spend(key, 1)
    assert (refused.value.status, refused.value.retry_after) == (429, 28700)
    assert ring.find("k-secret") is key and ring.find("k-secret ") is None and ring.find("") is None
