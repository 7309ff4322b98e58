"""nmt-import by model id (export/hf_import.py's fetch): huggingface_hub's snapshot_download against
a hub served from this process (the file API it calls, on 127.0.0.1, pointed at with HF_ENDPOINT),
holding a small Marian model built with Transformers."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pytest

from export.hf_import import import_model, main
from export.hub import ImportRefused, fetch, hub_id, weight_files
from tests.test_hf_import import engine_decode

REPO, SHA = "tiny-org/opus-mt-en-de", "0123456789abcdef0123456789abcdef01234567"


class Hub:
    """Repositories (id -> {file name: bytes}) served as the hub's file API serves them: the
    model info with its siblings, and each file at /{id}/resolve/{revision}/{name} with the
    headers huggingface_hub's file_download reads (X-Repo-Commit, ETag, Content-Length). Every
    repository is at commit ``sha``, which a test may change (a new revision)."""

    def __init__(self, repos: dict[str, dict[str, bytes]], gated: tuple[str, ...] = ()):
        self.repos, self.gated, self.requests, self.sha = repos, gated, [], SHA
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                self.answer(body=True)

            def answer(self, body: bool):
                path = unquote(urlparse(self.path).path)
                hub.requests.append((self.command, path))
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 4:
                    repo, rest = "/".join(parts[2:4]), parts[4:]
                    if not self.known(repo):
                        return
                    if rest[:1] == ["revision"] and rest[1:] not in (["main"], [hub.sha]):
                        return self.error(404, "RevisionNotFound")
                    files = hub.repos[repo]
                    return self.send(json.dumps({"id": repo, "modelId": repo, "sha": hub.sha, "private": False,
                                                 "siblings": [{"rfilename": n} for n in sorted(files)]}).encode(),
                                     {"Content-Type": "application/json"}, body)
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                    if not self.known(repo):
                        return
                    if name not in hub.repos[repo]:
                        return self.error(404, "EntryNotFound")
                    data = hub.repos[repo][name]
                    return self.send(data, {"X-Repo-Commit": hub.sha, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                                            "Content-Type": "application/octet-stream"}, body)
                self.error(404, "")

            def known(self, repo: str) -> bool:
                if repo in hub.gated:
                    self.error(403, "GatedRepo")
                    return False
                if repo not in hub.repos:
                    self.error(404, "RepoNotFound")
                    return False
                return True

            def error(self, status: int, code: str):
                headers = {"X-Error-Code": code} if code else {}
                self.send(json.dumps({"error": code or "not found"}).encode(), headers, True, status)

            def send(self, data: bytes, headers: dict[str, str], body: bool, status: int = 200):
                self.send_response(status)
                for k, v in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(k, v)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(sharp_dir, tmp_path, monkeypatch):
    hf_dir = sharp_dir
    files = {p.name: p.read_bytes() for p in hf_dir.iterdir() if p.is_file()}
    files["tf_model.h5"] = b"not fetched"  # files the import does not read stay on the hub
    files["pytorch_model.bin"] = b"not fetched either: model.safetensors is there"
    server = Hub({REPO: files}, gated=("tiny-org/gated",))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield server
    server.close()


def test_a_model_id_imports_as_its_directory_does(hub, sharp, tmp_path, monkeypatch):
    hf_dir, from_dir = sharp
    package = import_model(REPO, tmp_path / "by-id", log=lambda *_: None)
    snapshot = tmp_path / "hf-home" / "hub" / "models--tiny-org--opus-mt-en-de" / "snapshots" / SHA
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(
        p.name for p in hf_dir.iterdir() if p.is_file())  # config, weights, tokenizer: no h5, no .bin
    assert package.provenance["hub_model_id"] == REPO and package.provenance["hub_revision"] == SHA
    assert package.dims == from_dir.dims and package.special_ids == from_dir.special_ids
    assert package.pairs == from_dir.pairs == ("en-de",)
    assert (package.path / "vocab.json").read_bytes() == (from_dir.path / "vocab.json").read_bytes()
    tokenizer = package.load_tokenizer()
    sources = [package.source_ids(tokenizer.encode(text), "de") for text in
               ("the cat sat on the mat", "a dog can see the man", "no hat", "the mat sat on a dog cat")]
    assert engine_decode(package, sources, 1) == engine_decode(from_dir, sources, 1)
    assert engine_decode(package, sources, 4) == engine_decode(from_dir, sources, 4)
    # Offline, the id is found in the cache; the hub is not asked again.
    before = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch(REPO, log=lambda *_: None) == snapshot
    assert len(hub.requests) == before


@pytest.mark.parametrize("model_id, revision, why", [
    ("tiny-org/missing", None, "not found on the hub (no such model, or a private one: log in with `hf auth login` "
                               "or HF_TOKEN)"),
    ("tiny-org/gated", None, "the model is gated: accept its conditions on its page, then log in (`hf auth login` "
                             "or HF_TOKEN)"),
    (REPO, "v9", "the model has no revision v9"),
])
def test_an_id_the_hub_does_not_give_is_one_line_saying_why(hub, tmp_path, capsys, model_id, revision, why):
    argv = [model_id, str(tmp_path / "out")] + (["--revision", revision] if revision else [])
    assert main(argv) == 2
    at = f" at revision {revision}" if revision else ""
    assert capsys.readouterr().err == (
        f"nmt-import: error: cannot fetch the model {model_id}{at}: {why}; download it where the hub can be reached "
        f"(e.g. `hf download {model_id} --local-dir DIR`) and give nmt-import that directory\n")
    assert not (tmp_path / "out").exists()


def test_offline_an_id_not_in_the_cache_says_so(hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main([REPO, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (f"nmt-import: error: cannot fetch the model {REPO}: offline (HF_HUB_OFFLINE is set) and it is not "
                   f"in the hub's cache; download it where the hub can be reached (e.g. `hf download {REPO} "
                   f"--local-dir DIR`) and give nmt-import that directory\n")
    assert hub.requests == []


def test_an_unreachable_hub_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert main([REPO, str(tmp_path / "out")]) == 2
    out = capsys.readouterr()
    assert out.err == (f"nmt-import: error: cannot fetch the model {REPO}: the hub cannot be reached and it is not in "
                       f"the hub's cache; download it where the hub can be reached (e.g. `hf download {REPO} "
                       f"--local-dir DIR`) and give nmt-import that directory\n")


def test_what_counts_as_an_id_and_which_weights_are_fetched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local" / "dir").mkdir(parents=True)
    assert hub_id("Helsinki-NLP/opus-mt-en-de") == "Helsinki-NLP/opus-mt-en-de"
    assert hub_id("hf:facebook/nllb-200-distilled-600M") == "facebook/nllb-200-distilled-600M"
    assert hub_id("local/dir") is None  # an existing directory wins
    assert hub_id("a/b/c") is None and hub_id("~/models/x") is None and hub_id("opus-mt-en-de") is None
    assert weight_files(["model.safetensors", "pytorch_model.bin", "tf_model.h5"]) == ["model.safetensors"]
    assert weight_files(["pytorch_model.bin", "rust_model.ot", "onnx/model.safetensors"]) == ["pytorch_model.bin"]
    assert sorted(weight_files(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                "model.safetensors.index.json", "pytorch_model.bin"])) == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    with pytest.raises(ImportRefused, match="--revision is for a model id"):
        import_model(tmp_path / "local" / "dir", tmp_path / "out", revision="main", log=lambda *_: None)
