"""Glossaries and do-not-translate spans (server/glossary.py, server/terms.py): matching, limits,
glossary files, and a real server with the tiny model putting every term into its translations,
through placeholders and, for a model without them, through the attention."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from engine.decoding import Hypothesis
from engine.placeholders import MAX_PROTECTED, SYMBOLS, Protector, Span, protect_terms
from engine.tokenizer import PackageTokenizer
from nmt.v1 import translator_pb2 as pb
from server.glossary import (
    GLOSSARY,
    KEEP,
    MAX_GLOSSARY,
    MAX_KEEP,
    MAX_TERM_CHARS,
    Entry,
    Glossary,
    GlossaryError,
    RequestTerms,
    TermsError,
    load_named,
    read_file,
    request_terms,
)
from server.terms import aligned, expected, place, usable
from tests.server_harness import ServerThread, code_and_details, request

ROOT = Path(__file__).resolve().parents[1]


def terms(keep=(), glossary=(), name="", named=None, pair="en-de") -> RequestTerms:
    return request_terms(list(keep), list(glossary), name, named or {}, pair)


def found(text: str, t: RequestTerms) -> list[tuple[str, str, str]]:
    return [(text[m.start:m.end], m.replacement, m.kind) for m in t.find(text)]


# ------------------------------------------------------------------ matching

def test_terms_match_whole_words_in_any_case_and_keep_gives_the_texts_own():
    t = terms(keep=["acme cloud"], glossary=[("file", "Datei")])
    text = "Save the FILE to ACME  Cloud, not to files or profile."
    assert found(text, t) == [("FILE", "Datei", GLOSSARY), ("ACME  Cloud", "ACME  Cloud", KEEP)]


def test_the_leftmost_match_wins_then_the_longest_then_keep_over_the_glossary():
    t = terms(keep=["word"], glossary=[("the word", "Logos"), ("word", "Wort"), ("the beginning was", "Anfang war"),
                                       ("beginning", "Anfang")])
    text = "In the beginning was the Word, and the word."
    assert found(text, t) == [("the beginning was", "Anfang war", GLOSSARY), ("the Word", "Logos", GLOSSARY),
                              ("the word", "Logos", GLOSSARY)]
    assert found("A word.", t) == [("word", "word", KEEP)]  # keep and glossary both have it: keep
    # Overlapping entries that start at different words: the leftmost, and the search goes on after it.
    t = terms(glossary=[("new york", "NY"), ("york city", "YC")])
    assert found("In New York City.", t) == [("New York", "NY", GLOSSARY)]


def test_terms_that_start_or_end_with_a_sign_match_next_to_words():
    t = terms(keep=["C++", ".NET"], glossary=[("e-mail", "E-Mail")])
    assert found("Write C++ or x.NET code by e-mail.", t) == [
        ("C++", "C++", KEEP), (".NET", ".NET", KEEP), ("e-mail", "E-Mail", GLOSSARY)]


def test_the_request_glossary_comes_before_the_named_one():
    named = {"acme": {"en-de": Glossary([Entry("file", "Akte"), Entry("cloud", "Wolke")])}}
    t = terms(glossary=[("file", "Datei")], name="acme", named=named)
    assert found("A file in the cloud.", t) == [("file", "Datei", GLOSSARY), ("cloud", "Wolke", GLOSSARY)]


def test_a_term_inside_a_url_or_number_stays_part_of_it():
    text = "See https://acme.example/file and 10 files, 3 file."
    t = terms(keep=["acme"], glossary=[("file", "Datei"), ("10", "zehn")])
    got = usable(text, t.find(text))
    assert [(text[x.start:x.end], x.replacement) for x in got] == [("10", "zehn"), ("file", "Datei")]
    assert expected(text, got) == "See https://acme.example/file and zehn files, 3 Datei."


# ------------------------------------------------------------------ limits

@pytest.mark.parametrize("args, message", [
    ({"keep": ["x"] * (MAX_KEEP + 1)}, f"keep: {MAX_KEEP + 1} spans; the limit is {MAX_KEEP}"),
    ({"glossary": [("a", "b")] * (MAX_GLOSSARY + 1)},
     f"glossary: {MAX_GLOSSARY + 1} entries; the limit is {MAX_GLOSSARY}"),
    ({"keep": ["ok", "a" * (MAX_TERM_CHARS + 1)]},
     f"keep[1] 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... ({MAX_TERM_CHARS + 1} characters) "
     f"has {MAX_TERM_CHARS + 1} characters; the limit is {MAX_TERM_CHARS}"),
    ({"glossary": [("file", "b" * (MAX_TERM_CHARS + 1))]},
     f"glossary[0].target has {MAX_TERM_CHARS + 1} characters; the limit is {MAX_TERM_CHARS}"),
    ({"keep": [" \u200b "]}, "keep[0] ' \\u200b ' is empty"),
    ({"keep": ["..."]}, "keep[0] '...' has no letter or digit"),
    ({"glossary": [("", "x")]}, "glossary[0].source '' is empty"),
    ({"glossary": [("file", " ")]}, "glossary[0].target is empty"),
    ({"glossary": [("File", "Datei"), ("file", "Akte")]},
     "glossary[1].source 'file' is glossary[0].source too, with another target"),
    ({"name": "acme"}, "glossary_name 'acme' is not a glossary of this server; loaded: none (nmt-serve --glossary "
                       "NAME=FILE loads one)"),
    ({"name": "acme", "named": {"acme": {"en-fr": Glossary([])}}},
     "glossary_name 'acme' has no en-de glossary; it has en-fr"),
])
def test_what_a_request_may_not_ask_for_is_refused_naming_the_field_and_limit(args, message):
    with pytest.raises(TermsError) as e:
        terms(**args)
    assert str(e.value) == message


def test_the_proto_states_the_limits_defined_in_glossary_py():
    proto = (ROOT / "protos" / "nmt" / "v1" / "translator.proto").read_text()
    assert f"At most {MAX_KEEP} spans of at most {MAX_TERM_CHARS} characters" in proto
    assert f"At most\n  // {MAX_GLOSSARY} entries, each side at most {MAX_TERM_CHARS} characters" in proto


# ------------------------------------------------------------------ files

def test_a_glossary_file_names_its_languages_then_its_terms(tmp_path):
    f = tmp_path / "acme.tsv"
    f.write_text("\ufeff# ACME's terms\nEN\tde\n\nAcme  Cloud\tAcme Cloud\nfile\tDatei\nFILE\tDatei\n")
    pair, g = read_file(f)
    assert pair == "en-de" and len(g) == 2
    assert found("The acme cloud file.", RequestTerms([g])) == [("acme cloud", "Acme Cloud", GLOSSARY),
                                                               ("file", "Datei", GLOSSARY)]
    (tmp_path / "fr.tsv").write_text("en\tfr\nfile\tfichier\n")
    named = load_named([f"acme={f}", f"acme={tmp_path / 'fr.tsv'}", f"other={f}"])
    assert {n: sorted(p) for n, p in named.items()} == {"acme": ["en-de", "en-fr"], "other": ["en-de"]}


@pytest.mark.parametrize("content, message", [
    ("file\tDatei\n", "line 1: the first line must name the two languages, such as en<TAB>de; it is 'file\\tDatei'"),
    ("en\tde\tfr\n", "line 1: 3 tab-separated columns; a line is SOURCE<TAB>TARGET (the first line names the "
                     "languages: en<TAB>de)"),
    ("en\tde\nfile Datei\n", "line 2: 1 tab-separated columns; a line is SOURCE<TAB>TARGET"),
    ("en\tde\n# c\nfile\t\n", "line 3: the target is empty"),
    ("en\tde\n\t Datei\n", "line 2: the source is empty"),
    ("en\tde\nfile\tDatei\nFile\tAkte\n", "line 3: 'File' is on line 2 already, with another target"),
    (f"en\tde\n{'a' * (MAX_TERM_CHARS + 1)}\tx\n",
     f"line 2: the source has {MAX_TERM_CHARS + 1} characters; the limit is {MAX_TERM_CHARS}"),
    ("# nothing\n", "line 1: the file is empty; its first line names the languages (en<TAB>de), the lines after it "
                    "are SOURCE<TAB>TARGET"),
])
def test_a_malformed_glossary_file_is_one_line_naming_file_and_line(tmp_path, content, message):
    f = tmp_path / "bad.tsv"
    f.write_text(content)
    with pytest.raises(GlossaryError) as e:
        load_named([f"bad={f}"])
    assert str(e.value) == f"glossary {f} {message}"


def load_error(*specs: str) -> str:
    with pytest.raises(GlossaryError) as e:
        load_named(list(specs))
    return str(e.value)


def test_glossary_files_that_do_not_load_or_clash(tmp_path):
    f = tmp_path / "latin1.tsv"
    f.write_bytes("en\tde\nfile\tDatei\nfee\tGebühr\n".encode("latin-1"))
    assert load_error(f"x={f}") == f"glossary {f} line 3: not UTF-8 text"
    missing = tmp_path / "none.tsv"
    assert load_error(f"x={missing}") == f"glossary {missing}: cannot read it: No such file or directory"
    assert load_error("acme") == "--glossary 'acme': give NAME=FILE"
    good = tmp_path / "good.tsv"
    good.write_text("en\tde\nfile\tDatei\n")
    assert load_error(f"x={good}", f"x={good}") == f"--glossary x: {good} and {good} are both its en-de glossary"


def test_a_malformed_glossary_file_stops_nmt_serve_with_one_line(tiny_package, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("en\tde\nfile\tDatei\nfolder Ordner\n")
    proc = subprocess.run([sys.executable, "-m", "server.main", "--model", str(tiny_package), "--port", "0",
                           "--metrics-port", "-1", "--glossary", f"acme={bad}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "cannot start" in x]
    assert line.endswith(f"cannot start: glossary {bad} line 3: 1 tab-separated columns; a line is SOURCE<TAB>TARGET")


# ------------------------------------------------------------------ placeholders and MAX_PROTECTED

def test_terms_take_the_placeholders_first_and_past_max_protected_none():
    text = "Mail a@b.org 1 2 about Acme."
    acme = [Span(23, 27, "ACME", GLOSSARY)]
    p = protect_terms(text, acme)
    assert (p.text, p.originals) == ("Mail <ph1> <ph2> <ph3> about <ph4>.", ("a@b.org", "1", "2", "ACME"))
    # Terms and spans over MAX_PROTECTED: the terms alone; the spans stay text (and are checked).
    many = " ".join(f"w{i}" for i in range(MAX_PROTECTED - 1))
    text = f"{many} 1 2 x."
    words = [Span(i * 3, i * 3 + 2, f"W{i}", KEEP) for i in range(MAX_PROTECTED - 1)]
    p = protect_terms(text, words)
    assert p.originals == tuple(f"W{i}" for i in range(MAX_PROTECTED - 1)) and p.text.endswith(" 1 2 x.")
    # More terms than MAX_PROTECTED: no placeholder at all (placed by attention instead).
    words = [Span(i * 3, i * 3 + 2, f"W{i}", KEEP) for i in range(MAX_PROTECTED + 1)]
    text = " ".join(f"w{i}" for i in range(MAX_PROTECTED + 1))
    assert protect_terms(text, words).originals == ()
    # A span inside a term is the term's.
    assert protect_terms("Windows 10 now.", [Span(0, 10, "Windows 10", KEEP)]).originals == ("Windows 10",)


# ------------------------------------------------------------------ placing by attention

def test_placing_a_term_replaces_the_words_that_attend_to_it_and_keeps_their_signs(tiny_package):
    tok = PackageTokenizer.load(tiny_package)
    text = "Peace be with you, brother."
    [term] = terms(glossary=[("brother", "Bruder")]).find(text)
    src = [4, *tok.encode(text), 3]
    plan = aligned(tok, text, [term], src)
    assert plan is not None and plan.offset == 1
    out_ids = tok.encode("Peace be with you, (brother).")
    pieces = [tok.id_to_piece(i) for i in out_ids]
    # Each target piece attends to the source piece of the same word (the sentence is copied).
    word_of = np.cumsum([p.startswith("\u2581") for p in pieces]) - 1
    src_word = np.cumsum([tok.id_to_piece(i).startswith("\u2581") for i in src[1:-1]]) - 1
    attention = np.zeros((len(out_ids), len(src)), np.float32)
    for t, w in enumerate(word_of):
        attention[t, 1 + np.flatnonzero(src_word == min(w, src_word.max()))] = 1.0
    hyp = Hypothesis(out_ids, 0.0, attention)
    assert place(tok, plan, hyp, tok.not_text) == "Peace be with you, (Bruder)."
    # Already there: left as the model wrote it (no attention needed).
    there = Hypothesis(tok.encode("Peace be with you, Bruder."), 0.0, None)
    assert place(tok, plan, there, tok.not_text) == "Peace be with you, Bruder."
    assert place(tok, plan, Hypothesis(out_ids, 0.0, None), tok.not_text) is None  # no attention: cannot


# ------------------------------------------------------------------ a real server

@pytest.fixture(scope="module")
def glossary_file(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("glossary") / "acme.tsv"
    f.write_text("en\tde\nbe with\tSEI MIT\npeace\tFriede\n")
    return f


@pytest.fixture(scope="module")
def server(tiny_package, glossary_file):
    """The tiny model twice: ``tiny`` with its placeholders, ``plain`` served as a model without
    them is (an imported one): its terms are placed by attention."""
    s = ServerThread(tiny_package, model=(f"tiny={tiny_package}", f"plain={tiny_package}"),
                     glossary=(f"acme={glossary_file}",))
    plain = s.running.models["plain"]
    plain.__dict__["protector"] = Protector(False)
    plain.__dict__.pop("banned", None)
    yield s
    s.stop()


@pytest.fixture
def submitted(server, monkeypatch):
    """The jobs each model's scheduler is given during a test (the real scheduler does the work)."""
    seen: dict[str, list] = {}
    for name, model in server.running.models.items():
        real = model.scheduler.submit_all

        def record(jobs, deadline=None, name=name, real=real, **kwargs):
            seen.setdefault(name, []).append(list(jobs))
            return real(jobs, deadline, **kwargs)

        monkeypatch.setattr(model.scheduler, "submit_all", record)
    return seen


def ask(model: str, *texts: str, keep=(), glossary=(), glossary_name="", **options) -> pb.TranslateRequest:
    req = request(*texts, **options)
    req.model = model
    req.keep.extend(keep)
    req.glossary.extend(pb.GlossaryEntry(source=s, target=t) for s, t in glossary)
    req.glossary_name = glossary_name
    return req


def count(text: str, term: str) -> int:
    import re
    return len(re.findall(rf"(?<!\w){re.escape(term)}(?!\w)", text))


def hypotheses(t: pb.Translation) -> list[pb.Hypothesis]:
    return [*t.hypotheses, *(h for s in t.segments for h in s.hypotheses)]


def placeholder_ids(server, model: str = "tiny") -> set[int]:
    return set(server.running.models[model].tokenizer.placeholder_ids)


def test_a_kept_span_comes_back_exactly_through_a_placeholder(server, submitted):
    text = "Peace be with you, Zorblax."
    [t] = server.stub().Translate(ask("tiny", text, keep=["zorblax"], beam_size=3, num_hypotheses=3)).translations
    [first, *_] = submitted["tiny"]
    assert placeholder_ids(server) & set(first[0].src)  # the model read a placeholder for it
    for h in hypotheses(t):
        assert count(h.text, "Zorblax") == 1, h.text  # as the text has it, whatever the case asked for
        assert not any(s in h.text for s in SYMBOLS)


def test_a_glossary_term_is_in_the_translation_exactly_once(server, submitted):
    text = "Peace be with you."
    [t] = server.stub().Translate(ask("tiny", text, glossary=[("PEACE", "Friede")])).translations
    [first, *_] = submitted["tiny"]
    tok = server.running.models["tiny"].tokenizer
    assert [tok.id_to_piece(i) for i in first[0].src if i in placeholder_ids(server)] == ["<ph1>"]
    assert count(t.hypotheses[0].text, "Friede") == 1, t.hypotheses[0].text
    assert "Peace" not in t.hypotheses[0].text


def test_overlapping_entries_longest_first_and_the_named_glossary(server, submitted):
    text = "Peace be with you."
    [t] = server.stub().Translate(ask("tiny", text, glossary=[("be", "SEI"), ("with you", "MIT EUCH")],
                                      glossary_name="acme")).translations
    [first, *_] = submitted["tiny"]
    tok = server.running.models["tiny"].tokenizer
    ph = placeholder_ids(server)
    # acme's "be with" starts first and wins over the request's "be" and "with you"; "peace" from acme;
    # "you" is left as text: what the model reads, whatever it then writes.
    assert [tok.id_to_piece(i) for i in first[0].src if i in ph] == ["<ph1>", "<ph2>"]
    assert tok.decode([i for i in first[0].src[1:-1] if i not in ph]).strip() == "you."
    # The tiny model's answer depends on the CPU's kernels: it may drop a placeholder, and the server
    # then answers without the terms. Whatever it wrote, a term is there at most once, the losing
    # entry never, and no internal symbol.
    out = t.hypotheses[0].text
    assert count(out, "SEI") <= 1 and count(out, "Friede") <= 1 and "MIT EUCH" not in out, out
    assert not any(sym in out for sym in SYMBOLS)


def test_a_model_without_placeholders_gets_its_terms_by_attention(server, submitted):
    text = "Peace be with you."
    [t] = server.stub().Translate(ask("plain", text, keep=["Zorblax"], glossary=[("peace", "Friede")],
                                      beam_size=2, num_hypotheses=2)).translations
    [jobs] = submitted["plain"]
    assert not placeholder_ids(server, "plain") & set(jobs[0].src)
    assert jobs[0].options.attention  # asked for, to place the terms
    for h in hypotheses(t):
        assert count(h.text, "Friede") == 1, h.text
        assert not h.source_pieces  # attention was not asked for by the client: none sent


def test_past_max_protected_terms_are_placed_by_attention(server, submitted):
    words = [f"w{i}x" for i in range(MAX_PROTECTED + 1)]
    text = "Peace " + " ".join(words) + "."
    [t] = server.stub().Translate(ask("tiny", text, keep=words)).translations
    [jobs, *_] = submitted["tiny"]
    assert not placeholder_ids(server) & set(jobs[0].src) and jobs[0].options.attention
    out = t.hypotheses[0].text
    assert out == text or all(count(out, w) == 1 for w in words), out


def test_terms_over_the_limits_are_invalid_argument_with_the_exact_message(server):
    stub = server.stub()
    code, details = code_and_details(lambda: stub.Translate(ask("tiny", "Peace.", keep=["x"] * (MAX_KEEP + 1))))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, f"keep: {MAX_KEEP + 1} spans; the limit is {MAX_KEEP}")
    code, details = code_and_details(lambda: stub.Translate(
        ask("tiny", "Peace.", glossary=[(f"t{i}", "x") for i in range(MAX_GLOSSARY + 1)])))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT,
                               f"glossary: {MAX_GLOSSARY + 1} entries; the limit is {MAX_GLOSSARY}")
    code, details = code_and_details(lambda: stub.Translate(ask("tiny", "Peace.", glossary_name="nope")))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT,
                               "glossary_name 'nope' is not a glossary of this server; loaded: acme")
    req = ask("tiny", "Friede.", glossary_name="acme")
    req.source_lang, req.target_lang = "de", "en"
    code, details = code_and_details(lambda: stub.Translate(req))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "glossary_name 'acme' has no de-en glossary; it has "
                                                                 "en-de")


# ------------------------------------------------------------------ an imported model (no placeholder symbols)

def test_an_imported_model_gets_its_terms_by_attention(marian):
    """Its tokenizer (source.spm, vocab.json) has no placeholders: every term is placed by the
    attention. Random weights write anything, often nothing: an answer holds the forced term once,
    or (nothing to put it on) is the sentence as it was sent; never a placeholder."""
    from bench.peers.hf_models import parallel_lines

    package = marian[1]  # (directory, package): a Marian-shaped model imported as nmt-import does (conftest.py)
    english, _ = parallel_lines("de")
    texts = [t for t in english if ". " not in t.rstrip(".") and count(t.lower(), "the") >= 1][:8]
    s = ServerThread(package.path, model=(f"tiny={package.path}",))
    try:
        model = s.running.models["tiny"]
        assert not model.protector.enabled
        seen: list = []
        real = model.scheduler.submit_all
        model.scheduler.submit_all = lambda jobs, deadline=None, **kw: seen.append(jobs) or real(jobs, deadline, **kw)
        reply = s.stub().Translate(ask("tiny", *texts, glossary=[("the", "DAS")]), timeout=120)
    finally:
        s.stop()
    assert all(j.options.attention for j in seen[0])
    outs = [t.hypotheses[0].text for t in reply.translations]
    placed = [o for o, text in zip(outs, texts) if o != text]
    assert placed and all(count(o, "DAS") == count(text.lower(), "the") for o, text in zip(outs, texts) if o in placed
                          ), outs
    assert not any("<ph" in o for o in outs)


def test_through_a_pivot_the_first_leg_puts_the_terms_in_and_the_second_keeps_them(tiny_package, tiny_fr_package):
    """de -> fr through English: the glossary's target and the kept span reach the French."""
    s = ServerThread(tiny_package, model=(f"tiny={tiny_package}", f"fr={tiny_fr_package}"))
    try:
        req = ask("", "Und Gott sprach zu Zorblax.", keep=["zorblax"], glossary=[("gott", "DIEU")])
        req.source_lang, req.target_lang = "de", "fr"
        reply = s.stub().Translate(req, timeout=120)
    finally:
        s.stop()
    assert reply.pivot_lang == "en"
    out = reply.translations[0].hypotheses[0].text
    assert count(out, "DIEU") == 1 and count(out, "Zorblax") == 1, out
