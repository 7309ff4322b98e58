"""Placeholder protection (engine/placeholders.py): the spans it finds, protect / restore and
the checks after decoding, training's protect_pair, and protection where text becomes ids and
ids become text outside training: the gRPC server (through a real server: what it decodes,
what it answers, what it never lets through) and export/verify.py ``translate_onnx``."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from engine.decoding import DecodeOptions, Job, decode_all
from engine.defaults import default_max_len
from engine.package import ModelPackage, write_manifest
from engine.placeholders import (
    MAX_PROTECTED,
    SYMBOLS,
    Protected,
    Protector,
    faithful,
    find_spans,
    protect,
    protect_pair,
    restore,
    restore_checked,
)
from engine.runtime import Runtime, RuntimeOptions
from server.config import ServerConfig
from server.service import Segment, response_bound
from tests.sentence_reference import Alone
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
    ("Open report.pdf, setup.tar.gz or README.md; Node.js runs at example.org.",
     [("file", "report.pdf"), ("file", "setup.tar.gz"), ("file", "README.md"), ("file", "Node.js"),
      ("file", "example.org")]),
    # abbreviations end in one letter or a capital, versions in digits: none is a file name
    ("See e.g. the docs, i.e. this, at 10 a.m. with Dr.X, python3.11, v2.0 and z.B. usw.", [("number", "10")]),
    ("In the beginning was the Word.", []),
])
def test_find_spans_kinds_and_a_sentences_punctuation_stays_out(text, expected):
    assert kinds(text) == expected


NINE = "The values 101, 108, 115, 122, 129, 136, 143, 150 and 157 are valid."  # the sentence


def test_a_sentence_with_more_spans_than_the_model_copies_reliably_keeps_them_all_as_text():
    eight = " ".join(str(i) for i in range(1, MAX_PROTECTED + 1))
    p = protect(eight)
    assert MAX_PROTECTED == 8 and p.originals == tuple(eight.split())
    assert p.text == " ".join(SYMBOLS[:8]) and [p.text[s:e] for s, e in p.symbols] == list(SYMBOLS[:8])
    assert protect(NINE) == Protected(NINE, ())  # was: nine placeholders, one written twice by the model
    thirteen = " ".join(str(i) for i in range(1, 13)) + " <ph1> 8013"
    assert protect(thirteen) == Protected(thirteen, ())  # was: the literal <ph1> read as the first span's
    with pytest.raises(ValueError, match="12 placeholder symbols"):
        protect(eight, limit=13)


def test_protect_numbers_spans_in_source_order_and_says_where_the_symbols_are():
    p = protect("Visit https://x.org/a, then mail a@b.io about 25 MB and $(ARG1).")
    assert p == Protected("Visit <ph1>, then mail <ph2> about <ph3> MB and <ph4>.",
                          ("https://x.org/a", "a@b.io", "25", "$(ARG1)"), (6, 23, 35, 48))
    assert [p.text[s:e] for s, e in p.symbols] == ["<ph1>", "<ph2>", "<ph3>", "<ph4>"]
    assert protect("A literal <ph3> and 7.") == Protected("A literal <ph1> and <ph2>.", ("<ph3>", "7"), (10, 20))
    assert protect("Jesus wept.") == Protected("Jesus wept.", ())


def test_restore_puts_back_appends_the_dropped_and_removes_made_up_ones():
    originals = ("https://x.org", "a@b.io", "25", "$(ARG1)")
    assert restore("Besuche <ph1> und <ph2>: <ph3> MB, <ph4>.", originals) == \
        "Besuche https://x.org und a@b.io: 25 MB, $(ARG1)."
    assert restore("Besuche <ph1>, dann <ph3> ", originals) == "Besuche https://x.org, dann 25 a@b.io $(ARG1)"
    assert restore("a <ph9>b<ph1>", ("x",)) == "a bx"  # <ph9>: the source had one placeholder
    assert restore("<ph2> <ph2>", ("x", "y")) == "y y x"  # every copy is put back
    assert restore("Der Kaufpreis ist <ph1>.", ()) == "Der Kaufpreis ist."  # was: "... ist <ph1>."
    assert restore("<ph1> speichern", ()) == "speichern"


def test_restore_checked_wants_every_placeholder_back_exactly_once():
    originals = ("101", "108", "157")
    assert restore_checked("<ph1>, <ph2> und <ph3> sind gültig.", originals) == "101, 108 und 157 sind gültig."
    assert restore_checked("<ph3> und <ph1>, <ph2>.", originals) == "157 und 101, 108."  # any order
    assert restore_checked("<ph1>, <ph2> und <ph2> sind gültig.", originals) is None  # one twice, one left out
    assert restore_checked("<ph1> und <ph2> sind gültig.", originals) is None  # one left out: was appended
    # Placeholders the source did not have are removed, with the space they leave.
    assert restore_checked("Der Kaufpreis ist <ph1>.", ()) == "Der Kaufpreis ist."
    assert restore_checked("<ph1> speichern Sie die Datei.", ()) == "speichern Sie die Datei."
    assert restore_checked("<ph1> und <ph4> x", ("a",)) == "a und x"


@pytest.mark.parametrize(("output", "source", "ok"), [
    ("Die Werte 101, 108, 115, 122, 129, 136, 143, 150 und 157 sind gültig.", NINE, True),
    ("Die Werte 101, 108, 115, 122, 129, 136, 143, 150 und 143 sind gültig. 157", NINE, False),  # the issue's
    ("Sie 013 sehen.", "See 8013.", False),  # digits lost: a number the source lacks
    ("Öffne https://example.org/a.", "Open https://example.org/a.", True),
    ("Öffne https://beispiel.org/a.", "Open https://example.org/a.", False),  # a span rewritten
    ("Öffne es.", "Open https://example.org/a.", False),  # a span left out
    ("Seite 5 von 15", "Page 5 of 15", True),
    ("Seite 15 von 15", "Page 5 of 15", False),  # "5" is not whole in "15"
    ("Es kostet 3 Euro.", "It costs money.", False),  # a number made up
    ("Version 3,5", "Version 3.5", False),  # copied exactly, not localised
    ("Gottes Wort.", "God's word.", True),
])
def test_faithful_holds_every_span_and_no_number_the_source_lacks(output, source, ok):
    assert faithful(output, source) is ok


def test_without_placeholders_only_numbers_are_checked():
    """A model without the symbols was never taught to copy spans: its output may leave one out
    (or be empty), but it never holds a number its source lacks."""
    assert faithful("Öffne es.", "Open https://example.org/a.", spans=False)
    assert faithful("", "Page 8 of 9", spans=False)
    assert not faithful("Sie 013 sehen.", "See 8013.", spans=False)
    assert not faithful("Seite 15 von 15", "Page 5 of 15", spans=False)  # 15 twice


def test_protect_pair_replaces_only_what_the_target_copies_in_source_order():
    assert protect_pair("Page 5 of 15 at https://x.org and 3.5", "Seite 5 von 15 bei https://x.org") == (
        "Page <ph1> of <ph2> at <ph3> and 3.5", "Seite <ph1> von <ph2> bei <ph3>")
    assert protect_pair("5 apples", "15 Äpfel") == ("5 apples", "15 Äpfel")  # whole numbers only
    assert protect_pair("A 5 and 15", "B 15 and 5") == ("A <ph1> and <ph2>", "B <ph2> and <ph1>")
    assert protect_pair("Mail a@b.io now", "Schreib a@b.io.") == ("Mail <ph1> now", "Schreib <ph1>.")


def test_the_protector_is_on_only_with_every_symbol():
    vocab = {s: i for i, s in enumerate(SYMBOLS, start=10)}
    on = Protector.for_pieces(lambda p: vocab.get(p, 1), 1)
    assert on.enabled and on.protect("at 25 MB") == Protected("at <ph1> MB", ("25",), (3,))
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


def verify_reference(package_dir, text: str, tgt: str = "de", protect: bool = True) -> str:
    """What export/verify.py ``translate_onnx`` gives one sentence (greedy, through the engine):
    protected when the tokenizer has the symbols, the dropped spans appended (``restore``)."""
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


@pytest.fixture(scope="module")
def alone(ph_package, plain_package):
    """Each model's sentences translated alone, by the server's rule (tests/sentence_reference.py)."""
    return {"ph": Alone(ph_package), "plain": Alone(plain_package)}


@pytest.fixture
def submitted(server, monkeypatch):
    """Every list of jobs the server hands a model's scheduler during a test, per model: the real
    scheduler does the work, this only records it."""
    seen: dict[str, list[list[Job]]] = {}
    for name, model in server.running.models.items():
        real = model.scheduler.submit_all

        def record(jobs, deadline=None, name=name, real=real, **kwargs):
            seen.setdefault(name, []).append(list(jobs))
            return real(jobs, deadline, **kwargs)

        monkeypatch.setattr(model.scheduler, "submit_all", record)
    return seen


def source_ids(alone: Alone, p: Protected, tgt: str = "de") -> list[int]:
    return alone.package.source_ids(alone.tok.encode(p.text, p.symbols), tgt)


def test_the_server_protects_spans_checks_them_and_answers_every_hypothesis(server, alone, submitted):
    stub = server.stub()
    ph = alone["ph"]
    assert server.running.models["ph"].protector.enabled
    [t] = stub.Translate(ask("ph", TEXT)).translations
    assert [s.source for s in t.segments] == SENTENCES
    # What the model read: the spans as placeholders, at their places.
    first = submitted["ph"][0]
    assert [j.src for j in first] == [source_ids(ph, protect(s)) for s in SENTENCES]
    assert [[ph.tok.id_to_piece(i) for i in j.src if i in ph.placeholders] for j in first] == [
        ["<ph1>"], ["<ph1>", "<ph2>", "<ph3>"]]
    assert [s.hypotheses[0].text for s in t.segments] == [ph.sentence(s) for s in SENTENCES]
    assert t.hypotheses[0].text == " ".join(s.hypotheses[0].text for s in t.segments)
    for seg, spans in zip(t.segments, SPANS):
        assert all(span in seg.hypotheses[0].text for span in spans)

    # n-best: every hypothesis holds its spans (put back, or the sentence as it came), no symbol.
    [t] = stub.Translate(ask("ph", TEXT, beam_size=3, num_hypotheses=3, return_attention=True)).translations
    assert [len(s.hypotheses) for s in t.segments] == [3, 3] and len(t.hypotheses) == 3
    for seg, spans in zip(t.segments, SPANS):
        for h in seg.hypotheses:
            assert faithful(h.text, seg.source) and all(span in h.text for span in spans)
            assert not any(s in h.text for s in SYMBOLS)
            assert not any(ph.tok.piece_to_id(p) in ph.never for p in h.target_pieces)
    assert [h.text for h in t.hypotheses] == [" ".join(s.hypotheses[i].text for s in t.segments) for i in range(3)]


def test_a_hypothesis_that_fails_its_check_is_decoded_again_with_the_spans_as_text(server, alone, submitted):
    """The tiny model copies no placeholder back: each protected sentence is decoded a second
    time with its spans as text, and what fails that check too comes back as it was sent (the
    old server appended the spans it dropped: "... 150 und 143 sind gültig. 157")."""
    ph = alone["ph"]
    sentence = SENTENCES[1]
    p = protect(sentence)
    assert ph.attempt(p, sentence) is None  # the model does not give the placeholders back once each
    [t] = server.stub().Translate(ask("ph", sentence)).translations
    [first, second] = submitted["ph"]
    assert [j.src for j in first] == [source_ids(ph, p)]
    assert [j.src for j in second] == [source_ids(ph, Protected(sentence, ()))]  # the spans as text
    assert not set(second[0].src) & set(ph.placeholders)
    assert set(second[0].banned) >= set(ph.placeholders)  # and none may be written
    assert t.hypotheses[0].text == ph.sentence(sentence)
    expected = ph.attempt(Protected(sentence, ()), sentence)
    assert t.hypotheses[0].text == (sentence if expected is None else expected)


def test_more_spans_than_the_model_copies_are_decoded_as_text_and_checked(server, alone, submitted):
    ph = alone["ph"]
    thirteen = "He said 1 2 3 4 5 6 7 8 9 10 11 12 <ph1> 8013 ok."
    eight = "The values 101, 108, 115, 122, 129, 136, 143 and 150 are valid."
    response = server.stub().Translate(ask("ph", NINE, thirteen, eight, no_sentence_split=True))
    [jobs] = submitted["ph"][:1]
    marks = {*ph.placeholders, *ph.package.language_tags.values()}
    pieces = [[ph.tok.id_to_piece(i) for i in j.src if i in marks] for j in jobs]
    # Nine and thirteen spans: no placeholder at all, and the literal <ph1> is text; eight: protected.
    assert pieces == [["<2de>"], ["<2de>"], ["<2de>", *SYMBOLS[:8]]]
    for text, t in zip((NINE, thirteen, eight), response.translations):
        out = t.hypotheses[0].text
        assert out == ph.sentence(text)
        assert out == text or faithful(out, text)  # never "013", never 143 twice


def test_no_internal_symbol_reaches_an_output(server, alone):
    """Texts that made the old server answer "Der Kaufpreis ist <ph1>.", "<ph1> speichern ...":
    no placeholder, tag or special piece in any hypothesis or any target piece, whatever the
    model would have written, unless the user's own text has that text."""
    texts = ["The price is €.", "• Save the file.", "He said: <ph1> and <2en> and </s>.", "Who wept?"]
    for name in ("ph", "plain"):
        tok = alone[name].tok
        symbols = tok.symbol_pattern()
        for options in ({}, {"beam_size": 3, "num_hypotheses": 3, "return_attention": True}):
            response = server.stub().Translate(ask(name, *texts, **options))
            for text, t in zip(texts, response.translations):
                for h in [*t.hypotheses, *(h for s in t.segments for h in s.hypotheses)]:
                    assert all(m.group() in text for m in symbols.finditer(h.text)), (name, text, h.text)
                    assert not [p for p in h.target_pieces if tok.piece_to_id(p) in alone[name].never]
        [t] = server.stub().Translate(ask(name, texts[0])).translations
        assert t.hypotheses[0].text == alone[name].sentence(texts[0])


def test_a_package_without_the_symbols_is_served_without_placeholders(server, alone, submitted):
    stub = server.stub()
    plain = alone["plain"]
    assert not server.running.models["plain"].protector.enabled
    [t] = stub.Translate(ask("plain", TEXT)).translations
    assert [s.hypotheses[0].text for s in t.segments] == [plain.sentence(s) for s in SENTENCES]
    [jobs] = submitted["plain"]  # one decode: nothing protected, nothing to decode again
    assert [j.src[1:-1] for j in jobs] == [plain.tok.source.encode(s) for s in SENTENCES]


def test_the_response_bound_counts_each_span_put_back_once(server):
    model = server.running.models["ph"]
    job = Job([4, 10, 11, 3], DecodeOptions(), max_len=7, bos=2, eos=3, pad=0)
    req = ask("ph", "x" * 10)
    without = response_bound(model, req, [[Segment((0, 10), job)]])
    url = "https://example.org/" + "a" * 80  # 100 bytes, longer than any piece
    assert model.longest_piece_bytes < 100
    with_span = response_bound(model, req, [[Segment((0, 10), job, (url,))]])
    # the sentence's hypothesis and the text's: 7 tokens of a piece each, and the span once (the
    # check refuses an output with a placeholder twice; nothing is appended)
    assert with_span - without == 2 * 100
    # A sentence that comes back as it was (no letter, or nothing passed the check) is its bytes.
    letterless = response_bound(model, ask("ph", "." * 500), [[Segment((0, 500), None)]])
    assert letterless - response_bound(model, ask("ph", "." * 500), []) >= 2 * 500


def test_translate_onnx_protects_with_the_packages_tokenizer(ph_package, plain_package):
    from export.verify import cpu_runtime, translate_onnx
    from training.tokenizer import Tokenizer

    for package, protected in ((ph_package, True), (plain_package, False)):
        tok = Tokenizer(package / "tokenizer.model")
        assert tok.protector.enabled is protected
        outputs = translate_onnx(cpu_runtime(ModelPackage.load(package)), tok, SENTENCES, "de")
        assert outputs == [verify_reference(package, s, protect=protected) for s in SENTENCES]
        if protected:
            assert all(span in out for out, spans in zip(outputs, SPANS) for span in spans)

