"""Post-LN against pre-LN on the CPU: same data, same steps, same seed, one thing changed per arm.

    python -m bench.studies.norm_stability --out runs/norm --steps 1200          # train the arms, then report
    python -m bench.studies.norm_stability --out runs/norm --report-only         # report existing runs

Every arm is the `small` preset (d_model 256, 4+4 layers) on en-de + de-en with the shipped
model's tokenizer, batches of 2,048 tokens, trained by ``nmt-train`` in its own process (two
at a time, one thread each). The report gives, per arm: training loss and dev BLEU along the
run, the mean gradient norm before clipping, and how much the model uses its source: the
dev loss (per target token, no label smoothing) with each target's own source against the
same targets with the sources of other verses (a model that has collapsed into a language
model of the target side scores the same either way), and the mean cosine similarity
between the encoder's outputs at the positions of one sentence (1.0 when the encoder gives
every position the same vector). A PNG draws the loss curves.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "models" / "default" / "tokenizer.model"

# name -> (what it shows, nmt-train overrides). Peak learning rate of the schedule:
# lr_scale * d_model^-0.5 * warmup^-0.5; 1.98e-3 for d_model 256, warm-up 1,000, scale 1.0.
ARMS: dict[str, tuple[str, list[str]]] = {
    "post-ln": ("post-LN, the recipe that stalled (peak lr 2.0e-3)", ["--warmup", "1000"]),
    "pre-ln": ("pre-LN, same recipe", ["--warmup", "1000", "--set", "model.pre_norm=true"]),
    "post-ln-lr-0.35": ("post-LN, peak lr 7e-4 (lr_scale 0.35)", ["--warmup", "1000", "--set", "train.lr_scale=0.35"]),
}
COMMON = ["--preset", "small", "--directions", "en-de,de-en", "--batch-tokens", "2048", "--threads", "1",
          "--device", "cpu", "--set", "train.eval_sentences=100",
          "--set", "train.log_every=50", "--set", "train.average_last=0"]


def train_arms(out: Path, names: list[str], steps: int, parallel: int) -> None:
    pending = list(names)
    running: list[tuple[str, subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < parallel:
            name = pending.pop(0)
            run = out / name
            run.mkdir(parents=True, exist_ok=True)
            if not (run / "tokenizer.model").exists():
                shutil.copyfile(TOKENIZER, run / "tokenizer.model")
            args = [*COMMON, *ARMS[name][1]]
            cmd = [sys.executable, "-m", "training.train", "--out", str(run), "--max-steps", str(steps),
                   "--set", f"train.eval_every={steps // 3}", "--set", f"train.save_every={steps // 3}", *args]
            print(f"training {name}: {' '.join(cmd[3:])}", flush=True)
            with open(out / f"{name}.log", "a") as log:  # the child keeps its own handle
                running.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)))
        time.sleep(5)
        for name, proc in list(running):
            if proc.poll() is not None:
                running.remove((name, proc))
                print(f"{name}: exit {proc.returncode}", flush=True)
                if proc.returncode:
                    raise SystemExit(f"{name} failed: see {out / (name + '.log')}")


@torch.no_grad()
def source_use(model, cfg, tokenizer, sentences: int = 200) -> tuple[float, float]:
    """Dev loss (nats per target token) with each target's own source and with other verses' sources."""
    from training.data import collate, encode_pairs, load_pairs
    from training.train import label_smoothed_loss

    model.eval()
    by_direction: dict[str, list] = {}
    for p in load_pairs(cfg.data, "dev"):
        if len(by_direction.setdefault(p.direction, [])) < sentences:
            by_direction[p.direction].append(p)
    totals = {"own": [0.0, 0], "other": [0.0, 0]}
    for pairs in by_direction.values():
        examples = encode_pairs(pairs, tokenizer, cfg.data.max_tokens_per_sentence)
        # pair target i with source i+7 (same direction, so the same target-language tag)
        shifted = [type(e)(examples[(i + 7) % len(examples)].src, e.tgt) for i, e in enumerate(examples)]
        for key, exs in (("own", examples), ("other", shifted)):
            for start in range(0, len(exs), 50):
                b = collate(exs[start:start + 50])
                totals[key][0] += float(label_smoothed_loss(model(b.src, b.tgt_in), b.tgt_out, 0.0))
                totals[key][1] += b.n_tokens
    return totals["own"][0] / totals["own"][1], totals["other"][0] / totals["other"][1]


def encoder_similarity(model, cfg, tokenizer, sentences: int = 50) -> float:
    """Mean cosine similarity between the encoder outputs of one sentence's positions, averaged
    over dev sentences: near 1.0 when the encoder has collapsed to one vector for every
    position, so that nothing about the source reaches the decoder."""
    from training.data import collate, encode_pairs, load_pairs
    from training.train import encoder_cosine

    pairs = load_pairs(cfg.data, "dev")[:sentences]
    return encoder_cosine(model, collate(encode_pairs(pairs, tokenizer, cfg.data.max_tokens_per_sentence)).src)


def last_model(run: Path):
    """The run's last checkpoint: model, config and tokenizer."""
    from training import checkpoint as ckpt_io

    model, cfg, ckpt = ckpt_io.load_model(ckpt_io.list_checkpoints(run)[-1])
    return model, cfg, ckpt_io.load_tokenizer(ckpt)


def report(out: Path, names: list[str]) -> list[dict]:
    rows = []
    for name in names:
        run = out / name
        if not (run / "history.json").exists():
            continue
        history = json.loads((run / "history.json").read_text())
        losses = {h["step"]: h["loss"] for h in history if "loss" in h}
        grads = [h["grad_norm"] for h in history if "grad_norm" in h]
        bleu = {h["step"]: h["dev_bleu"] for h in history if "dev_bleu" in h}
        model = last_model(run)
        own, other = source_use(*model)
        similarity = encoder_similarity(*model)
        rows.append({"arm": name, "what": ARMS[name][0], "loss": losses, "dev_bleu": bleu,
                     "grad_norm_mean": round(sum(grads) / max(len(grads), 1), 3),
                     "grad_norm_max": round(max(grads, default=0.0), 3),
                     "dev_nll_own_source": round(own, 3), "dev_nll_other_source": round(other, 3),
                     "encoder_cosine": round(similarity, 3)})
    for r in rows:
        marks = sorted(r["dev_bleu"])
        print(f"{r['arm']:<22} {r['what']}")
        print("    loss " + "  ".join(f"@{s}: {r['loss'].get(s, float('nan')):.3f}" for s in marks))
        print("    dev BLEU " + "  ".join(f"@{s}: {json.dumps(r['dev_bleu'][s])}" for s in marks))
        print(f"    grad norm mean {r['grad_norm_mean']:.2f} max {r['grad_norm_max']:.2f} | dev NLL own source "
              f"{r['dev_nll_own_source']:.3f}, other source {r['dev_nll_other_source']:.3f} (the source is worth "
              f"{r['dev_nll_other_source'] - r['dev_nll_own_source']:.3f} nats/token)")
        print(f"    mean cosine between a sentence's encoder outputs {r['encoder_cosine']:.3f} (1.0: collapsed)")
    (out / "report.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "norm_stability.png")
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in rows:
        steps = sorted(r["loss"])
        ax.plot(steps, [r["loss"][s] for s in steps], label=f"{r['arm']}: {r['what']}")
    ax.set(xlabel="step (2,048-token batches)", ylabel="training loss (label-smoothed)",
           title="small preset, en-de + de-en, CPU: post-LN vs pre-LN")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--parallel", type=int, default=2, help="arms trained at once (one thread each)")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    names = [a for a in args.arms.split(",") if a]
    unknown = [a for a in names if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    torch.set_num_threads(1)
    if not args.report_only:
        train_arms(args.out, names, args.steps, args.parallel)
    report(args.out, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
