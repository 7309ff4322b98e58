#!/usr/bin/env bash
# Train a multilingual model (English<->German, French, Spanish, target-language tags) with
# the recipe of the shipped default model (models/default/README.md), then ship, export and
# score it. Two recipes, picked by DEVICE:
#
#   DEVICE=cuda bash scripts/train_default.sh
#       the shipped model's own recipe: preset `deep-shallow` (pre-LN, d_model 384,
#       6 encoder + 2 decoder layers), batches of 32,768 tokens, 2,000 warm-up steps,
#       9.5 minutes of training (6,832 steps on one H100).
#   bash scripts/train_default.sh
#       the CPU recipe: preset `deep-shallow-small` (the same shape at d_model 256),
#       batches of 4,096 tokens, 60 minutes on 2 threads.
#
# CHUNK=8 trains at most 8 minutes per call and exits; calling the script again with the
# same settings continues the run from its last checkpoint (for machines available in slices
# of under 10 minutes). Resuming needs the run directory, $RUN (runs/default-cpu or
# runs/default-gpu; runs/ is not in git): on another machine or a fresh clone, copy it
# there first, or the run starts over. When the run is done the averaged weights are
# shipped to $RUN/model, exported to packages/$(basename $RUN) and scored against PyTorch
# on the test split ($RUN/model/test-scores.txt). models/default is left alone unless
# SHIP=1, which then ships the new model over it.
#
#   PYTHON=python3 ...   use an existing environment instead of creating .venv
#   RUN=runs/x MINUTES=120 THREADS=2 CHUNK=0 ...   where, how long, how many CPU threads
#   SHIP=1 ...           also replace models/default with the new model (after it is scored)
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cpu}
CHUNK=${CHUNK:-0}
SHIP=${SHIP:-0}
case "$SHIP" in 0|1) ;; *) echo "SHIP must be 0 or 1, got '$SHIP'" >&2; exit 2 ;; esac
if [ -z "${PYTHON:-}" ]; then
  bash scripts/setup.sh
  PYTHON=.venv/bin/python
fi
case "$DEVICE" in
  cuda)
    RUN=${RUN:-runs/default-gpu}
    MINUTES=${MINUTES:-9.5}
    RECIPE=(--preset deep-shallow --batch-tokens 32768 --warmup 2000 --device cuda --set train.save_every=500)
    ;;
  cpu)
    RUN=${RUN:-runs/default-cpu}
    MINUTES=${MINUTES:-60}
    RECIPE=(--preset deep-shallow-small --batch-tokens 4096 --warmup 1000 --device cpu
            --threads "${THREADS:-2}" --set train.save_every=250)
    ;;
  *) echo "DEVICE must be cpu or cuda, got '$DEVICE'" >&2; exit 2 ;;
esac
# The shipped model's tokenizer (the one nmt-train trains for these six directions, seed 1)
# is placed in the run first, as it was for the shipped run: nmt-train reuses it.
if [ -d "$RUN/checkpoints" ]; then
  echo "continuing the run in $RUN (its checkpoints are there)"
else
  echo "starting a new run in $RUN; to resume it later, keep this directory (runs/ is not in git)"
fi
mkdir -p "$RUN"
[ -f "$RUN/tokenizer.model" ] || cp models/default/tokenizer.model "$RUN/tokenizer.model"
set +e
"$PYTHON" -m training.train --out "$RUN" --directions en-de,de-en,en-fr,fr-en,en-es,es-en \
  --max-minutes "$MINUTES" --chunk-minutes "$CHUNK" "${RECIPE[@]}" --set train.lr_scale=1.0 \
  --set train.eval_every=1000 --set train.eval_sentences=100
status=$?
set -e
if [ "$status" = 75 ]; then
  echo "$RUN is saved and not finished: run the same command again to continue it (it needs $RUN: keep" \
       "that directory, or copy it to the machine that continues)"
  exit 0
fi
[ "$status" = 0 ] || exit "$status"
"$PYTHON" -m training.ship "$RUN" "$RUN/model"
"$PYTHON" -m export.onnx_export "$RUN/model" "packages/$(basename "$RUN")" --int8 --force
"$PYTHON" -m export.verify "packages/$(basename "$RUN")" "$RUN/model" --split test --beam 1 --threads 2 \
  | tee "$RUN/model/test-scores.txt"
if [ "$SHIP" = 1 ]; then
  "$PYTHON" -m training.ship "$RUN" models/default
  echo "shipped $RUN over models/default (git diff models/default shows what changed)"
else
  echo "the model is in $RUN/model; models/default is unchanged (SHIP=1 replaces it)"
fi
