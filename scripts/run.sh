#!/usr/bin/env bash
# The main job, on a fresh machine: set up .venv, build the ONNX model package of the
# shipped default model (models/default: English<->German, French, Spanish; its sha256 is
# checked first), start the gRPC server on the CPU and translate real requests through it.
#   DEMO_ONLY=1 bash scripts/run.sh   # stop the server after answering (default: keep serving)
#   PORT=50052 bash scripts/run.sh    # another port (this one must be free: the script stops if not)
#   MODEL=runs/x PACKAGE=packages/x bash scripts/run.sh   # another checkpoint and package
# The package is exported only when it is missing or was exported from another checkpoint
# (the checkpoint's sha256 is recorded in its model.json), and never while a running
# nmt-serve serves it. To train a model yourself: bash scripts/train_default.sh (README, Training).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/default}
PACKAGE=${PACKAGE:-packages/default}
PORT=${PORT:-50051}
ADDR="127.0.0.1:$PORT"
# First the port: a server already listening there would answer the health check meant for
# ours while ours fails to start (standard library only: .venv may not exist yet).
"${PYTHON:-python3}" scripts/run_checks.py port-free 127.0.0.1 "$PORT"
bash scripts/setup.sh
if .venv/bin/python scripts/run_checks.py package-current "$PACKAGE" "$MODEL"; then
  echo "$PACKAGE is up to date with $MODEL"
else
  .venv/bin/python scripts/run_checks.py package-unused "$PACKAGE"
  .venv/bin/nmt-export "$MODEL" "$PACKAGE" --int8 --force
fi
.venv/bin/nmt-serve --model "default=$PACKAGE" --host 127.0.0.1 --port "$PORT" --device auto --metrics-port -1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
if ! .venv/bin/python scripts/wait_serving.py --address "$ADDR" --pid "$server"; then
  if kill -0 "$server" 2>/dev/null; then exit 1; fi  # still running, but not the server answering
  status=0
  wait "$server" || status=$?
  exit $((status ? status : 1))
fi
say() {  # say SRC TGT TEXT: print the text and its translation (beam 4)
  echo "$1: $3"
  echo "$2: $(.venv/bin/nmt-translate --address "$ADDR" -s "$1" -t "$2" --beam 4 -q "$3")"
}
say en de "Please restart your computer before installing the update."
say de en "Klicken Sie auf OK, um die Änderungen zu speichern."
say en fr "Select the cells that you want to sort, then choose Data - Sort."
say fr en "Le fichier est trop volumineux pour être envoyé par e-mail."
say en es "The file report.pdf (25 MB) is at https://example.org/files; write to help@example.org."
say es en "El Señor es mi pastor; nada me faltará."
if [ -z "${DEMO_ONLY:-}" ]; then
  echo "serving $PACKAGE on $ADDR (Ctrl-C to stop); try: .venv/bin/nmt-translate -s en -t de \"Jesus wept.\""
  wait $server
fi
