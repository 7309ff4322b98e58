"""``nmt-train``: train a Transformer on parallel text, on CPU or CUDA, one or many processes.

    nmt-train --preset small --out runs/small-ende --directions en-de,de-en --max-minutes 60
    torchrun --nproc_per_node 2 -m training.train --preset base --out runs/base ...

Running the same command again on the same ``--out`` resumes from its last checkpoint
and continues the same run (same data order, optimizer and RNG states).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNFINISHED,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_input_file,
    exit_status_help,
    fail,
)
from engine import placeholders
from training import checkpoint as ckpt_io
from training.config import MODEL_PRESETS, PAD_ID, DataConfig, RunConfig, TrainConfig, replace
from training.data import (
    BatchStream,
    TensorBatch,
    check_corpus,
    encode_pairs,
    eval_sets,
    label_direction,
    languages,
    load_pairs,
    pad,
    tokenizer_sentences,
)
from training.decode import translate
from training.model import Transformer, count_parameters
from training.tokenizer import Tokenizer, train_tokenizer
from training.warm_start import warm_start


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (paper, 5.3)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Sum of label-smoothed cross-entropy over real (non-pad) target tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1),
                           ignore_index=PAD_ID, label_smoothing=smoothing, reduction="sum")


# ---------------------------------------------------------------- distributed
@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device_kind: str) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return Dist(dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0")))


def barrier(d: Dist) -> None:
    if d.world > 1:
        dist.barrier()


def any_rank(flag: bool, d: Dist) -> bool:
    if d.world == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def pick_device(kind: str, d: Dist) -> torch.device:
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for but no CUDA device is available")
        torch.cuda.set_device(d.local_rank)
        return torch.device("cuda", d.local_rank)
    if kind != "cpu":
        raise ValueError(f"device {kind!r} must be auto, cpu or cuda")
    return torch.device("cpu")


def bf16_native(device: torch.device) -> bool:
    """Whether bfloat16 autocast pays on ``device``: CUDA, or a CPU with bf16 matrix units
    (AMX or AVX512-BF16; elsewhere the CPU emulates bf16 and runs slower than fp32)."""
    if device.type == "cuda":
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_bf16" in flags or " avx512_bf16" in flags


# ---------------------------------------------------------------- RNG state
def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------- evaluation
def dev_bleu(model: Transformer, tokenizer: Tokenizer, dev: dict[str, tuple[list[str], list[str]]],
             device: torch.device) -> dict[str, float]:
    import sacrebleu

    scores = {}
    for direction, (sources, refs) in dev.items():
        hyps = translate(model, tokenizer, sources, label_direction(direction)[1], device=device)
        scores[direction] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    model.train()
    return scores


# Above this mean cosine similarity between a sentence's encoder outputs, the encoder gives
# every position (nearly) the same vector and the decoder cannot see its source: how the
# post-LN runs stalled (docs/training.md, why pre-LN; 0.52-0.58 in a pre-LN run that trains).
COLLAPSED_ENCODER = 0.99


@torch.no_grad()
def encoder_cosine(model: Transformer, src: torch.Tensor) -> float:
    """Mean cosine similarity between the encoder outputs at the real positions of each
    sentence of ``src`` (B, S), averaged over sentences."""
    was_training = model.training
    model.eval()
    memory = F.normalize(model.encode(src).float(), dim=-1)  # (B, S, D)
    model.train(was_training)
    sims = []
    for row, mask in zip(memory, src.ne(PAD_ID)):
        x = row[mask]
        n = x.size(0)
        if n > 1:
            sims.append(float(((x @ x.T).sum() - n) / (n * n - n)))
    return sum(sims) / max(len(sims), 1)


MAX_DEV_LINES = 8  # more dev sets than this are drawn one line per source, averaged over its directions


def dev_series(evals: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """The lines of the dev-BLEU plot: one per dev set (``en-de`` or ``en-de/SOURCE``) while they are
    few; past MAX_DEV_LINES, one per source, the mean of its directions at each evaluation (a mixed
    corpus has dozens of sets, whose legend would cover the plot)."""
    keys = sorted({k for h in evals for k in h["dev_bleu"]})
    if len(keys) <= MAX_DEV_LINES or not all("/" in k for k in keys):
        return {k: [(h["step"], h["dev_bleu"][k]) for h in evals if k in h["dev_bleu"]] for k in keys}
    by_source: dict[str, list[str]] = {}
    for k in keys:
        by_source.setdefault(k.split("/", 1)[1], []).append(k)
    out: dict[str, list[tuple[int, float]]] = {}
    for source, members in sorted(by_source.items()):
        label = f"{source} (mean of {len(members)} direction{'s' if len(members) > 1 else ''})"
        for h in evals:
            scores = [v for k, v in h["dev_bleu"].items() if k in members]  # the run's order: the same sums
            if scores:
                out.setdefault(label, []).append((h["step"], round(sum(scores) / len(scores), 2)))
    return out


LOSS_WINDOW = 10  # logged losses in the loss curve's running mean


def plot_curves(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [h for h in history if "loss" in h]
    evals = [h for h in history if "dev_bleu" in h]
    # A run that skipped dev evaluation (a large --eval-every, as the fine-tuning stages use) gets the loss panel
    # alone: an empty "Dev BLEU" axis reads as a broken plot.
    fig, axes = plt.subplots(1, 2 if evals else 1, figsize=(11 if evals else 6.5, 4), squeeze=False)
    ax1 = axes[0][0]
    steps, losses = [h["step"] for h in train], [h["loss"] for h in train]
    # Each logged loss is the mean of one log interval's few batches, still noisy: a running mean shows the trend.
    smooth = len(losses) > LOSS_WINDOW
    ax1.plot(steps, losses, lw=1, alpha=0.35 if smooth else 1.0, label="logged")
    if smooth:
        mean = np.convolve(losses, np.full(LOSS_WINDOW, 1 / LOSS_WINDOW), mode="valid")
        ax1.plot(steps[LOSS_WINDOW - 1:], mean, lw=2, label=f"mean of the last {LOSS_WINDOW}")
        ax1.legend(fontsize="small")
    ax1.set(xlabel="step", ylabel="training loss (label-smoothed)", title="Loss")
    ax1.grid(alpha=0.3)
    if evals:
        ax2 = axes[0][1]
        for label, pts in dev_series(evals).items():
            ax2.plot(*zip(*pts), marker="o", label=label)
        ax2.set(xlabel="step", ylabel="BLEU (greedy)", title="Dev BLEU")
        ax2.grid(alpha=0.3)
        ax2.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- the loop
@dataclass
class State:
    step: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumed runs
    history: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = True  # False when a chunk bound stopped the call before the run's end


class Logger:
    """A tqdm bar on a terminal; plain lines otherwise (background runs write logs)."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.enabled = enabled
        self.bar = tqdm(total=total, initial=initial, disable=not enabled or not sys.stderr.isatty(),
                        dynamic_ncols=True, unit="step")

    def update(self, postfix: dict[str, str]) -> None:
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar.disable:
            print(text, flush=True)
        else:
            self.bar.write(text)

    def close(self) -> None:
        self.bar.close()


# Byte fallback takes 256 pieces; below this size they would crowd out the real pieces (and
# SentencePiece refuses a vocabulary smaller than the bytes plus the corpus's characters).
MIN_BYTE_FALLBACK_VOCAB = 1024


def prepare(cfg: RunConfig, out: Path, d: Dist) -> Tokenizer:
    """Train the tokenizer once (rank 0) on the training split; everyone loads it."""
    tok_path = out / "tokenizer.model"
    if d.main and not tok_path.exists():
        langs = languages(cfg.data)
        print(f"training a {cfg.data.vocab_size}-piece SentencePiece model on {'+'.join(langs)} ...", flush=True)
        byte_fallback = cfg.data.byte_fallback and cfg.data.vocab_size >= MIN_BYTE_FALLBACK_VOCAB
        if cfg.data.byte_fallback and not byte_fallback:
            print(f"byte fallback off: {cfg.data.vocab_size} pieces leave too little room beside its 256 byte "
                  f"pieces (it needs data.vocab_size >= {MIN_BYTE_FALLBACK_VOCAB}); unknown characters become <unk>",
                  flush=True)
        train_tokenizer(tokenizer_sentences(cfg.data), out / "tokenizer", cfg.data.vocab_size, langs,
                        sample=cfg.data.tokenizer_sample, seed=cfg.train.seed,
                        byte_fallback=byte_fallback,
                        symbols=placeholders.SYMBOLS if cfg.data.placeholders else ())
    barrier(d)
    return Tokenizer(tok_path)


# Exit status of ``nmt-train`` when ``--chunk-minutes`` stopped it before the run's own end
# (sysexits' EX_TEMPFAIL): the run is saved and the same command continues it.
EXIT_CHUNK_DONE = EXIT_UNFINISHED


class Window:
    """What the log reports over the steps since its last line: mean loss per target token,
    mean gradient norm, and tokens/s (source and target, all ranks)."""

    def __init__(self) -> None:
        self.loss = self.grad = 0.0
        self.tokens = self.src_tokens = self.steps = 0
        self.start = time.monotonic()

    def add(self, loss_sum: float, grad_norm: float, tokens: int, src_tokens: int) -> None:
        self.loss += loss_sum
        self.grad += grad_norm
        self.tokens += tokens
        self.src_tokens += src_tokens
        self.steps += 1

    @property
    def mean_loss(self) -> float:
        return self.loss / max(self.tokens, 1)

    def tokens_per_s(self) -> float:
        return (self.tokens + self.src_tokens) / max(time.monotonic() - self.start, 1e-9)

    def gather(self, d: Dist) -> None:
        """Loss and token counts summed over every rank (each saw its own batches), so the log
        reports the whole step's loss, not rank 0's share. Every rank calls it at the same step."""
        if d.world == 1:
            return
        totals = torch.tensor([self.loss, float(self.tokens), float(self.src_tokens)], dtype=torch.float64)
        dist.all_reduce(totals)
        self.loss, self.tokens, self.src_tokens = float(totals[0]), int(totals[1]), int(totals[2])


class Trainer:
    """One run: the model, its optimizer and data stream in their (resumed) state, and what a
    step, an evaluation and a checkpoint do. ``train`` drives it."""

    def __init__(self, cfg: RunConfig, out: Path, restart: bool) -> None:
        tc = cfg.train
        self.out = out
        self.d = d = init_distributed("cuda" if tc.device == "cuda" or (tc.device == "auto" and
                                                                        torch.cuda.is_available()) else "cpu")
        self.device = pick_device(tc.device, d)
        if tc.threads:
            torch.set_num_threads(tc.threads)
        existing = ckpt_io.list_checkpoints(out)
        if existing and restart:
            raise UsageError(f"--restart: {out} already holds checkpoints; choose another --out or remove it")
        if d.main:
            out.mkdir(parents=True, exist_ok=True)
        barrier(d)

        self.tokenizer = tokenizer = prepare(cfg, out, d)
        # The model's vocabulary is the tokenizer's real size (a small corpus may give fewer pieces).
        self.cfg = cfg = replace(cfg, model=replace(cfg.model, vocab_size=tokenizer.vocab_size))
        resume = ckpt_io.load(existing[-1]) if existing else None
        if resume is not None:
            saved = RunConfig.from_dict(resume["config"])
            if saved.model != cfg.model or saved.data != cfg.data:
                raise UsageError(f"{out} was trained with another model or data config; resume with the same one "
                                 f"(see {out / 'config.json'}) or use a new --out")
        if d.main:
            cfg.save(out / "config.json")

        torch.manual_seed(tc.seed)
        random.seed(tc.seed)
        model = Transformer(cfg.model)
        if tc.init_from and resume is None:
            note = warm_start(model, tokenizer, tc.init_from)
            if d.main:
                print(f"warm start from {tc.init_from}: {note}", flush=True)
        self.model = model = model.to(self.device)
        examples = encode_pairs(load_pairs(cfg.data, "train"), tokenizer, cfg.data.max_tokens_per_sentence,
                                protect=cfg.data.placeholders and tokenizer.protector.enabled)
        self.stream = BatchStream(examples, tc.batch_tokens, tc.seed, d.rank, d.world)
        self.dev: dict[str, tuple[list[str], list[str]]] = {}
        for label, pairs in eval_sets(cfg.data, "dev").items():
            take = pairs[:tc.eval_sentences] if tc.eval_sentences else pairs
            self.dev[label] = ([p.src for p in take], [p.tgt for p in take])
        # A fixed dev batch (the first 32 dev sources) for the encoder-collapse check at each evaluation.
        self.dev_src = pad([tokenizer.encode_source(src, label_direction(direction)[1])
                            for direction, (sources, _) in self.dev.items() for src in sources][:32]
                           ).to(self.device) if self.dev else None
        self.optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=tc.adam_betas, eps=tc.adam_eps,
                                          weight_decay=tc.weight_decay)
        self.state = State()
        self.saved_step = -1  # the step of this run's last checkpoint
        if resume is not None:
            model.load_state_dict(resume["model"])
            self.optimizer.load_state_dict(resume["optimizer"])
            self.stream.load_state_dict(resume["stream"])
            self.state = State(resume["step"], resume["elapsed"], resume["history"])
            self.saved_step = self.state.step
            set_rng_state(resume["rng"][d.rank] if d.rank < len(resume["rng"]) else resume["rng"][0])
        self.ddp_model = DistributedDataParallel(model) if d.world > 1 else model
        self.tok_bytes = tokenizer.model_proto
        self.logger = Logger(tc.max_steps, self.state.step, d.main)
        if d.main:
            self.logger.line(f"{'resuming at step ' + str(self.state.step) if resume else 'starting'}: "
                             f"{count_parameters(model) / 1e6:.2f}M parameters, {len(examples)} training pairs, "
                             f"vocab {tokenizer.vocab_size}, device {self.device}, world {d.world}")
        use_bf16 = tc.bf16 and bf16_native(self.device)
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext()
        if d.main:
            print(f"precision: {'bfloat16 autocast, fp32 weights' if use_bf16 else 'fp32'}", flush=True)

    def step(self, batches: Sequence[TensorBatch]) -> tuple[float, float, float]:
        """One optimizer step on ``batches`` (train.accumulate of them): (summed loss, gradient
        norm before clipping, lr). Each batch's loss is a mean over its target tokens and the
        step's gradient is the mean over its batches, as DDP's is over ranks: so one process with
        accumulate 2 takes the step that two ranks take with one batch each."""
        tc = self.cfg.train
        self.state.step += 1
        lr = noam_lr(self.state.step, self.cfg.model.d_model, tc.warmup_steps, tc.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for i, batch in enumerate(batches):
            # DDP all-reduces the gradients once, in the step's last backward.
            last = i == len(batches) - 1
            with (nullcontext() if last or self.d.world == 1 else self.ddp_model.no_sync()):
                with self.autocast:
                    logits = self.ddp_model(batch.src, batch.tgt_in)
                loss = label_smoothed_loss(logits, batch.tgt_out, tc.label_smoothing)
                (loss / (batch.n_tokens * len(batches))).backward()
            loss_sum += float(loss.detach())
        # The norm before clipping is logged: it is how a stalling or diverging run shows itself.
        max_norm = tc.clip_norm if tc.clip_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.optimizer.step()
        return loss_sum, float(grad_norm), lr

    def log(self, window: Window, lr: float) -> None:
        """One line (and one history entry) for the steps of ``window``."""
        window.gather(self.d)
        state, tok_s = self.state, window.tokens_per_s()
        grad = window.grad / max(window.steps, 1)
        state.history.append({"step": state.step, "loss": round(window.mean_loss, 4), "lr": lr,
                              "tok_s": round(tok_s), "grad_norm": round(grad, 4),
                              "minutes": round(state.elapsed / 60, 2)})
        self.logger.line(f"step {state.step:>7} | loss {window.mean_loss:.3f} | grad norm {grad:.2f} | "
                         f"{tok_s:,.0f} tok/s | lr {lr:.2e} | {state.elapsed / 60:.1f} min")

    def evaluate(self, collapse_check: bool = True) -> None:
        """Dev BLEU per direction, and whether the encoder has collapsed (rank 0 only: the
        other ranks wait at the caller's barrier)."""
        if self.d.main:
            scores = dev_bleu(self.model, self.tokenizer, self.dev, self.device)
            entry: dict[str, Any] = {"step": self.state.step, "dev_bleu": scores}
            line = f"step {self.state.step:>7} | dev BLEU {json.dumps(scores)}"
            if collapse_check and self.dev_src is not None:
                cosine = entry["encoder_cosine"] = round(encoder_cosine(self.model, self.dev_src), 4)
                line += f" | encoder cosine {cosine:.3f}"
            self.state.history.append(entry)
            self.logger.line(line)
            if entry.get("encoder_cosine", 0.0) > COLLAPSED_ENCODER:
                self.logger.line(f"warning: the encoder gives every position of a sentence nearly the same vector "
                                 f"(mean cosine {entry['encoder_cosine']:.3f} > {COLLAPSED_ENCODER}), so the "
                                 "decoder cannot see its source; post-LN runs stalled this way here: train pre-LN "
                                 "(--set model.pre_norm=true, or the deep-shallow presets)")

    def save(self) -> None:
        """A checkpoint of everything a resume needs (every rank's RNG state); old ones pruned."""
        d, state, tc = self.d, self.state, self.cfg.train
        self.saved_step = state.step
        rngs = [None] * d.world
        if d.world > 1:
            dist.all_gather_object(rngs, rng_state())
        else:
            rngs = [rng_state()]
        if d.main:
            ckpt_io.save_atomic({
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "stream": self.stream.state_dict(), "rng": rngs, "step": state.step, "elapsed": state.elapsed,
                "history": state.history, "config": self.cfg.to_dict(), "tokenizer_model": self.tok_bytes,
            }, ckpt_io.checkpoint_dir(self.out) / f"step_{state.step:08d}.pt")
            for old in ckpt_io.list_checkpoints(self.out)[:-max(tc.keep_checkpoints, tc.average_last, 1)]:
                old.unlink()
            self.write_history()

    def write_history(self) -> None:
        (self.out / "history.json").write_text(json.dumps(self.state.history))
        plot_curves(self.state.history, self.out / "curves.png")

    def time_up(self, started: float, chunk_end: float, chunk_minutes: float) -> bool:
        """Whether a time bound stops the run now (one agreement between ranks for both)."""
        tc, state = self.cfg.train, self.state
        now = time.monotonic()
        out_of_time = tc.max_minutes > 0 and now - started >= tc.max_minutes * 60
        if not any_rank(out_of_time or now >= chunk_end, self.d):
            return False
        if out_of_time:
            self.logger.line(f"time bound of {tc.max_minutes} minutes reached at step {state.step}")
        else:
            self.logger.line(f"chunk of {chunk_minutes} minutes done at step {state.step} "
                             f"({state.elapsed / 60:.1f} of the run's minutes); the same command continues it")
            state.finished = False
        return True


def train(cfg: RunConfig, out: str | Path, restart: bool = False, chunk_minutes: float = 0.0) -> State:
    """Train (or resume) the run in ``out``; returns its final state.

    ``chunk_minutes`` bounds this call alone (the run's ``max_minutes`` bounds the whole run,
    resumes included): at the bound the run is saved and left unfinished (``State.finished``
    False, no final evaluation or averaging), for machines that lend time in short slices."""
    run = Trainer(cfg, Path(out), restart)
    tc, state, d = run.cfg.train, run.state, run.d
    run.model.train()
    started = time.monotonic() - state.elapsed
    chunk_end = time.monotonic() + chunk_minutes * 60 if chunk_minutes > 0 else float("inf")
    window = Window()
    batches = iter(run.stream)
    while state.step < tc.max_steps and not run.time_up(started, chunk_end, chunk_minutes):
        step_batches = [next(batches).to(run.device) for _ in range(tc.accumulate)]
        loss_sum, grad_norm, lr = run.step(step_batches)
        state.elapsed = time.monotonic() - started
        window.add(loss_sum, grad_norm, sum(b.n_tokens for b in step_batches),
                   sum(int(b.src.ne(PAD_ID).sum()) for b in step_batches))
        # Between log lines the progress shows this rank's own figures (no collective per step).
        run.logger.update({"loss": f"{window.mean_loss:.3f}", "tok/s": f"{window.tokens_per_s() * d.world:,.0f}",
                           "lr": f"{lr:.2e}"})
        if state.step % tc.log_every == 0 or state.step == tc.max_steps:
            run.log(window, lr)
            window = Window()
        # Saved before the dev evaluation (minutes on a CPU), so a run stopped during it keeps
        # this step, and again after it, so the checkpoint's history holds the dev scores.
        saving = tc.save_every and state.step % tc.save_every == 0
        if saving:
            run.save()
        if tc.eval_every and state.step % tc.eval_every == 0 and run.dev:
            run.evaluate()
            barrier(d)
            if saving:
                run.save()
    run.logger.close()
    # From the run's own state, never from the directory: with several ranks, rank 0 may still be
    # writing the last checkpoint when another looks, and a rank that enters save() (a
    # collective) alone waits for ever.
    if run.saved_step != state.step:
        run.save()
    if d.main and state.finished:
        if run.dev and (not state.history or "dev_bleu" not in state.history[-1]):
            run.evaluate(collapse_check=False)
            run.write_history()
        finish_average(run.cfg, run.out, state.step, run.tok_bytes)
    barrier(d)
    if d.world > 1:
        dist.destroy_process_group()
    return state


def finish_average(cfg: RunConfig, out: Path, step: int, tok_bytes: bytes) -> None:
    """Average the last N checkpoints into ``average.pt`` (inference only, no optimizer)."""
    found = ckpt_io.list_checkpoints(out)[-cfg.train.average_last:]
    if cfg.train.average_last < 2 or len(found) < 2:
        return
    ckpt_io.save_atomic({"model": ckpt_io.average(found), "config": cfg.to_dict(), "step": step,
                         "averaged": [p.name for p in found], "tokenizer_model": tok_bytes}, out / "average.pt")
    print(f"averaged {len(found)} checkpoints ({', '.join(p.name for p in found)}) into {out / 'average.pt'}",
          flush=True)


# ---------------------------------------------------------------- CLI
# Pre-LN: the post-LN presets collapsed their encoder at our learning rates (docs/training.md, why pre-LN).
DEFAULT_PRESET = "deep-shallow-small"

def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _files(flag: str, items: list[str]) -> dict[str, str]:
    """``["en-de=a.en:a.de", "de-en=b.tsv"]`` -> {pair: spec}."""
    out = {}
    for item in items:
        pair, sep, spec = item.partition("=")
        if not sep or not pair or not spec:
            raise UsageError(f"{flag} {item!r}: expected PAIR=SRC_FILE:TGT_FILE or PAIR=FILE.tsv, e.g. en-de=train.tsv")
        out[pair] = spec
    return out


def build_config(args: argparse.Namespace) -> RunConfig:
    base = RunConfig.load(args.config) if args.config else RunConfig(model=MODEL_PRESETS[args.preset])
    model, data, tr = base.model, base.data, base.train
    if args.directions:
        data = replace(data, directions=tuple(x.strip() for x in args.directions.split(",") if x.strip()))
    if args.train_files:
        data = replace(data, corpus="files", train_files=_files("--train-files", args.train_files))
    if args.dev_files:
        data = replace(data, dev_files=_files("--dev-files", args.dev_files))
    if args.test_files:
        data = replace(data, test_files=_files("--test-files", args.test_files))
    flags = {"max_steps": args.max_steps, "max_minutes": args.max_minutes, "batch_tokens": args.batch_tokens,
             "accumulate": args.accumulate,
             "device": args.device, "threads": args.threads, "warmup_steps": args.warmup,
             "init_from": args.init_from}
    tr = replace(tr, **{k: v for k, v in flags.items() if v is not None})
    sections: dict[str, Any] = {"model": model, "data": data, "train": tr}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or section not in sections:
            raise UsageError(f"--set {item!r}: expected SECTION.KEY=VALUE with SECTION one of model, data, train")
        v = _parse_value(value)
        sections[section] = replace(sections[section], **{name: tuple(v) if isinstance(v, list) else v})
    return RunConfig(sections["model"], sections["data"], sections["train"])


def build_parser() -> argparse.ArgumentParser:
    tc, dc = TrainConfig(), DataConfig()
    p = ArgumentParser(prog="nmt-train", description=__doc__,
                       epilog="Flags left out take their value from --config, else from the preset and the "
                              "defaults shown. " + exit_status_help(EXIT_FAILED, EXIT_USAGE, EXIT_UNFINISHED) + ".")
    p.add_argument("--out", required=True, help="run directory: checkpoints, tokenizer, config, curves. Resuming "
                   "a run needs this directory: the same command on the same --out continues it")
    p.add_argument("--preset", choices=sorted(MODEL_PRESETS), default=DEFAULT_PRESET,
                   help=f"model shape (default: {DEFAULT_PRESET}, pre-LN; small and base are the paper's post-LN)")
    p.add_argument("--config", help="a config.json to start from instead of a preset (default: none)")
    p.add_argument("--directions", help=f"comma-separated language pairs, e.g. en-de,de-en (default: "
                   f"{','.join(dc.directions)})")
    p.add_argument("--train-files", nargs="*", metavar="PAIR=SRC:TGT|TSV",
                   help="your own parallel text, e.g. en-de=train.en:train.de or en-de=train.tsv (default: the "
                   "bundled Bible corpus)")
    p.add_argument("--dev-files", nargs="*", metavar="PAIR=SRC:TGT|TSV",
                   help="your own dev text, as --train-files (default: none with --train-files)")
    p.add_argument("--test-files", nargs="*", metavar="PAIR=SRC:TGT|TSV",
                   help="your own test text, as --train-files (default: none with --train-files)")
    p.add_argument("--max-steps", type=int, help=f"stop after this many steps (default: {tc.max_steps})")
    p.add_argument("--max-minutes", type=float, help="stop after this many minutes of training, resumes "
                   f"included (default: {tc.max_minutes:g}, no bound)")
    p.add_argument("--batch-tokens", type=int, help="source + target tokens per batch and device, padding "
                   f"included (default: {tc.batch_tokens})")
    p.add_argument("--accumulate", type=int, help="batches per optimizer step and device (gradient accumulation): "
                   f"a step learns from batch-tokens x accumulate x devices tokens (default: {tc.accumulate})")
    p.add_argument("--warmup", type=int, help=f"warm-up steps of the learning rate (default: {tc.warmup_steps})")
    p.add_argument("--init-from", metavar="CHECKPOINT", help="start a new run from this checkpoint's weights (or a "
                   "shipped model's directory, e.g. models/default), carried over to the run's tokenizer "
                   "(default: random weights)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help=f"(default: {tc.device})")
    p.add_argument("--threads", type=int, help=f"CPU intra-op threads; 0 = torch's default (default: {tc.threads})")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override any config field, e.g. --set model.dropout=0.3 (repeatable) (default: none)")
    p.add_argument("--restart", action="store_true", help="refuse to resume an existing run")
    p.add_argument("--chunk-minutes", type=float, default=0.0,
                   help="stop this call after this many minutes, saved, and exit with status "
                        f"{EXIT_CHUNK_DONE} if the run is not finished: the same command continues it; 0: no bound")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.chunk_minutes < 0:
            raise UsageError(f"--chunk-minutes must be 0 or more, not {args.chunk_minutes:g}")
        if args.config:
            check_input_file(args.config, "--config", "a config.json")
        try:
            cfg = build_config(args)
        except (TypeError, ValueError) as e:  # the config's own checks: unknown keys, shapes that do not fit
            raise UsageError(str(e)) from None
        languages(cfg.data)  # every direction parses
        check_corpus(cfg.data)
        state = train(cfg, args.out, restart=args.restart, chunk_minutes=args.chunk_minutes)
    except UsageError as e:
        return fail("nmt-train", str(e), EXIT_USAGE)
    if int(os.environ.get("RANK", "0")) == 0:
        last_eval = next((h["dev_bleu"] for h in reversed(state.history) if "dev_bleu" in h), None)
        verb = "done" if state.finished else "paused"
        print(f"{verb}: step {state.step}, {state.elapsed / 60:.1f} min, dev BLEU {last_eval}", flush=True)
    return EXIT_OK if state.finished else EXIT_CHUNK_DONE


if __name__ == "__main__":
    sys.exit(main())

