#!/usr/bin/env bash
# The client commands of README, run for real against the shipped model: serves
# packages/default (built from models/default if missing) on a local port, translates
# a file and single sentences, draws an attention map and runs a short load test.
# Writes docs/attention-example.png, docs/loadtest-cpu.png and bench/results/loadtest.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-50071}
THREADS=${THREADS:-2}
ADDR="127.0.0.1:$PORT"
[ -f packages/default/model.json ] || .venv/bin/nmt-export models/default packages/default --int8 --force
.venv/bin/nmt-serve --model default=packages/default --host 127.0.0.1 --port "$PORT" --threads "$THREADS" \
  --metrics-port -1 --log-level WARNING --cache off &  # the load test measures decoding, not cache hits
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
.venv/bin/python scripts/wait_serving.py --address "$ADDR"
set -x
.venv/bin/nmt-translate --address "$ADDR" -s en -t de "In the beginning God created the heavens and the earth."
.venv/bin/nmt-translate --address "$ADDR" -s en -t fr --beam 4 --nbest 2 "Jesus wept."
printf 'Blessed are the peacemakers.\n\nLove your enemies.\n' > /tmp/nmt-demo.en
.venv/bin/nmt-translate --address "$ADDR" -s en -t es -i /tmp/nmt-demo.en -o /tmp/nmt-demo.es
cat /tmp/nmt-demo.es
.venv/bin/nmt-translate --address "$ADDR" -s en -t de --attention-png docs/attention-example.png \
  "The Lord is my shepherd; I shall not want."
mkdir -p bench/results
.venv/bin/nmt-loadtest --address "$ADDR" -s en -t de --concurrency 1,8,32 --rate 4 --duration 15 --warmup 3 \
  --json bench/results/loadtest.json --png docs/loadtest-cpu.png
