#!/usr/bin/env bash
# Continue training the default model on the GPU host in the device time left after
# scripts/gpu_run.sh: bf16 autocast, batches of 32,768 tokens, the corpus carried compressed, the
# run started with setsid nohup so it outlives the call, and the result brought back in files of at
# most 15 MiB (the host gives back at most 8 files of 16 MiB).
#
#   bash scripts/gpu_train.sh pack             # here: the corpus as runs/corpus.tar.xz (~38 MB), to copy to the GPU machine
#   bash scripts/gpu_train.sh start            # there (runs/corpus.tar.xz copied over): unpack it, start training
#   bash scripts/gpu_train.sh status           # there: is it running, the log's last lines
#   bash scripts/gpu_train.sh collect [OUT]    # there: ship the run (its average or last checkpoint), tar it,
#                                              #   split -b 15M into OUT ($OUT, else gpu-train-out); prints the join
#   bash scripts/gpu_train.sh start --dry-run  # any command: print what it would run
#
# Settings (environment): RUN=runs/gpu-continue, INIT=models/default (a shipped model's directory or a
# checkpoint: the run starts from its weights, config and tokenizer), MINUTES=5 (of training, --max-minutes),
# MAX_STEPS (default: the config's), BATCH_TOKENS=32768, WARMUP=300, SAVE_EVERY=200, DEVICE=cuda,
# CORPUS=runs/corpus.tar.xz, FOREGROUND=1 (wait for the run instead of detaching; the CPU check uses it),
# WAIT=1 (collect: wait for a running training to finish first), PYTHON (default .venv/bin/python, else python3),
# EXTRA (more nmt-train flags, e.g. "--set train.lr_scale=0.1").
#
# A CPU check of the whole path (tests/test_gpu_run.py does it on the tiny test model):
#   DEVICE=cpu INIT=path/to/tiny.pt MAX_STEPS=3 BATCH_TOKENS=2000 FOREGROUND=1 bash scripts/gpu_train.sh start
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true
dry=0 out=${OUT:-gpu-train-out}
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    *) out=$a ;;
  esac
done
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD:$PWD/protos${PYTHONPATH:+:$PYTHONPATH}"
RUN=${RUN:-runs/gpu-continue}
INIT=${INIT:-models/default}
MINUTES=${MINUTES:-5}
BATCH_TOKENS=${BATCH_TOKENS:-32768}
WARMUP=${WARMUP:-300}
SAVE_EVERY=${SAVE_EVERY:-200}
DEVICE=${DEVICE:-cuda}
CORPUS=${CORPUS:-runs/corpus.tar.xz}
run() {  # print a command; run it unless --dry-run
  echo "+ $*"
  [ "$dry" = 1 ] || "$@"
}

case "$cmd" in
  pack)
    mkdir -p "$(dirname "$CORPUS")"
    run "$PYTHON" -m corpus.build --pack "$CORPUS"
    echo "copy $CORPUS to the GPU machine, then: bash scripts/gpu_train.sh start"
    ;;
  start)
    if [ -f "$CORPUS" ]; then
      run "$PYTHON" -m corpus.build --unpack "$CORPUS"
    else
      echo "no $CORPUS here: a model trained on the mixed corpus needs it (bash scripts/gpu_train.sh pack, then" \
           "copy it here); a Bible-only or files model does not"
    fi
    run mkdir -p "$RUN"
    # the run continues INIT: its config (the data mixture, the model's shape) and its tokenizer, so every
    # embedding row carries over unchanged
    run "$PYTHON" - "$INIT" "$RUN" <<'PY'
import sys
from pathlib import Path
from training import checkpoint as ckpt_io
from training.config import RunConfig
ckpt = ckpt_io.load(ckpt_io.resolve(sys.argv[1]))
run = Path(sys.argv[2])
RunConfig.from_dict(ckpt["config"]).save(run / "init-config.json")
if not (run / "tokenizer.model").exists():
    (run / "tokenizer.model").write_bytes(ckpt["tokenizer_model"])
print(f"{run}: init-config.json and tokenizer.model from {sys.argv[1]} (step {ckpt.get('step')})")
PY
    threads=0
    [ "$DEVICE" = cpu ] && threads=${THREADS:-1}
    train=("$PYTHON" -m training.train --out "$RUN" --config "$RUN/init-config.json" --init-from "$INIT"
           --device "$DEVICE" --threads "$threads" --batch-tokens "$BATCH_TOKENS" --warmup "$WARMUP"
           --max-minutes "$MINUTES" --set train.bf16=true --set "train.save_every=$SAVE_EVERY"
           --set train.eval_every=0)
    [ -n "${MAX_STEPS:-}" ] && train+=(--max-steps "$MAX_STEPS")
    # shellcheck disable=SC2206
    [ -n "${EXTRA:-}" ] && train+=($EXTRA)
    if [ "${FOREGROUND:-0}" = 1 ]; then
      echo "+ ${train[*]} > $RUN/train.log"
      [ "$dry" = 1 ] || "${train[@]}" > "$RUN/train.log" 2>&1
      [ "$dry" = 1 ] || tail -n 3 "$RUN/train.log"
    else
      echo "+ setsid nohup ${train[*]} > $RUN/train.log 2>&1 &"
      if [ "$dry" = 0 ]; then
        setsid nohup "${train[@]}" > "$RUN/train.log" 2>&1 < /dev/null &
        echo $! > "$RUN/train.pid"
        sleep 5
        echo "started (pid $(cat "$RUN/train.pid")); it outlives this call. Later: bash scripts/gpu_train.sh status," \
             "then bash scripts/gpu_train.sh collect \$OUT"
        tail -n 5 "$RUN/train.log" || true
      fi
    fi
    ;;
  status)
    if [ -f "$RUN/train.pid" ] && kill -0 "$(cat "$RUN/train.pid")" 2>/dev/null; then
      echo "training is running (pid $(cat "$RUN/train.pid"))"
    else
      echo "training is not running"
    fi
    tail -n 8 "$RUN/train.log" 2>/dev/null || echo "no $RUN/train.log"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    ;;
  collect)
    if [ -f "$RUN/train.pid" ] && kill -0 "$(cat "$RUN/train.pid")" 2>/dev/null; then
      if [ "${WAIT:-0}" = 1 ]; then
        echo "waiting for training (pid $(cat "$RUN/train.pid")) to finish"
        while kill -0 "$(cat "$RUN/train.pid")" 2>/dev/null; do sleep 5; done
      else
        echo "training is still running: collecting its last saved checkpoint (WAIT=1 waits for the end)"
      fi
    fi
    run mkdir -p "$out"
    # the run's average.pt when it finished, else its last checkpoint: half-precision weights (~37 MB)
    run rm -rf "$RUN/model"
    run "$PYTHON" -m training.ship "$RUN" "$RUN/model"
    if [ "$dry" = 1 ]; then
      echo "+ tar -C $RUN/model -cf - . | split -b 15M - $out/model.tar.part-"
    else
      tar -C "$RUN/model" -cf - . | split -b 15M - "$out/model.tar.part-"
      cp "$RUN/train.log" "$out/train.log" 2>/dev/null || true
    fi
    join="cat model.tar.part-* > model.tar && mkdir -p $RUN/model && tar -xf model.tar -C $RUN/model"
    [ "$dry" = 1 ] || echo "$join" > "$out/JOIN.txt"
    ls -l "$out" 2>/dev/null || true
    echo "join on this side, in the folder the files came back to: $join"
    echo "then check it: sha256sum -c SHA256SUMS inside $RUN/model; python -m bench.gpu_run --checkpoint $RUN/model ..."
    ;;
  *)
    sed -n '2,24p' "$0"
    exit 2
    ;;
esac
