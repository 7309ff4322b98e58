"""Placeholder protection (engine/placeholders.py): the spans it finds, protect / restore,
training's protect_pair, and protection where text becomes ids and ids become text outside
training: the gRPC server (through a real server) and export/verify.py ``translate_onnx``."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from engine.decoding import DecodeOptions, Job, decode_all
from engine.defaults import default_max_len
from engine.package import ModelPackage, write_manifest
from engine.placeholders import SYMBOLS, Protected, Protector, find_spans, protect, protect_pair, restore
from engine.runtime import Runtime, RuntimeOptions
from server.config import ServerConfig
from server.service import Segment, response_bound
from tests.server_harness import ServerThread, request


def kinds(text: str) -> list[tuple[str, str]]:
    return [(s.kind, s.text) for s in find_spans(text)]


# ------------------------------------------------------------------ the module


@pytest.mark.parametrize(("text", "expected"), [
    ("See https://example.org/a.b. Next.", [("url", "https://example.org/a.b")]),
    ("Go to www.example.org/docs?x=1). Or ftp://files.example.org/pub!",
     [("url", "www.example.org/docs?x=1"), ("url", "ftp://files.example.org/pub")]),
    ("Mail j.doe+x@mail.example.com, or admin@example.org.",
     [("email", "j.doe+x@mail.example.com"), ("email", "admin@example.org")]),
    ("Open C:\\Users\\me\\a.txt or ~/src/main.py and /etc/hosts.",
     [("path", "C:\\Users\\me\\a.txt"), ("path", "~/src/main.py"), ("path", "/etc/hosts")]),
    ("Run `ls -la` with $(ARG1), %1, %s and {0}.",
     [("code", "`ls -la`"), ("format", "$(ARG1)"), ("format", "%1"), ("format", "%s"), ("format", "{0}")]),
    ("Version 3.5 costs 1,000 or 25 MB at 10:30, not v2 or a3b.",
     [("number", "3.5"), ("number", "1,000"), ("number", "25"), ("number", "10:30")]),
    ("A literal <ph3> here.", [("symbol", "<ph3>")]),
    ("In the beginning was the Word.", []),
])
def test_find_spans_kinds_and_a_sentences_punctuation_stays_out(text, expected):
    assert kinds(text) == expected


def test_at_most_twelve_spans_the_rest_stays_text():
    text = " ".join(str(i) for i in range(1, 16))
    p = protect(text)
    assert p.originals == tuple(str(i) for i in range(1, 13))
    assert p.text == " ".join(SYMBOLS) + " 13 14 15"


def test_protect_numbers_spans_in_source_order():
    assert protect("Visit https://x.org/a, then mail a@b.io about 25 MB and $(ARG1).") == Protected(
        "Visit <ph1>, then mail <ph2> about <ph3> MB and <ph4>.", ("https://x.org/a", "a@b.io", "25", "$(ARG1)"))
    assert protect("Jesus wept.") == Protected("Jesus wept.", ())


def test_restore_puts_back_appends_the_dropped_and_removes_made_up_ones():
    originals = ("https://x.org", "a@b.io", "25", "$(ARG1)")
    assert restore("Besuche <ph1> und <ph2>: <ph3> MB, <ph4>.", originals) == \
        "Besuche https://x.org und a@b.io: 25 MB, $(ARG1)."
    assert restore("Besuche <ph1>, dann <ph3> ", originals) == "Besuche https://x.org, dann 25 a@b.io $(ARG1)"
    assert restore("a <ph9>b<ph1>", ("x",)) == "a bx"  # <ph9>: the source had one placeholder
    assert restore("<ph2> <ph2>", ("x", "y")) == "y y x"  # every copy is put back
    assert restore("kein <ph1>", ()) == "kein <ph1>"  # nothing protected: the output as it is


def test_protect_pair_replaces_only_what_the_target_copies_in_source_order():
    assert protect_pair("Page 5 of 15 at https://x.org and 3.5", "Seite 5 von 15 bei https://x.org") == (
        "Page <ph1> of <ph2> at <ph3> and 3.5", "Seite <ph1> von <ph2> bei <ph3>")
    assert protect_pair("5 apples", "15 Äpfel") == ("5 apples", "15 Äpfel")  # whole numbers only
    assert protect_pair("A 5 and 15", "B 15 and 5") == ("A <ph1> and <ph2>", "B <ph2> and <ph1>")
    assert protect_pair("Mail a@b.io now", "Schreib a@b.io.") == ("Mail <ph1> now", "Schreib <ph1>.")


def test_the_protector_is_on_only_with_every_symbol():
    vocab = {s: i for i, s in enumerate(SYMBOLS, start=10)}
    on = Protector.for_pieces(lambda p: vocab.get(p, 1), 1)
    assert on.enabled and on.protect("at 25 MB") == Protected("at <ph1> MB", ("25",))
    del vocab["<ph12>"]
    off = Protector.for_pieces(lambda p: vocab.get(p, 1), 1)
    assert not off.enabled and off.protect("at 25 MB") == Protected("at 25 MB", ())


# ------------------------------------------------------------------ a package whose tokenizer has the symbols

TEXT = "See https://example.org/a.b. Mail admin@example.org about 25 MB with $(ARG1)."
SENTENCES = ["See https://example.org/a.b.", "Mail admin@example.org about 25 MB with $(ARG1)."]
SPANS = [["https://example.org/a.b"], ["admin@example.org", "25", "$(ARG1)"]]


def retokenized(base, out, corpus, symbols):
    """The package ``base`` with a tokenizer of the same size trained with ``symbols`` (the
    placeholders or none). Its graphs never saw these ids, which is the point: restore brings
    the spans back whatever the model writes, and without symbols nothing is protected."""
    from training.tokenizer import train_tokenizer

    shutil.copytree(base, out)
    package = ModelPackage.load(out)
    sentences = [line.split("\t")[0] for key in ("copy_en", "copy_de") for line in corpus[key].read_text().splitlines()]
    tok = train_tokenizer(sentences, out / "spm", vocab_size=package.dims.vocab_size, languages=["en", "de"],
                          symbols=symbols)
    assert tok.vocab_size == package.dims.vocab_size and tok.protector.enabled == bool(symbols)
    shutil.move(out / "spm.model", out / "tokenizer.model")
    (out / "spm.vocab").unlink()
    write_manifest(out, dataclasses.replace(package.manifest,
                                            language_tags={lang: tok.tag_id(lang) for lang in ("en", "de")}))
    return out


@pytest.fixture(scope="module")
def ph_package(tmp_path_factory, tiny_package, toy_corpus):
    """A package whose tokenizer has ``<ph1>``..``<ph12>``: the tiny one when training gave it
    the symbols (``DataConfig.placeholders``), else the tiny one with such a tokenizer."""
    from training.tokenizer import Tokenizer

    if Tokenizer(tiny_package / "tokenizer.model").protector.enabled:
        return tiny_package
    return retokenized(tiny_package, tmp_path_factory.mktemp("ph") / "ph", toy_corpus, SYMBOLS)


@pytest.fixture(scope="module")
def plain_package(tmp_path_factory, tiny_package, toy_corpus):
    """A package whose tokenizer lacks the symbols, as models/default's does."""
    return retokenized(tiny_package, tmp_path_factory.mktemp("plain") / "plain", toy_corpus, ())


def ask(model: str, *texts: str, **options):
    req = request(*texts, **options)
    req.model = model
    return req


def reference(package_dir, text: str, tgt: str = "de", protect: bool = True) -> str:
    """Greedy decode of one sentence through the engine, protected (with ``protect``) when the
    tokenizer has the symbols: what the server must answer for it."""
    import sentencepiece as spm

    package = ModelPackage.load(package_dir)
    sp = spm.SentencePieceProcessor(model_file=str(package.tokenizer_path))
    p = Protector.for_pieces(sp.piece_to_id, sp.unk_id()).protect(text) if protect else Protected(text, ())
    ids = package.special_ids
    src = package.source_ids(sp.encode(p.text), tgt)
    cap = min(ServerConfig().max_output_tokens, package.max_target_tokens)
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=1))
    [[hyp]] = decode_all(rt, [Job(src, DecodeOptions(), max_len=default_max_len(len(src), cap), bos=ids["bos"],
                                  eos=ids["eos"], pad=ids["pad"])])
    return restore(sp.decode(hyp.tokens), p.originals)


@pytest.fixture(scope="module")
def server(ph_package, plain_package):
    """One server, two models: ``ph`` (protected) and ``plain`` (no symbols: no protection)."""
    s = ServerThread(ph_package, model=(f"ph={ph_package}", f"plain={plain_package}"))
    yield s
    s.stop()


def test_the_server_protects_spans_and_puts_them_back_in_every_hypothesis(server, ph_package):
    stub = server.stub()
    assert server.running.models["ph"].protector.enabled
    [t] = stub.Translate(ask("ph", TEXT)).translations
    assert [s.source for s in t.segments] == SENTENCES
    assert [s.hypotheses[0].text for s in t.segments] == [reference(ph_package, s) for s in SENTENCES]
    assert t.hypotheses[0].text == " ".join(s.hypotheses[0].text for s in t.segments)
    for seg, spans in zip(t.segments, SPANS):
        assert all(span in seg.hypotheses[0].text for span in spans)
    assert all(span in t.hypotheses[0].text for spans in SPANS for span in spans)

    # n-best: every hypothesis restored; the pieces are the model's, placeholders included.
    [t] = stub.Translate(ask("ph", TEXT, beam_size=3, num_hypotheses=3, return_attention=True)).translations
    assert [len(s.hypotheses) for s in t.segments] == [3, 3] and len(t.hypotheses) == 3
    for seg, spans in zip(t.segments, SPANS):
        for h in seg.hypotheses:
            assert all(span in h.text for span in spans)
            assert not any(s in h.text for s in SYMBOLS)
    assert list(t.segments[1].hypotheses[0].source_pieces[:1]) == ["<2de>"]
    assert [p for p in t.segments[1].hypotheses[0].source_pieces if p.startswith("<ph")] == ["<ph1>", "<ph2>",
                                                                                          "<ph3>"]
    assert [h.text for h in t.hypotheses] == [" ".join(s.hypotheses[i].text for s in t.segments) for i in range(3)]


def test_a_package_without_the_symbols_is_served_as_before(server, plain_package):
    stub = server.stub()
    assert not server.running.models["plain"].protector.enabled
    [t] = stub.Translate(ask("plain", TEXT, return_attention=True)).translations
    assert [s.hypotheses[0].text for s in t.segments] == [reference(plain_package, s, protect=False)
                                                                for s in SENTENCES]
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(plain_package / "tokenizer.model"))
    assert list(t.segments[1].hypotheses[0].source_pieces)[1:-1] == [sp.id_to_piece(i) for i in sp.encode(SENTENCES[1])]


def test_the_response_bound_counts_the_spans_put_back(server):
    model = server.running.models["ph"]
    job = Job([4, 10, 11, 3], DecodeOptions(), max_len=7, bos=2, eos=3, pad=0)
    req = ask("ph", "x" * 120)
    without = response_bound(model, req, [[Segment((0, 120), job)]])
    url = "https://example.org/" + "a" * 80  # 100 bytes, longer than any piece
    assert model.longest_piece_bytes < 100
    with_span = response_bound(model, req, [[Segment((0, 120), job, (url,))]])
    # the sentence's hypothesis and the text's: 7 tokens of up to 100 bytes each, and the span appended
    assert with_span - without == 2 * (7 * (100 - model.longest_piece_bytes) + 101)


def test_translate_onnx_protects_with_the_packages_tokenizer(ph_package, plain_package):
    from export.verify import cpu_runtime, translate_onnx
    from training.tokenizer import Tokenizer

    for package, protected in ((ph_package, True), (plain_package, False)):
        tok = Tokenizer(package / "tokenizer.model")
        assert tok.protector.enabled is protected
        outputs = translate_onnx(cpu_runtime(ModelPackage.load(package)), tok, SENTENCES, "de")
        assert outputs == [reference(package, s, protect=protected) for s in SENTENCES]
        if protected:
            assert all(span in out for out, spans in zip(outputs, SPANS) for span in spans)

