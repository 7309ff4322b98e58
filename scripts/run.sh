#!/usr/bin/env bash
# The main job, on a fresh machine: set up .venv, train a `small` English<->German
# Transformer on the bundled Bible corpus for a bounded time on the CPU, then score it
# on the test split (John) with sacreBLEU. Run it again to resume the same run.
#   MINUTES=60 bash scripts/run.sh     # train longer (resumes where the last run stopped)
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-5}
OUT=${OUT:-runs/quickstart}
bash scripts/setup.sh
.venv/bin/nmt-train --preset small --out "$OUT" --directions en-de,de-en --max-minutes "$MINUTES" \
  --warmup 1000 --set train.lr_scale=0.7 --set train.eval_every=500 --set train.save_every=250
.venv/bin/nmt-evaluate "$OUT" --split test --beam 1 --limit 200
echo "checkpoints, curves.png and scores are in $OUT"
