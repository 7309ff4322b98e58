"""Device-resident decoding (engine/decoding.py ResidentBatch over the step and rows graphs),
run on the CPU with CPU onnxruntime values: the same code path CUDA runs, token for token the
numpy path's and PyTorch's output. And the device choice that never lies (engine/runtime.py)."""

from __future__ import annotations

import json
import logging
import shutil
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest
import torch

from engine import contract
from engine.decoding import Batch, DecodeOptions, Job, ResidentBatch, decode_all, encode_jobs, new_batch
from engine.defaults import BOS_ID, EOS_ID, PAD_ID, default_max_len
from engine.package import Manifest, ModelPackage, write_manifest
from engine.runtime import DeviceError, Runtime, RuntimeOptions
from nmt.v1 import translator_pb2 as pb
from tests.server_harness import TEXTS, ServerThread, request
from training import checkpoint as ckpt_io
from training.decode import beam_search, greedy_search

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
# Mixed options, as a server batch holds them: greedy, beams with n-best, attention, min_len.
OPTIONS = [DecodeOptions(), DecodeOptions(beam_size=4, n_best=2), DecodeOptions(attention=True),
           DecodeOptions(beam_size=2, min_len=6, attention=True), DecodeOptions(min_len=4),
           DecodeOptions(beam_size=3, alpha=1.0)]


@pytest.fixture(scope="module")
def setup(tiny_package, tiny_checkpoint):
    package = ModelPackage.load(tiny_package)
    numpy_rt = Runtime(package, RuntimeOptions(device="cpu", threads=1))
    resident_rt = Runtime(package, RuntimeOptions(device="cpu", threads=1, resident="on"))
    model, _, ckpt = ckpt_io.load_model(tiny_checkpoint)
    return numpy_rt, resident_rt, model, ckpt_io.load_tokenizer(ckpt)


def jobs_for(tok, texts, options) -> list[Job]:
    out = []
    for text, o in zip(texts, options):
        src = tok.encode_source(text, "de")
        out.append(Job(src, o, max_len=default_max_len(len(src), 255), bos=BOS_ID, eos=EOS_ID, pad=PAD_ID))
    return out


def same(a, b) -> None:
    """Hypotheses equal: tokens, stop reasons exactly; scores and attention to float rounding
    (the step graph fuses differently from the plain decoder graph)."""
    assert [[h.tokens for h in x] for x in a] == [[h.tokens for h in x] for x in b]
    assert [[h.stop_reason for h in x] for x in a] == [[h.stop_reason for h in x] for x in b]
    for x, y in zip(a, b):
        np.testing.assert_allclose([h.score for h in x], [h.score for h in y], rtol=1e-5, atol=1e-5)
        for h, g in zip(x, y):
            assert (h.attention is None) == (g.attention is None)
            if h.attention is not None:
                np.testing.assert_allclose(h.attention, g.attention, atol=1e-5)


def test_runtime_choice(setup):
    numpy_rt, resident_rt, _, _ = setup
    assert (numpy_rt.device, numpy_rt.resident, resident_rt.device, resident_rt.resident) == ("cpu", False, "cpu", True)
    assert isinstance(new_batch(numpy_rt), Batch) and isinstance(new_batch(resident_rt), ResidentBatch)


def test_resident_equals_numpy_path_and_pytorch(setup):
    numpy_rt, resident_rt, model, tok = setup
    texts = (TEXTS * 2)[: 2 * len(OPTIONS)]
    options = OPTIONS * 2
    expected = decode_all(numpy_rt, jobs_for(tok, texts, options))
    got = decode_all(resident_rt, jobs_for(tok, texts, options))
    same(got, expected)
    for text, o, hyps in zip(texts, options, got):  # and the PyTorch reference, job by job
        src = torch.tensor([tok.encode_source(text, "de")])
        if o.beam_size == 1 and o.min_len == 0:
            assert hyps[0].tokens == greedy_search(model, src)[0].tokens
        elif o.beam_size > 1 and o.min_len == 0:
            ref = beam_search(model, src, beam_size=o.beam_size, n_best=o.n_best, alpha=o.alpha)[0]
            assert [h.tokens for h in hyps] == [h.tokens for h in ref[: o.n_best]]


def test_continuous_batching_gives_each_job_its_own_tokens(setup):
    """Jobs join at different steps (several encoder runs at once), leave when done or
    cancelled; each gets what it gets decoded alone, and the buffers shrink as they leave."""
    numpy_rt, resident_rt, _, tok = setup
    texts = TEXTS * 2
    options = (OPTIONS * 3)[: len(texts)]
    alone = [decode_all(numpy_rt, jobs_for(tok, [t], [o]))[0] for t, o in zip(texts, options)]
    jobs = jobs_for(tok, texts, options)
    batch = ResidentBatch(resident_rt)
    pending, cancelled, step, widths = list(jobs), jobs[5], 0, []
    while pending or batch.jobs:
        if pending and step % 2 == 0:  # two or three newcomers, several length groups
            newcomers, pending = pending[:3], pending[3:]
            batch.add(encode_jobs(resident_rt, newcomers))
        finished = {j.id for j in batch.step()}
        if step == 3 and cancelled in batch.jobs:
            finished.add(cancelled.id)
        batch.remove(finished)
        rows, slots, width = batch.capacity
        assert batch.n == sum(j.k for j in batch.jobs) == batch.live.sum() and batch.past_mask.shape == (rows, slots)
        assert rows - batch.n < ResidentBatch.COMPACT_AT * rows or not batch.jobs  # dead rows: fewer than that
        if rows == batch.n:  # just rebuilt: the oldest job bounds the slots
            assert all(slots <= j.step + 1 for j in batch.jobs[:1])
        widths.append(width)
        step += 1
    assert batch.n == 0 and batch.capacity == (0, 0, 0)
    for job, expected in zip(jobs, alone):
        if job is not cancelled:
            same([job.result], [expected])
    assert max(widths) > min(w for w in widths if w)  # the source width followed the live jobs


def test_leaving_jobs_leave_dead_rows_until_half_the_rows_are_dead(setup, monkeypatch):
    """A greedy batch loses a job at nearly every step; rebuilding the buffers each time doubled
    the graph runs. Dead rows are fed pad and their outputs unread: every job's tokens unchanged."""
    numpy_rt, resident_rt, _, tok = setup
    texts = TEXTS * 2
    options = [DecodeOptions()] * len(texts)
    expected = decode_all(numpy_rt, jobs_for(tok, texts, options))
    runs = {"rows": 0, "step": 0}
    for name in runs:
        original = getattr(resident_rt, f"run_{name}")
        monkeypatch.setattr(resident_rt, f"run_{name}",
                            lambda *a, _f=original, _n=name, **k: (runs.__setitem__(_n, runs[_n] + 1), _f(*a, **k))[1])
    jobs = jobs_for(tok, texts, options)
    batch = ResidentBatch(resident_rt)
    batch.add(encode_jobs(resident_rt, jobs))
    finish_steps, dead_seen = set(), 0
    while batch.jobs:
        finished = batch.step()
        if finished:
            finish_steps.add(runs["step"])
        batch.remove({j.id for j in finished})
        dead_seen = max(dead_seen, batch.capacity[0] - batch.n)
    same([j.result for j in jobs], expected)
    groups = len(encode_jobs(resident_rt, jobs_for(tok, texts, options)))  # one rows run each, to join
    compactions = runs["rows"] - groups
    assert dead_seen > 0 and compactions <= len(texts).bit_length()  # each one halves the rows at least
    assert compactions < len(finish_steps) - 1  # before: a rebuild at every step a job left (but the last)


def test_probe_runs_a_job_alone_and_changes_nothing(setup):
    _, resident_rt, _, tok = setup
    jobs = jobs_for(tok, TEXTS[:3], OPTIONS[:3])
    batch = ResidentBatch(resident_rt)
    batch.add(encode_jobs(resident_rt, jobs))
    batch.step()
    before = (batch.capacity, batch.past_mask.copy(), batch.reorder.copy())
    assert all(batch.probe(j) for j in batch.jobs)
    assert batch.capacity == before[0] and np.array_equal(batch.past_mask, before[1])
    assert np.array_equal(batch.reorder, before[2])


def test_the_step_graph_keeps_candidates_and_scores_in_float32(tiny_package):
    for variant in ("fp32", "fp16"):
        session = ort.InferenceSession(str(ModelPackage.load(tiny_package).graph_path(contract.STEP, variant)),
                                       providers=["CPUExecutionProvider"])
        types = {v.name: v.type for v in (*session.get_inputs(), *session.get_outputs())}
        assert (types[contract.SCORES], types[contract.TOP_VALUES], types[contract.TOP_IDS]) == \
            ("tensor(float)", "tensor(float)", "tensor(int64)")
        assert types["cache_k_0"] == ("tensor(float16)" if variant == "fp16" else "tensor(float)")


def test_a_package_without_resident_graphs_still_serves(tiny_package, tmp_path, caplog):
    """Packages exported before the step and rows graphs existed load; resident=on names the
    missing graphs, auto on the CPU does not need them."""
    old = tmp_path / "old"
    shutil.copytree(tiny_package, old)
    m = json.loads((old / contract.MANIFEST).read_text())
    for graph in contract.RESIDENT_GRAPHS:
        del m["graphs"][graph]
        for variant in contract.VARIANTS:
            (old / contract.graph_file(graph, variant)).unlink(missing_ok=True)
    write_manifest(old, Manifest.from_json(m))
    package = ModelPackage.load(old)
    assert package.resident_variants == () and "fp32" in package.variants
    assert Runtime(package, RuntimeOptions(device="cpu")).resident is False
    with pytest.raises(ValueError, match="has no fp32 step and rows graphs"):
        Runtime(package, RuntimeOptions(device="cpu", resident="on"))


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA: the CPU-only refusal cannot be shown")
def test_device_choice_never_lies(tiny_package, caplog):
    package = ModelPackage.load(tiny_package)
    with pytest.raises(DeviceError, match=r"^--device cuda: this onnxruntime build has no CUDA provider .*"
                                          r"install onnxruntime-gpu"):
        Runtime(package, RuntimeOptions(device="cuda"))
    with caplog.at_level(logging.INFO, logger="nmt.engine"):
        rt = Runtime(package, RuntimeOptions(device="auto"))
    assert (rt.device, rt.resident) == ("cpu", False) and rt.providers == ["CPUExecutionProvider"]
    # A CPU-only build on auto: one line at INFO (the expected CPU install), no warning.
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "nmt.engine"]
    assert said == [(logging.INFO, f"CUDA not used, serving on the CPU: {rt.fallback_reason}")]
    assert rt.fallback_reason.startswith("this onnxruntime build has no CUDA provider")


def test_server_reports_residency_and_serves_the_same_tokens(tiny_package):
    plain = ServerThread(tiny_package)
    resident = ServerThread(tiny_package, device_resident="on")
    try:
        req = request(*TEXTS[:6], beam_size=3, num_hypotheses=2)
        a = plain.stub().Translate(req, timeout=60)
        b = resident.stub().Translate(req, timeout=60)
        assert [[h.text for h in t.hypotheses] for t in a.translations] == \
            [[h.text for h in t.hypotheses] for t in b.translations]
        [info] = resident.stub().ListModels(pb.ListModelsRequest()).models
        [plain_info] = plain.stub().ListModels(pb.ListModelsRequest()).models
        assert (info.device, info.device_resident, plain_info.device_resident) == ("cpu", True, False)
        port = resident.running.metrics_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'nmt_model_device{device="cpu",model="tiny",resident="true",variant="fp32"} 1.0' in text
    finally:
        plain.stop()
        resident.stop()


@pytest.mark.skipif(not HAS_CUDA, reason="needs onnxruntime-gpu and a GPU")
def test_cuda_resident_fp16_equals_fp32_on_most_sentences(setup, tiny_package):
    _, _, _, tok = setup
    package = ModelPackage.load(tiny_package)
    cpu = Runtime(package, RuntimeOptions(device="cpu"))
    gpu = Runtime(package, RuntimeOptions(device="cuda", variant="fp32"))
    assert (gpu.device, gpu.resident) == ("cuda", True)
    same(decode_all(gpu, jobs_for(tok, TEXTS, OPTIONS)), decode_all(cpu, jobs_for(tok, TEXTS, OPTIONS)))
