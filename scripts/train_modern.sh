#!/usr/bin/env bash
# The recipe of the shipped default model (models/default/README.md): the Bible model of
# scripts/train_default.sh, carried to a byte-fallback tokenizer trained on the mixed corpus
# and fine-tuned on the CPU on modern text (LibreOffice help and UI strings from Debian's
# packages) with a replay of the Bible, bf16 autocast on CPUs with bf16 units.
#
#   INIT=models/default bash scripts/train_modern.sh
#
# INIT is the checkpoint it starts from (the Bible model: `git show
# 4eef2d8:models/default/model.pt` is the one the shipped model started from; its
# SHA256SUMS must sit beside it). The corpus is fetched with apt-get download on first use
# and cached (python -m corpus.build). CHUNK=30 stops each call after 30 minutes, saved; the
# same command continues the run from $RUN (runs/ is not in git: keep or copy it). SHIP=1
# ships the averaged result over models/default.
#
# To continue training the shipped model on a fresh machine (runs/ is gone): start a new run
# from it with its own tokenizer, so every embedding row carries over unchanged:
#
#   RUN=runs/modern-cpu-2 INIT=models/default TOKENIZER=models/default/tokenizer.model \
#     bash scripts/train_modern.sh
#
# SOURCES (the corpus mixture, JSON: share of each source per epoch; "bible/de-en" sets one
# direction's share of a source) and LR_SCALE default to the first fine-tune's; the second one of
# the model card set a larger Bible share. AVERAGE is how many checkpoints (one every 200 steps)
# the shipped weights average (3 by default). EVAL_EVERY (steps, 1000 by default) is how often the
# trainer scores its dev sentences (minutes on a 2-core CPU each; the step is saved before it).
#
# SET adds overrides (space-separated SECTION.KEY=VALUE). From a pre-LN INIT it can grow the model:
# SET='model.n_decoder_layers=4' starts with two more decoder layers that pass their input through
# unchanged (training/warm_start.py), so the run begins at INIT's quality with more room.
#
#   RUN=runs/modern-cpu MINUTES=100 THREADS=2 CHUNK=0 SHIP=0 TOKENIZER= PYTHON=.venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RUN:-runs/modern-cpu}
MINUTES=${MINUTES:-100}
CHUNK=${CHUNK:-0}
SHIP=${SHIP:-0}
INIT=${INIT:-models/default}
SOURCES=${SOURCES:-'{"bible": 0.2, "libreoffice-help": 1.0, "libreoffice-ui": 1.0}'}
LR_SCALE=${LR_SCALE:-0.17}
AVERAGE=${AVERAGE:-3}
EXTRA=()
for override in ${SET:-}; do EXTRA+=(--set "$override"); done
case "$SHIP" in 0|1) ;; *) echo "SHIP must be 0 or 1, got '$SHIP'" >&2; exit 2 ;; esac
if [ -z "${PYTHON:-}" ]; then
  bash scripts/setup.sh
  PYTHON=.venv/bin/python
fi
"$PYTHON" -m corpus.build
mkdir -p "$RUN"
if [ -n "${TOKENIZER:-}" ] && [ ! -f "$RUN/tokenizer.model" ]; then
  cp "$TOKENIZER" "$RUN/tokenizer.model"  # nmt-train uses a tokenizer it finds in the run
fi
set +e
"$PYTHON" -m training.train --out "$RUN" --preset deep-shallow \
  --directions en-de,de-en,en-fr,fr-en,en-es,es-en --init-from "$INIT" \
  --batch-tokens 6000 --warmup 300 --device cpu --threads "${THREADS:-2}" \
  --max-minutes "$MINUTES" --chunk-minutes "$CHUNK" \
  --set data.corpus=mixed \
  --set "data.sources=$SOURCES" \
  --set "train.lr_scale=$LR_SCALE" --set train.save_every=200 --set "train.keep_checkpoints=$AVERAGE" \
  --set "train.average_last=$AVERAGE" --set "train.eval_every=${EVAL_EVERY:-1000}" --set train.eval_sentences=100 \
  --set train.log_every=25 "${EXTRA[@]}"
status=$?
set -e
if [ "$status" = 75 ]; then
  echo "$RUN is saved and not finished: run the same command again to continue it"
  exit 0
fi
[ "$status" = 0 ] || exit "$status"
"$PYTHON" -m training.ship "$RUN" "$RUN/model"
if [ "$SHIP" = 1 ]; then
  "$PYTHON" -m training.ship "$RUN" models/default
  echo "shipped $RUN over models/default (git diff models/default shows what changed)"
fi
