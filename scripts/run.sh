#!/usr/bin/env bash
# The main job, on a fresh machine: set up .venv, build the ONNX model package of the
# shipped default model (models/default: English<->German, French, Spanish; its sha256 is
# checked first), start the gRPC server on the CPU and translate real requests through it.
#   DEMO_ONLY=1 bash scripts/run.sh   # stop the server after answering (default: keep serving)
#   PORT=50052 bash scripts/run.sh
# To train a model yourself instead: bash scripts/train_default.sh (see README, Training).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/default}
PACKAGE=${PACKAGE:-packages/default}
PORT=${PORT:-50051}
bash scripts/setup.sh
.venv/bin/nmt-export "$MODEL" "$PACKAGE" --int8 --force
.venv/bin/nmt-serve --model "default=$PACKAGE" --host 127.0.0.1 --port "$PORT" --device auto --metrics-port -1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
.venv/bin/python scripts/wait_serving.py --address "127.0.0.1:$PORT"
ADDR="127.0.0.1:$PORT"
say() {  # say SRC TGT TEXT: print the text and its translation (beam 4)
  echo "$1: $3"
  echo "$2: $(.venv/bin/nmt-translate --address "$ADDR" -s "$1" -t "$2" --beam 4 -q "$3")"
}
say en de "In the beginning God created the heavens and the earth."
say de en "Und Gott sprach: Es werde Licht! und es ward Licht."
say en fr "Blessed are the peacemakers, for they shall be called children of God."
say fr en "Car Dieu a tant aimé le monde qu'il a donné son Fils unique."
say en es "Love your enemies, and pray for those who persecute you."
say es en "El Señor es mi pastor; nada me faltará."
if [ -z "${DEMO_ONLY:-}" ]; then
  echo "serving $PACKAGE on $ADDR (Ctrl-C to stop); try: .venv/bin/nmt-translate -s en -t de \"Jesus wept.\""
  wait $server
fi
