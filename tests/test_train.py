"""The training loop: schedule, loss, resume, averaging, the CLI, and DDP with two CPU processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training import checkpoint as ckpt_io
from training.config import MODEL_PRESETS, PAD_ID, DataConfig, RunConfig, TrainConfig, replace
from training.train import EXIT_CHUNK_DONE, Trainer, label_smoothed_loss, noam_lr, train

ROOT = Path(__file__).resolve().parents[1]


def test_noam_schedule_warms_up_then_decays():
    d, warmup = 512, 4000
    assert noam_lr(1, d, warmup) == pytest.approx(d**-0.5 * warmup**-1.5)
    assert noam_lr(warmup, d, warmup) == pytest.approx(d**-0.5 * warmup**-0.5)
    assert noam_lr(warmup // 2, d, warmup) < noam_lr(warmup, d, warmup) > noam_lr(4 * warmup, d, warmup)
    assert noam_lr(4 * warmup, d, warmup) == pytest.approx(noam_lr(warmup, d, warmup) / 2)


def test_label_smoothing_matches_its_definition():
    logits = torch.tensor([[[2.0, 0.5, -1.0, 0.0]]])
    target = torch.tensor([[1]])
    logp = torch.log_softmax(logits, -1)[0, 0]
    eps = 0.1
    expected = -((1 - eps) * logp[1] + eps * logp.mean())
    assert label_smoothed_loss(logits, target, eps).item() == pytest.approx(expected.item(), abs=1e-6)
    assert label_smoothed_loss(logits, torch.tensor([[0]]), eps).item() == 0.0  # pad is ignored


def tiny_run(corpus: dict[str, Path], **train_overrides) -> RunConfig:
    data = DataConfig(corpus="files", directions=("en-de",), train_files={"en-de": str(corpus["train"])},
                      dev_files={"en-de": str(corpus["dev"])}, vocab_size=300)
    tc = TrainConfig(batch_tokens=600, warmup_steps=10, log_every=2, eval_every=0, save_every=3, average_last=2,
                     keep_checkpoints=2, device="cpu", threads=1)
    model = replace(MODEL_PRESETS["tiny"], dropout=0.1)
    return RunConfig(model, data, replace(tc, **train_overrides))


def test_resume_continues_the_same_run(tmp_path, toy_corpus):
    straight = train(tiny_run(toy_corpus, max_steps=8), tmp_path / "a")
    cut = train(tiny_run(toy_corpus, max_steps=5), tmp_path / "b")
    assert cut.step == 5
    resumed = train(tiny_run(toy_corpus, max_steps=8), tmp_path / "b")
    assert resumed.step == straight.step == 8
    a = ckpt_io.load(ckpt_io.list_checkpoints(tmp_path / "a")[-1])
    b = ckpt_io.load(ckpt_io.list_checkpoints(tmp_path / "b")[-1])
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["history"][-1]["loss"] == b["history"][-1]["loss"]  # the same last logging window (steps 7-8)
    assert a["stream"] == b["stream"]


def test_a_chunk_bound_pauses_the_run_and_the_same_call_finishes_it(tmp_path, toy_corpus):
    straight = train(tiny_run(toy_corpus, max_steps=6), tmp_path / "a")
    paused = train(tiny_run(toy_corpus, max_steps=6), tmp_path / "b", chunk_minutes=1e-9)
    assert not paused.finished and paused.step < 6
    assert not (tmp_path / "b" / "average.pt").exists()  # an unfinished run is not averaged
    resumed = train(tiny_run(toy_corpus, max_steps=6), tmp_path / "b", chunk_minutes=60)
    assert resumed.finished and resumed.step == straight.step == 6
    a = ckpt_io.load(ckpt_io.list_checkpoints(tmp_path / "a")[-1])
    b = ckpt_io.load(ckpt_io.list_checkpoints(tmp_path / "b")[-1])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_checkpoints_are_self_describing_and_averaged(tmp_path, toy_corpus):
    out = tmp_path / "run"
    train(tiny_run(toy_corpus, max_steps=9), out)
    names = [p.name for p in ckpt_io.list_checkpoints(out)]
    assert names == ["step_00000006.pt", "step_00000009.pt"]  # keep_checkpoints=2
    avg = ckpt_io.load(out / "average.pt")
    assert avg["averaged"] == names
    s6, s9 = (ckpt_io.load(ckpt_io.checkpoint_dir(out) / n)["model"] for n in names)
    key = "encoder_layers.0.feed_forward.w_1.weight"
    assert torch.allclose(avg["model"][key], (s6[key] + s9[key]) / 2, atol=1e-7)
    model, cfg, _ = ckpt_io.load_model(out)  # a run directory resolves to its average
    assert cfg == RunConfig.load(out / "config.json")
    assert cfg.model.vocab_size == model.embedding.num_embeddings
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any("dev_bleu" in h for h in json.loads((out / "history.json").read_text()))


def test_a_step_is_saved_before_its_dev_evaluation_and_again_with_its_scores(tmp_path, toy_corpus, monkeypatch):
    out = tmp_path / "run"
    train(tiny_run(toy_corpus, max_steps=3, eval_every=3), out)
    saved = ckpt_io.load(ckpt_io.checkpoint_dir(out) / "step_00000003.pt")
    assert [h["step"] for h in saved["history"] if "dev_bleu" in h] == [3]

    def stopped(self, collapse_check=True):  # the process stopped during the evaluation
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "evaluate", stopped)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_run(toy_corpus, max_steps=3, eval_every=3), tmp_path / "stopped")
    assert [p.name for p in ckpt_io.list_checkpoints(tmp_path / "stopped")] == ["step_00000003.pt"]


def test_config_with_unknown_key_fails_loudly(tmp_path):
    bad = RunConfig().to_dict()
    bad["model"]["d_modle"] = 256
    with pytest.raises(ValueError, match=r"model: unknown key\(s\) d_modle"):
        RunConfig.from_dict(bad)
    assert RunConfig.from_dict(RunConfig().to_dict()) == RunConfig()


def test_resume_with_another_model_is_refused(tmp_path, toy_corpus):
    train(tiny_run(toy_corpus, max_steps=2), tmp_path / "r")
    other = tiny_run(toy_corpus, max_steps=4)
    other = replace(other, model=replace(other.model, d_ff=128))
    with pytest.raises(ValueError, match="another model or data config"):
        train(other, tmp_path / "r")


def _cli(*args: str) -> list[str]:
    return [sys.executable, *args]


def _console_script(name: str, module: str) -> list[str]:
    """The installed console script when there is one (as users run it), else the module."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_nmt_train_command_line_end_to_end(tmp_path, toy_corpus):
    out = tmp_path / "cli"
    cmd = [*_console_script("nmt-train", "training.train"), "--preset", "tiny", "--out", str(out),
           "--directions", "en-de", "--train-files", f"en-de={toy_corpus['train']}",
           "--dev-files", f"en-de={toy_corpus['dev']}", "--max-steps", "4", "--batch-tokens", "500", "--device", "cpu",
           "--set", "data.vocab_size=300", "--set", "train.log_every=2", "--set", "train.eval_every=4"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "step       2 | loss" in r.stdout and "dev BLEU" in r.stdout and "encoder cosine" in r.stdout
    assert "done: step 4" in r.stdout
    assert (out / "checkpoints" / "step_00000004.pt").is_file()
    assert "grad norm" in r.stdout and "grad_norm" in json.loads((out / "history.json").read_text())[0]
    paused = subprocess.run([*cmd[:cmd.index("--max-steps") + 1], "8", *cmd[cmd.index("--max-steps") + 2:],
                             "--chunk-minutes", "1e-9"], capture_output=True, text=True, env=_env(), cwd=ROOT,
                            timeout=120)
    assert paused.returncode == EXIT_CHUNK_DONE == 75, paused.stderr
    assert "paused: step 4" in paused.stdout and "the same command continues it" in paused.stdout
    evaluate = _console_script("nmt-evaluate", "training.evaluate")
    ev = subprocess.run([*evaluate, str(out), "--split", "dev", "--beam", "2"], capture_output=True, text=True,
                        env=_env(), cwd=ROOT, timeout=120)
    assert ev.returncode == 0, ev.stderr
    assert ev.stdout.startswith("en-de  dev  BLEU")
    result = json.loads((out / "eval_step_00000004_dev_beam2.json").read_text())
    assert result["scores"][0]["sentences"] == 10 and len(result["outputs"]["en-de"]) == 10
    bad = subprocess.run(_cli("-m", "training.train", "--out", str(out), "--set", "model.d_modle=3"),
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "unknown key(s) d_modle" in bad.stderr


def test_two_gloo_ranks_take_the_steps_one_process_takes_accumulating_two_batches(tmp_path, toy_corpus):
    """torchrun with two CPU processes: each rank reads its own batches and the step's gradient is
    their mean, so one process that accumulates two batches a step (--accumulate 2) must take the
    same steps: the same logged loss at every step and the same weights, through a resume.
    Checkpoints are written once (rank 0) and hold every rank's RNG state."""
    common = ["--preset", "tiny", "--directions", "en-de", "--train-files", f"en-de={toy_corpus['train']}",
              "--batch-tokens", "500", "--device", "cpu", "--threads", "1", "--set", "data.vocab_size=300",
              "--set", "model.dropout=0.0", "--set", "train.bf16=false", "--set", "train.log_every=1",
              "--set", "train.save_every=2", "--set", "train.average_last=0"]
    torchrun = _cli("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "training.train")
    ddp, single = tmp_path / "ddp", tmp_path / "single"

    def run(cmd: list[str]) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    out = run([*torchrun, *common, "--out", str(ddp), "--max-steps", "4"])
    assert "world 2" in out and "done: step 4" in out
    assert sorted(p.name for p in ckpt_io.checkpoint_dir(ddp).iterdir()) == ["step_00000002.pt", "step_00000004.pt"]
    assert len(ckpt_io.load(ckpt_io.list_checkpoints(ddp)[-1])["rng"]) == 2  # each rank's, for an exact resume
    out = run([*torchrun, *common, "--out", str(ddp), "--max-steps", "6"])
    assert "resuming at step 4" in out and "done: step 6" in out
    assert [p.name for p in ckpt_io.list_checkpoints(ddp)][-1] == "step_00000006.pt"

    single.mkdir()
    (single / "tokenizer.model").write_bytes((ddp / "tokenizer.model").read_bytes())  # the same pieces
    out = run(_cli("-m", "training.train", *common, "--out", str(single), "--max-steps", "6", "--accumulate", "2"))
    assert "world 1" in out and "done: step 6" in out

    def losses(run_dir: Path) -> list[float]:
        return [h["loss"] for h in json.loads((run_dir / "history.json").read_text()) if "loss" in h]

    assert len(losses(ddp)) == 6  # every step logged, the resumed ones included
    assert losses(ddp) == pytest.approx(losses(single), rel=1e-4)  # the whole step's loss, not rank 0's share
    a = ckpt_io.load(ckpt_io.list_checkpoints(ddp)[-1])["model"]
    b = ckpt_io.load(ckpt_io.list_checkpoints(single)[-1])["model"]
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-5), k


def test_ranks_read_disjoint_batches_that_together_are_the_single_stream(toy_corpus):
    from training.data import BatchStream, Example

    # Example i's source is token 10 + i, repeated: a batch's tokens say which examples it holds.
    examples = [Example(src=[10 + i] * (3 + i % 11), tgt=[9] * (2 + i % 5)) for i in range(300)]

    def first(stream: BatchStream, n: int) -> list[set[int]]:
        it = iter(stream)
        return [set(next(it).src.flatten().tolist()) - {PAD_ID} for _ in range(n)]

    single = first(BatchStream(examples, 120, seed=3), 8)
    rank0, rank1 = (first(BatchStream(examples, 120, seed=3, rank=r, world=2), 4) for r in (0, 1))
    assert rank0 == single[0::2] and rank1 == single[1::2]
    assert not set().union(*rank0) & set().union(*rank1)


def test_encoder_cosine_is_one_for_a_collapsed_encoder_and_lower_otherwise():
    from training.model import Transformer
    from training.train import COLLAPSED_ENCODER, encoder_cosine

    torch.manual_seed(0)
    model = Transformer(replace(MODEL_PRESETS["tiny"], vocab_size=50))
    varied = torch.tensor([[4, 9, 17, 23, 3], [5, 6, 3, 0, 0]])
    assert -1.0 <= encoder_cosine(model, varied) < COLLAPSED_ENCODER
    model.positional.table.zero_()  # no positions: a repeated token gives identical outputs
    assert encoder_cosine(model, torch.tensor([[7, 7, 7, 7]])) == pytest.approx(1.0, abs=1e-6)
    assert model.training  # the check leaves the model's mode as it found it


def test_dev_plot_draws_few_sets_as_they_are_and_many_as_one_mean_per_source():
    from training.train import MAX_DEV_LINES, dev_series

    few = [{"step": 100, "dev_bleu": {"en-de": 10.0, "de-en": 12.0}},
           {"step": 200, "dev_bleu": {"en-de": 11.0, "de-en": 13.5}}]
    assert dev_series(few) == {"de-en": [(100, 12.0), (200, 13.5)], "en-de": [(100, 10.0), (200, 11.0)]}

    directions = ("en-de", "de-en", "en-fr", "fr-en", "en-es", "es-en")
    scores = {f"{d}/bible": 20.0 + i for i, d in enumerate(directions)}
    scores |= {f"{d}/debian-catalogs": 10.0 for d in directions} | {"en-de/debian-examples": 7.25}
    assert len(scores) > MAX_DEV_LINES
    many = [{"step": 1000, "dev_bleu": scores}]
    assert dev_series(many) == {"bible (mean of 6 directions)": [(1000, 22.5)],
                                "debian-catalogs (mean of 6 directions)": [(1000, 10.0)],
                                "debian-examples (mean of 1 direction)": [(1000, 7.25)]}


def test_curves_of_a_run_without_dev_evaluation_are_the_loss_panel_alone(tmp_path):
    import matplotlib.image

    from training.train import plot_curves

    losses = [{"step": 25 * (i + 1), "loss": 3.0 - 0.01 * i} for i in range(30)]
    plot_curves(losses, tmp_path / "loss.png")
    plot_curves([*losses, {"step": 750, "dev_bleu": {"en-de": 10.0}}], tmp_path / "both.png")
    # 100 dpi: the loss panel alone is 6.5 inches wide, loss beside dev BLEU 11
    assert matplotlib.image.imread(tmp_path / "loss.png").shape[:2] == (400, 650)
    assert matplotlib.image.imread(tmp_path / "both.png").shape[:2] == (400, 1100)
