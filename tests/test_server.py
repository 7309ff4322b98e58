"""The gRPC server against a real tiny model package, on a free localhost port."""

from __future__ import annotations

import concurrent.futures
import random
import time
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from export.package import ModelPackage
from nmt.v1 import translator_pb2 as pb
from server.decoding import DecodeOptions, Job, decode_all
from server.runtime import Runtime, RuntimeOptions
from tests.server_harness import TEXTS, ServerThread, request


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_texts=16, max_chars=500, max_tokens=64, max_message_bytes=64 * 1024)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stub(server):
    return server.stub()


@pytest.fixture(scope="module")
def alone(tiny_package):
    """Greedy translation of one text decoded on its own (the reference for batching)."""
    import sentencepiece as spm

    package = ModelPackage.load(tiny_package)
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=1))
    sp = spm.SentencePieceProcessor(model_file=str(package.tokenizer_path))

    def translate(text: str, tgt: str = "de") -> str:
        src = [package.language_tags[tgt], *sp.encode(text), 3]
        [[hyp]] = decode_all(rt, [Job(src, DecodeOptions(), max_len=min(255, int(1.5 * len(src)) + 10),
                                      bos=2, eos=3, pad=0)])
        return sp.decode(hyp.tokens)

    return translate


def code_and_details(fn):
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


def test_translate_keeps_order_and_equals_translating_alone(stub, alone):
    response = stub.Translate(request(*TEXTS))
    assert [t.hypotheses[0].text for t in response.translations] == [alone(t) for t in TEXTS]
    assert response.model == "tiny"


def test_empty_list_and_empty_strings(server, stub, alone):
    assert list(stub.Translate(request()).translations) == []
    before = server.scheduler.rt  # the model is not touched for empty strings: nothing is queued
    response = stub.Translate(request("", "Jesus wept.", "   "))
    assert [t.hypotheses[0].text for t in response.translations] == ["", alone("Jesus wept."), ""]
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
    response = stub.Translate(request(TEXTS[1], beam_size=4, num_hypotheses=3, return_scores=True,
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


def test_list_models(stub):
    [m] = stub.ListModels(pb.ListModelsRequest()).models
    assert (m.name, list(m.pairs), m.device, m.variant) == ("tiny", ["en-de", "de-en"], "cpu", "fp32")
    assert (m.max_texts_per_request, m.max_chars_per_text, m.max_tokens_per_text, m.max_beam_size) == (16, 500, 64, 8)


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
    _wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0)


def test_cancelled_call_is_evicted(server, stub):
    long_text = TEXTS[4]
    future = stub.Translate.future(request(*[long_text] * 8, beam_size=8, max_output_tokens=200))
    _wait_until(lambda: server.scheduler.in_flight > 0)
    future.cancel()
    _wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0)


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


def _wait_until(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


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
    code, _ = code_and_details(lambda: stub.Translate(request(*[TEXTS[4]] * 16, beam_size=8), timeout=0.01))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_until(lambda: _metric(server, 'nmt_requests_total{code="DEADLINE_EXCEEDED",method="Translate"}')
                == before + 1)  # was counted CANCELLED
    stream_before = _metric(server, 'nmt_requests_total{code="CANCELLED",method="TranslateStream"}')
    call = stub.TranslateStream(iter([request(TEXTS[4], beam_size=8, max_output_tokens=200)] * 30))
    next(call)
    call.cancel()
    _wait_until(lambda: _metric(server, 'nmt_requests_total{code="CANCELLED",method="TranslateStream"}')
                == stream_before + 1)  # was always counted OK
