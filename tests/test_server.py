"""The gRPC server against a real tiny model package, on a free localhost port."""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from nmt.v1 import translator_pb2 as pb
from server.segment import join, split_sentences, whole
from tests.sentence_reference import Alone
from tests.server_harness import TEXTS, ServerThread, code_and_details, request, wait_until


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_texts=16, max_chars=500, max_tokens=64, max_message_bytes=64 * 1024)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stub(server):
    return server.stub()


@pytest.fixture(scope="module")
def reference(tiny_package) -> Alone:
    return Alone(tiny_package)


@pytest.fixture(scope="module")
def alone(reference):
    """Greedy translation of one text, each of its sentences decoded on its own by the server's
    rule (tests/sentence_reference.py: the reference for batching and for sentence splitting);
    ``split=False`` decodes the text as one."""

    def translate(text: str, tgt: str = "de", split: bool = True) -> str:
        spans = split_sentences(text, "en" if tgt == "de" else "de") if split else whole(text)
        return join(text, spans, [reference.sentence(text[s:e], tgt) for s, e in spans])

    return translate


def test_translate_keeps_order_and_equals_translating_alone(stub, alone):
    response = stub.Translate(request(*TEXTS))
    assert [t.hypotheses[0].text for t in response.translations] == [alone(t) for t in TEXTS]
    assert response.model == "tiny"


def test_empty_list_and_empty_strings(server, stub, alone):
    assert list(stub.Translate(request()).translations) == []
    before = server.scheduler.rt  # the model is not touched for empty strings: nothing is queued
    response = stub.Translate(request("", "Jesus wept.", "   "))
    assert [t.hypotheses[0].text for t in response.translations] == ["", alone("Jesus wept."), "   "]
    assert server.scheduler.rt is before and server.scheduler.in_flight == 0


def test_limits_give_invalid_argument_naming_item_and_limit(stub):
    assert code_and_details(lambda: stub.Translate(request("ok", "x" * 501))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "texts[1]: 501 characters; the limit is 500")
    assert code_and_details(lambda: stub.Translate(request(*["a"] * 17))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "texts: 17 texts in one request; the limit is 16")
    code, details = code_and_details(lambda: stub.Translate(request("word " * 80)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("texts[0]: ")
    assert details.endswith("tokens; the limit is 64")
    assert code_and_details(lambda: stub.Translate(request("a", beam_size=9))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "options.beam_size: 9; the limit is 8")
    assert code_and_details(lambda: stub.Translate(request("a", beam_size=2, num_hypotheses=3))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "options.num_hypotheses: 3 is more than beam_size 2")
    assert code_and_details(lambda: stub.Translate(request("a", length_penalty=float("nan"))))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT


def test_unknown_pair_or_model_names_what_is_supported(stub):
    assert code_and_details(lambda: stub.Translate(request("a", src="en", tgt="fr"))) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "language pair 'en-fr' is not supported by model 'tiny'; supported: en-de, de-en")
    r = request("a")
    r.model = "big"
    assert code_and_details(lambda: stub.Translate(r)) == (
        grpc.StatusCode.INVALID_ARGUMENT, "unknown model 'big'; loaded: tiny")


def test_oversized_message_is_resource_exhausted(stub):
    code, _ = code_and_details(lambda: stub.Translate(request(*["y" * 400] * 200)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_n_best_scores_and_attention(stub):
    response = stub.Translate(request(TEXTS[3], beam_size=4, num_hypotheses=3, return_scores=True,
                                      return_attention=True))
    hyps = response.translations[0].hypotheses
    assert len(hyps) == 3 and hyps[0].score >= hyps[1].score >= hyps[2].score
    h = hyps[0]
    assert h.source_pieces[0] == "<2de>" and h.source_pieces[-1] == "</s>"
    matrix = np.array(h.attention).reshape(len(h.target_pieces), len(h.source_pieces))
    assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-4)


def test_batching_invariance_under_concurrency(stub, alone):
    rng = random.Random(7)
    mixes = [[rng.choice(TEXTS) for _ in range(rng.randint(1, 4))] for _ in range(24)]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(lambda texts: stub.Translate(request(*texts)), mixes))
    for texts, response in zip(mixes, responses):
        assert [t.hypotheses[0].text for t in response.translations] == [alone(t) for t in texts]


def test_stream_answers_every_request_with_its_id(stub, alone):
    requests = [request(TEXTS[i % len(TEXTS)]) for i in range(20)]
    for i, r in enumerate(requests):
        r.request_id = f"r{i}"
    requests[5].target_lang = "xx"  # fails in-band, the stream goes on
    answers = {a.request_id: a for a in stub.TranslateStream(iter(requests))}
    assert sorted(answers) == sorted(f"r{i}" for i in range(20))
    assert answers["r5"].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "language pair 'en-xx' is not supported" in answers["r5"].error.message
    assert answers["r3"].translations[0].hypotheses[0].text == alone(TEXTS[3])


def test_stream_answers_go_out_while_the_client_waits_for_them(stub, alone):
    """The interactive pattern: send one request, wait for its answer, then send the next.
    Each answer must come while the client sends nothing (it used to wait for the next
    message, i.e. for ever)."""
    import queue

    outbox: queue.Queue = queue.Queue()

    def requests():
        while (r := outbox.get()) is not None:
            yield r

    answers = stub.TranslateStream(requests(), timeout=60)
    for i in range(3):
        r = request(TEXTS[i])
        r.request_id = f"q{i}"
        outbox.put(r)
        waited = time.monotonic()
        answer = next(answers)  # the stream is still open: nothing more is sent until this returns
        assert (answer.request_id, answer.translations[0].hypotheses[0].text) == (f"q{i}", alone(TEXTS[i]))
        assert time.monotonic() - waited < 30  # an answer held back would wait for the 60 s deadline
    outbox.put(None)
    assert list(answers) == []


def test_list_models(stub):
    [m] = stub.ListModels(pb.ListModelsRequest()).models
    assert (m.name, list(m.pairs), m.device, m.variant) == ("tiny", ["en-de", "de-en"], "cpu", "fp32")
    assert (m.max_texts_per_request, m.max_chars_per_text, m.max_tokens_per_text, m.max_beam_size) == (16, 500, 64, 8)
    # sentences: 16 texts x SENTENCES_PER_TEXT (16, the automatic --max-sentences); tokens: 16 texts x 64 tokens
    assert (m.max_sentences_per_request, m.max_tokens_per_request) == (256, 1024)


def test_health_and_reflection(server):
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "nmt.v1.Translator"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service)).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    [answer] = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for s in answer.list_services_response.service}
    assert {"nmt.v1.Translator", "grpc.health.v1.Health"} <= names


def test_deadline_exceeded_frees_the_slot(server, stub):
    long_text = TEXTS[4]
    code, _ = code_and_details(lambda: stub.Translate(request(*[long_text] * 8, beam_size=8), timeout=0.01))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0)


def test_cancelled_call_is_evicted(server, stub):
    long_text = TEXTS[1]  # one sentence: 8 texts are 8 jobs, and their answer fits in 64 KB
    future = stub.Translate.future(request(*[long_text] * 8, beam_size=8, max_output_tokens=200))
    wait_until(lambda: server.scheduler.in_flight > 0)
    future.cancel()
    wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0)


def test_metrics_count_what_was_sent(server, stub):
    before = _metric(server, 'nmt_requests_total{code="OK",method="ListModels"}')
    for _ in range(3):
        stub.ListModels(pb.ListModelsRequest())
    assert _metric(server, 'nmt_requests_total{code="OK",method="ListModels"}') == before + 3
    texts_before = _metric(server, 'nmt_texts_total{model="tiny"}')
    stub.Translate(request("Jesus wept.", "He said,"))
    assert _metric(server, 'nmt_texts_total{model="tiny"}') == texts_before + 2
    assert _metric(server, "nmt_tokens_generated_total") > 0
    assert _metric(server, "nmt_batch_rows_count") > 0


def _metric(server, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{server.running.metrics_port}/metrics", timeout=5).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


# ------------------------------------------------------------ what an adversarial probe found


def test_a_response_that_cannot_fit_is_refused_before_decoding(server, stub):
    tokens_before = _metric(server, "nmt_tokens_generated_total")
    big = request(*[TEXTS[4]] * 16, beam_size=8, num_hypotheses=8, return_attention=True)
    code, details = code_and_details(lambda: stub.Translate(big))
    assert code == grpc.StatusCode.INVALID_ARGUMENT  # was: 4 s of decoding, then RESOURCE_EXHAUSTED
    assert details.startswith("the response could take up to ")
    assert "more than this server's limit of 65,536 bytes per message" in details
    assert _metric(server, "nmt_tokens_generated_total") == tokens_before  # nothing was decoded
    small = stub.Translate(request(TEXTS[4], beam_size=2, num_hypotheses=2, return_attention=True))
    assert len(small.translations[0].hypotheses) == 2


def test_error_messages_cut_echoed_input(stub):
    code, details = code_and_details(lambda: stub.Translate(request("Hi", tgt="x" * 20_000)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("language pair 'en-xxxxxxxxxxxxxxxx") and "(20003 characters)" in details
    assert len(details) < 300
    r = request("Hi")
    r.model = "m" * 15_000
    code, details = code_and_details(lambda: stub.Translate(r))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "(15000 characters)" in details and len(details) < 300


def raw_call(server, method: str, streaming: bool = False):
    """A call that sends the given bytes as they are (no serializer)."""
    channel = grpc.insecure_channel(server.address)
    make = channel.stream_stream if streaming else channel.unary_unary
    return make(f"/nmt.v1.Translator/{method}")


def test_malformed_protobuf_is_invalid_argument_and_counted(server):
    before = _metric(server, 'nmt_requests_total{code="INVALID_ARGUMENT",method="Translate"}')
    code, details = code_and_details(lambda: raw_call(server, "Translate")(b"\xff\xff\xff\xff", timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT  # was UNKNOWN, with a traceback in the log
    assert details.startswith("the request is not a valid nmt.v1.TranslateRequest message (")
    assert _metric(server, 'nmt_requests_total{code="INVALID_ARGUMENT",method="Translate"}') == before + 1
    code, _ = code_and_details(lambda: raw_call(server, "ListModels")(b"\x0a\x05ab", timeout=10))  # truncated
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_malformed_message_in_a_stream_is_answered_in_band_and_the_stream_goes_on(server, alone):
    messages = []
    for i in range(40):
        r = request(TEXTS[i % 6])
        r.request_id = f"r{i}"
        messages.append(r.SerializeToString())
    messages[8] = b"\xff\xff\xff\xff"
    before = _metric(server, 'nmt_requests_total{code="OK",method="TranslateStream"}')
    answers = [pb.TranslateResponse.FromString(b) for b in raw_call(server, "TranslateStream", True)(iter(messages),
                                                                                                   timeout=60)]
    assert len(answers) == 40  # was: the stream ended, dropping 32 of the 40 accepted requests
    errors = [a for a in answers if a.HasField("error")]
    assert len(errors) == 1 and errors[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert errors[0].error.message.startswith("the request is not a valid nmt.v1.TranslateRequest message")
    done = {a.request_id: a.translations[0].hypotheses[0].text for a in answers if not a.HasField("error")}
    assert sorted(done) == sorted(f"r{i}" for i in range(40) if i != 8)
    assert done["r9"] == alone(TEXTS[3])
    assert _metric(server, 'nmt_requests_total{code="OK",method="TranslateStream"}') == before + 1


def test_calls_past_their_deadline_are_counted_as_deadline_exceeded(server, stub):
    before = _metric(server, 'nmt_requests_total{code="DEADLINE_EXCEEDED",method="Translate"}')
    code, _ = code_and_details(lambda: stub.Translate(request(*[TEXTS[1]] * 16, beam_size=8), timeout=0.01))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: _metric(server, 'nmt_requests_total{code="DEADLINE_EXCEEDED",method="Translate"}')
                == before + 1)  # was counted CANCELLED
    stream_before = _metric(server, 'nmt_requests_total{code="CANCELLED",method="TranslateStream"}')
    cancelled = threading.Event()

    def requests():  # the client never closes its side: only its cancel can end this stream
        yield from [request(TEXTS[4], beam_size=8, max_output_tokens=200)] * 30
        cancelled.wait(30)

    call = stub.TranslateStream(requests())
    next(call)
    call.cancel()
    cancelled.set()
    wait_until(lambda: _metric(server, 'nmt_requests_total{code="CANCELLED",method="TranslateStream"}')
                == stream_before + 1)  # was counted OK (closed at its yield) or UNKNOWN (reader first)


def test_connections_are_closed_at_their_age_and_clients_reconnect_unnoticed(tiny_package):
    """--max-connection-age-seconds: the server sends GOAWAY once a connection is that old (how
    clients behind a Kubernetes headless Service find replicas added since they connected); the
    client's next call opens a new connection and succeeds."""
    s = ServerThread(tiny_package, max_connection_age_seconds=0.5)
    channel = grpc.insecure_channel(s.address)
    states: list[grpc.ChannelConnectivity] = []
    channel.subscribe(states.append, try_to_connect=False)
    try:
        stub = s.stub(channel)
        assert stub.Translate(request(TEXTS[0]), timeout=30).translations[0].hypotheses[0].text
        wait_until(lambda: grpc.ChannelConnectivity.READY in states
                   and states[-1] == grpc.ChannelConnectivity.IDLE)  # the server closed it
        assert stub.Translate(request(TEXTS[0]), timeout=30).translations[0].hypotheses[0].text
    finally:
        channel.close()
        s.stop()


# ------------------------------------------------------------ documents: sentences in, sentences out
PARAGRAPH = ("Jesus wept.", "In the beginning was the Word.", "Peace be with you!", "He said, Amen.")


def test_a_paragraph_comes_back_sentence_by_sentence_with_its_spacing_and_line_breaks(server, stub, alone):
    a, b, c, d = PARAGRAPH
    text = f"  {a} {b}\n{c}\n\n\t{d}  \n"
    sentences_before = _metric(server, 'nmt_sentences_total{model="tiny"}')
    [t] = stub.Translate(request(text)).translations
    assert [(s.source, s.start, s.end) for s in t.segments] == [(x, text.index(x), text.index(x) + len(x))
                                                                for x in PARAGRAPH]
    outs = [alone(x) for x in PARAGRAPH]  # each sentence decoded on its own
    assert [s.hypotheses[0].text for s in t.segments] == outs
    assert t.hypotheses[0].text == f"  {outs[0]} {outs[1]}\n{outs[2]}\n\n\t{outs[3]}  \n"
    assert t.hypotheses[0].num_tokens == sum(s.hypotheses[0].num_tokens for s in t.segments)
    assert _metric(server, 'nmt_sentences_total{model="tiny"}') == sentences_before + 4
    assert not t.hypotheses[0].attention  # a matrix is per sentence: see the segments


def test_the_n_best_of_a_paragraph_joins_its_sentences_hypotheses(stub):
    text = "Jesus wept. In the beginning was the Word."
    [t] = stub.Translate(request(text, beam_size=2, num_hypotheses=2, return_scores=True,
                                 return_attention=True)).translations
    assert len(t.segments) == 2 and len(t.hypotheses) == 2
    for i, h in enumerate(t.hypotheses):
        parts = [s.hypotheses[i] for s in t.segments]
        assert h.text == f"{parts[0].text} {parts[1].text}"
        assert h.score == pytest.approx(parts[0].score + parts[1].score)
    for s in t.segments:
        hyp = s.hypotheses[0]
        assert hyp.source_pieces[0] == "<2de>" and len(hyp.attention) == len(hyp.source_pieces) * hyp.num_tokens


def test_no_sentence_split_translates_each_text_as_one_sentence(stub, alone):
    text = "  Jesus wept. In the beginning was the Word. "
    [t] = stub.Translate(request(text, no_sentence_split=True)).translations
    assert [(s.source, s.start, s.end) for s in t.segments] == [(text.strip(), 2, len(text) - 1)]
    assert t.hypotheses[0].text == "  " + alone(text.strip(), split=False) + " "
    one = stub.Translate(request(text.strip(), no_sentence_split=True, return_attention=True)).translations[0]
    [h], [s] = one.hypotheses, one.segments[0].hypotheses  # one sentence: the text's hypothesis is its own,
    assert (h.text, h.num_tokens, h.stop_reason) == (s.text, s.num_tokens, s.stop_reason)
    assert len(h.attention) == len(h.source_pieces) * h.num_tokens > 0 and not s.attention  # sent once


def test_blank_texts_and_empty_lines_survive_as_they_are(stub, alone):
    blank = ["", " ", "\n\n", " \t\n "]
    got = stub.Translate(request(*blank, "Jesus wept.\n\n\nPeace be with you.\n")).translations
    assert [t.hypotheses[0].text for t in got[:4]] == blank
    assert all(not t.segments and t.hypotheses[0].stop_reason == pb.STOP_REASON_UNSPECIFIED for t in got[:4])
    assert got[4].hypotheses[0].text == f"{alone('Jesus wept.')}\n\n\n{alone('Peace be with you.')}\n"


def test_limits_count_sentences_each_within_the_text_limit(stub):
    text = " ".join(["In the beginning was the Word."] * 12)  # over 64 tokens as one, each sentence far under
    [t] = stub.Translate(request(text)).translations
    assert len(t.segments) == 12 and all(s.hypotheses[0].text for s in t.segments)
    code, details = code_and_details(lambda: stub.Translate(request(text, no_sentence_split=True)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("texts[0]: ")
    assert details.endswith("tokens; the limit is 64")
    code, details = code_and_details(lambda: stub.Translate(request("ok", "Jesus wept. " + "Word " * 80)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("texts[1], sentence 2 of 2 'Word Word ") and details.endswith("tokens; the limit is 64")
    # all sentences of a request: 16 texts x 16 = 256 at most, and 16 x 64 = 1,024 source tokens
    assert code_and_details(lambda: stub.Translate(request(*["Amen. " * 80] * 4))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "texts: 320 sentences in one request; the limit is 256")
    code, details = code_and_details(lambda: stub.Translate(request(*[text] * 16)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("texts: ")
    assert details.endswith(" source tokens in 192 sentences in one request; the limit is 1024 (max texts x max "
                            "tokens per text)")


# ------------------------------------------------------------ honest stopping
def test_a_hypothesis_cut_by_the_length_limit_says_so_and_is_counted(server, stub):
    limited = 'nmt_length_limited_total{model="tiny"}'
    before = _metric(server, limited)
    text = "In the beginning was the Word, and the Word was with God."
    [t] = stub.Translate(request(text, max_output_tokens=3)).translations
    [seg] = t.segments
    assert [(h.num_tokens, h.stop_reason) for h in seg.hypotheses] == [(3, pb.STOP_REASON_LENGTH_LIMIT)]
    assert t.hypotheses[0].stop_reason == pb.STOP_REASON_LENGTH_LIMIT
    assert _metric(server, limited) == before + 1
    [ok] = stub.Translate(request("Jesus wept.")).translations
    assert ok.hypotheses[0].stop_reason == pb.STOP_REASON_END_OF_SENTENCE
    # beam search: every hypothesis says why it ended (3 tokens: the limit; fewer: the model's eos)
    [beam] = stub.Translate(request(text, beam_size=4, num_hypotheses=4, max_output_tokens=3)).translations
    assert [h.stop_reason for h in beam.hypotheses] == [
        pb.STOP_REASON_LENGTH_LIMIT if h.num_tokens == 3 else pb.STOP_REASON_END_OF_SENTENCE for h in beam.hypotheses]
    assert beam.hypotheses[0].stop_reason == pb.STOP_REASON_LENGTH_LIMIT
    assert _metric(server, limited) == before + 2  # sentences whose best hypothesis was cut


# ------------------------------------------------------------ text is text: what reaches the model, what comes back
def test_text_cannot_select_the_target_language(stub, alone):
    """Language tags are pieces of the tokenizer: the old server read a user's "<2en>" as the
    tag it is for the model (a French request came back German). Only the real tag is a tag."""
    for text, src, tgt in (("<2en> Jesus wept.", "en", "de"), ("Jesus <2de> wept </s>.", "en", "de"),
                           ("Jesus \uff1c2en\uff1e wept.", "en", "de"), ("<2de> Jesus weinte.", "de", "en")):
        [t] = stub.Translate(request(text, src=src, tgt=tgt, return_attention=True)).translations
        pieces = list(t.hypotheses[0].source_pieces)
        assert pieces[0] == f"<2{tgt}>" and [p for p in pieces if p in ("<2en>", "<2de>", "</s>")] == [
            f"<2{tgt}>", "</s>"], (text, pieces)
        assert t.hypotheses[0].text == alone(text, tgt=tgt)


INVISIBLE = [
    "In the begin\u00adning was the Word.",  # soft hyphen
    "In the beginning was the Wo\u200drd.",  # zero-width joiner
    "In the\u2060 beginning was the Word.",  # word joiner
    "\u200eIn the beginning was the Word.\u200f",  # left-to-right and right-to-left marks
    "\ufeffIn the \u202ebeginning\u202c was the Word.",  # byte order mark, a bidi override
    "In the beginning\u200b was the\x00 Word\ufe0f.",  # zero-width space, NUL, a variation selector
]


def test_invisible_characters_do_not_change_a_translation(stub):
    clean = "In the beginning was the Word."
    [want] = stub.Translate(request(clean, return_attention=True)).translations
    got = stub.Translate(request(*INVISIBLE, return_attention=True)).translations
    for text, t in zip(INVISIBLE, got):
        assert list(t.hypotheses[0].source_pieces) == list(want.hypotheses[0].source_pieces), repr(text)
        assert t.hypotheses[0].text == want.hypotheses[0].text
        assert t.segments[0].source == text.strip()  # offsets and sources index the text as it was sent


LETTERLESS = ["...", "!!!", "\x00\x00\x00", "123", "— 3.5 % —", "\u00ad\u200b", "…?!", "(1)", "• • •", "42."]


def test_text_without_a_letter_comes_back_as_it_was(server, stub, alone):
    """The old server decoded "..." into "und sie ..." and "!!!" into "Wehe!"."""
    tokens_before = _metric(server, "nmt_tokens_generated_total")
    sentences_before = _metric(server, 'nmt_sentences_total{model="tiny"}')
    got = stub.Translate(request(*LETTERLESS, beam_size=2, num_hypotheses=2)).translations
    assert [[h.text for h in t.hypotheses] for t in got] == [[x, x] for x in LETTERLESS]
    assert [[h.text for s in t.segments for h in s.hypotheses] for t in got] == [[x, x] for x in LETTERLESS]
    assert _metric(server, "nmt_tokens_generated_total") == tokens_before  # nothing was decoded
    assert _metric(server, 'nmt_sentences_total{model="tiny"}') == sentences_before
    # In a text, such a line stays as it is and the others are translated.
    text = "Jesus wept.\n...\n!!! 123\nPeace be with you."
    [t] = stub.Translate(request(text)).translations
    assert t.hypotheses[0].text == f"{alone('Jesus wept.')}\n...\n!!! 123\n{alone('Peace be with you.')}"
    [t] = stub.Translate(request("  ...  ", no_sentence_split=True)).translations
    assert t.hypotheses[0].text == "  ...  "
