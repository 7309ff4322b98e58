"""Property-based fuzzing of every request field: the server answers OK or
INVALID_ARGUMENT (never anything else, never a hang) and stays SERVING."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt.v1 import translator_pb2 as pb
from tests.server_harness import ServerThread

LANGS = st.sampled_from(["en", "de", "fr", "", "EN", "x" * 40, "de-en", "\u00e9"])
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120)


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_texts=8, max_chars=100, max_tokens=48, max_output_tokens=40)
    yield s
    s.stop()


PAIRS = st.one_of(st.sampled_from([("en", "de"), ("de", "en")]), st.tuples(LANGS, LANGS))


def _request(pair: tuple[str, str], **fields) -> pb.TranslateRequest:
    return pb.TranslateRequest(source_lang=pair[0], target_lang=pair[1], **fields)


requests = st.builds(
    _request,
    pair=PAIRS,
    texts=st.lists(TEXT, max_size=10),
    model=st.sampled_from(["", "tiny", "", "tiny", "other", "\x00"]),
    request_id=st.text(max_size=20),
    options=st.one_of(
        st.builds(pb.DecodingOptions, beam_size=st.integers(0, 4), length_penalty=st.floats(0, 2, width=32),
                  max_output_tokens=st.integers(0, 40), num_hypotheses=st.integers(0, 1),
                  return_scores=st.booleans(), return_attention=st.booleans()),
        st.builds(pb.DecodingOptions, beam_size=st.integers(0, 2**32 - 1),
                  length_penalty=st.floats(allow_nan=True, allow_infinity=True, width=32),
                  max_output_tokens=st.integers(0, 2**32 - 1), num_hypotheses=st.integers(0, 2**32 - 1),
                  return_scores=st.booleans(), return_attention=st.booleans()),
    ),
)


outcomes: list[int] = []


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(req=requests)
def test_any_request_gets_ok_or_invalid_argument(server, req):
    stub = server.stub(server.channel)
    try:
        response = stub.Translate(req, timeout=30)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
        assert e.details()
    else:
        outcomes.append(req.options.beam_size)
        assert len(response.translations) == len(req.texts)
        assert all(1 <= len(t.hypotheses) <= max(1, req.options.num_hypotheses) for t in response.translations)
    health = health_pb2_grpc.HealthStub(server.channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


def test_fuzzing_reached_successful_translations():
    """Guard against a fuzzer that only ever produces rejected requests."""
    assert len(outcomes) >= 10 and len(set(outcomes)) >= 2
