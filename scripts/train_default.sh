#!/usr/bin/env bash
# How the shipped default model (models/default) was made, end to end, on the CPU:
# train the multilingual `small` model (en<->de, en<->fr, en<->es, target-language tags)
# for a bounded time, ship its averaged weights in half precision, export the package and
# score PyTorch and the served ONNX graphs side by side on the test split (John).
#   MINUTES=600 bash scripts/train_default.sh       # longer; rerunning resumes the same run
#   DEVICE=cuda MINUTES=60 bash scripts/train_default.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-100}
THREADS=${THREADS:-1}
DEVICE=${DEVICE:-auto}
RUN=${RUN:-runs/multi6}
bash scripts/setup.sh
.venv/bin/nmt-train --preset small --out "$RUN" --directions en-de,de-en,en-fr,fr-en,en-es,es-en \
  --max-minutes "$MINUTES" --warmup 1000 --set train.lr_scale=0.7 --set train.eval_every=1000 \
  --set train.eval_sentences=100 --set train.save_every=250 --threads "$THREADS" --device "$DEVICE"
.venv/bin/python -m training.ship "$RUN" models/default
.venv/bin/nmt-export models/default packages/default --int8 --force
.venv/bin/nmt-verify packages/default models/default --split test --beam 1 --threads 2 | tee models/default/test-scores.txt
