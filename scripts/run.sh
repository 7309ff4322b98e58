#!/usr/bin/env bash
# The main job, on a fresh machine: set up .venv, train a `small` English<->German
# Transformer on the bundled Bible corpus for a bounded time on the CPU (running the
# script again resumes the same run), score it on the test split, export it to an ONNX
# model package, start the gRPC server on the CPU and translate a real request.
#   MINUTES=60 bash scripts/run.sh    # train longer
#   DEMO_ONLY=1 bash scripts/run.sh   # stop the server after answering (default: keep serving)
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-5}
OUT=${OUT:-runs/quickstart}
PACKAGE=${PACKAGE:-packages/quickstart}
PORT=${PORT:-50051}
bash scripts/setup.sh
.venv/bin/nmt-train --preset small --out "$OUT" --directions en-de,de-en --max-minutes "$MINUTES" \
  --warmup 1000 --set train.lr_scale=0.7 --set train.eval_every=500 --set train.save_every=250
.venv/bin/nmt-evaluate "$OUT" --split test --beam 1 --limit 200
.venv/bin/nmt-export "$OUT" "$PACKAGE" --int8 --force
.venv/bin/nmt-serve --model "$PACKAGE" --host 127.0.0.1 --port "$PORT" --device auto --metrics-port -1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
.venv/bin/python scripts/wait_serving.py --address "127.0.0.1:$PORT"
.venv/bin/python scripts/request.py --address "127.0.0.1:$PORT" --source en --target de \
  "In the beginning God created the heavens and the earth." "Jesus wept."
.venv/bin/python scripts/request.py --address "127.0.0.1:$PORT" --source de --target en "Jesus weinte."
if [ -z "${DEMO_ONLY:-}" ]; then
  echo "serving $PACKAGE on 127.0.0.1:$PORT (Ctrl-C to stop)"
  wait $server
fi
