#!/usr/bin/env bash
# End-to-end test of the deployment: docker-compose.yml run for real.
#
#   sudo bash scripts/compose_e2e.sh [CHECKPOINT]
#
# 1. Starts a Docker engine when none answers (installs docker.io, docker-compose and
#    debootstrap from Debian, runs dockerd in the background; stops it at the end).
# 2. Builds the base image local/debian:bookworm with debootstrap (once; reused while it
#    exists), trusting the host's CA certificates, and the server, balancer and
#    Prometheus images on it. The training image (torch) is not built here.
# 3. Makes a model package as README says: builds the training/export image (with the CPU
#    torch wheel pip finds for the project's own torch version, put in docker/wheels/) and
#    runs docker-compose's export service on $1 or $E2E_CHECKPOINT, else the model shipped
#    in models/default/model.pt, else a tiny model trained on the host for 200 steps (about
#    2 minutes). Without a CPU wheel of torch (and no TORCH_INDEX) the image would carry
#    CUDA's libraries: then it says so and exports on the host with the project's .venv.
# 4. Starts the CPU stack (2 replicas behind nginx, the HTTP gateway) and Prometheus,
#    translates through the balancer and through the gateway (LibreTranslate's /translate:
#    the same text), runs a short load test through the balancer, checks from each replica's own
#    metrics that both served requests (and that Prometheus scrapes both), stops one
#    replica (it must drain and exit 0) and translates again through the balancer.
# 5. Tears everything down (docker-compose down -v).
#
# Only 127.0.0.1 (published ports) and the containers' own loopback are ever targeted.
# Every wait is bounded. Exit status 0 only when all of the above ran and passed.
# Settings: E2E_CHECKPOINT, E2E_PORT (50061), E2E_PROMETHEUS_PORT (9191), E2E_HTTP_PORT (5061),
# BASE_IMAGE (local/debian:bookworm), E2E_KEEP=1 (leave the stack up on failure).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-local/debian:bookworm}
PROJECT=nmt-e2e
PORT=${E2E_PORT:-50061}
PROM_PORT=${E2E_PROMETHEUS_PORT:-9191}
HTTP_PORT=${E2E_HTTP_PORT:-5061}
ADDRESS=127.0.0.1:$PORT
WORK=$(mktemp -d -t nmt-compose-e2e.XXXXXX)
STARTED=$(date +%s)
STACK_UP=""
WHEEL=""  # the torch wheel this script put in docker/wheels/ (removed at the end)
PY=.venv/bin/python

log() { echo "[compose-e2e +$(($(date +%s) - STARTED))s] $*"; }
fail() { echo "[compose-e2e] FAILED: $*" >&2; exit 1; }
# shellcheck source=scripts/e2e_docker.sh
source scripts/e2e_docker.sh

# Compose reads these for the build arguments, the mounts and the published ports.
export BASE_IMAGE NMT_MODELS=$WORK/models NMT_PACKAGE=default NMT_PUBLISH_HOST=127.0.0.1 \
       NMT_GRPC_PORT=$PORT NMT_PROMETHEUS_PORT=$PROM_PORT NMT_HTTP_PORT=$HTTP_PORT NMT_CPU_THREADS=1
export COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0 COMPOSE_HTTP_TIMEOUT=300 DEBIAN_FRONTEND=noninteractive
COMPOSE=(docker-compose -p "$PROJECT" --profile monitoring)  # the CPU stack is the default

cleanup() {
  local rc=$?
  set +e
  if [ -n "$STACK_UP" ]; then
    if [ "$rc" -ne 0 ]; then
      log "logs of the stack (last lines):"
      timeout 60 "${COMPOSE[@]}" logs --no-color --tail 30 2>&1 | tail -150
      log "containers of the stack that stopped:"
      report_exited "com.docker.compose.project=$PROJECT"
    fi
    if [ "$rc" -ne 0 ] && [ -n "${E2E_KEEP:-}" ]; then
      log "E2E_KEEP: leaving the stack $PROJECT up"
    else
      log "tearing down"
      timeout 180 "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || log "down failed"
    fi
  fi
  stop_engine
  rm -rf "$WORK"
  [ -z "$WHEEL" ] || rm -f "$WHEEL"
  if [ "$rc" -eq 0 ]; then log "PASSED in $(($(date +%s) - STARTED))s"; else log "failed (exit $rc)"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. the engine -------------------------------------------------------------------
start_engine
timeout 60 "${COMPOSE[@]}" --profile export config -q || fail "docker-compose config -q"
# A stack left by an earlier run (E2E_KEEP) would hold the ports.
timeout 180 "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true

# --- 2. images -----------------------------------------------------------------------
ensure_base_image
log "building the server, balancer, gateway and Prometheus images"
timeout 1800 nice -n 10 "${COMPOSE[@]}" build server lb gateway prometheus >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log"; fail "image build failed"; }
timeout 60 docker run --rm --entrypoint python nmt-server:cpu -c '
import importlib.util, onnxruntime, grpc, server.main
assert not [m for m in ("torch", "onnx") if importlib.util.find_spec(m)], "torch or onnx in the server image"' \
  || fail "the server image holds torch or onnx, or lacks the server"
timeout 60 docker run --rm --entrypoint python nmt-http -c '
import importlib.util, gateway.main
assert not [m for m in ("torch", "onnx", "onnxruntime") if importlib.util.find_spec(m)], "heavy modules in the gateway"' \
  || fail "the gateway image holds torch or onnxruntime, or lacks the gateway"

# --- 3. a model package --------------------------------------------------------------
ckpt=${1:-${E2E_CHECKPOINT:-}}
if [ -z "$ckpt" ] && [ -d models/default ]; then
  if [ -f models/default/model.pt ]; then
    ckpt=models/default/model.pt
  else
    ckpt=$(find models/default -maxdepth 1 -name '*.pt' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
  fi
fi
export OMP_NUM_THREADS=1
if [ -z "$ckpt" ] && [ -f models/default/model.json ]; then
  log "models/default is a model package: serving it as it is"
  mkdir -p "$WORK/models"
  cp -r models/default "$WORK/models/default"
elif [ -z "$ckpt" ]; then
  log "no shipped checkpoint: training a tiny model (200 steps)"
  timeout 900 nice -n 10 .venv/bin/nmt-train --preset tiny --out "$WORK/tiny" --max-steps 200 \
    --directions en-de,de-en --threads 1 >"$WORK/train.log" 2>&1 || { tail -20 "$WORK/train.log"; fail "nmt-train"; }
  ckpt=$WORK/tiny
fi
# The export job as README runs it: docker-compose --profile export run --rm export.
export_in_compose() {
  local path dir name version
  path=$(realpath "$1")
  dir=$(dirname "$path") name=$(basename "$path")
  version=$($PY -c 'import torch; print(torch.__version__.split("+")[0])')
  if [ -z "${TORCH_INDEX:-}" ]; then
    # The CPU wheel of the project's torch, from wherever pip finds it (a local wheel
    # directory or index of this machine's pip configuration); a CUDA build is not used.
    timeout 600 $PY -m pip download --quiet --no-deps --only-binary :all: -d "$WORK/wheel" "torch==$version" \
      >"$WORK/wheel.log" 2>&1 || true
    WHEEL=$(ls "$WORK"/wheel/torch-"$version"+cpu-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$WHEEL" ]; then
      log "no CPU wheel of torch $version found by pip and no TORCH_INDEX: the export image would carry CUDA's" \
          "libraries; exporting on the host instead"
      return 1
    fi
    cp "$WHEEL" docker/wheels/ && WHEEL=docker/wheels/$(basename "$WHEEL")
  fi
  log "building the training/export image (torch $version for the CPU)"
  TORCH_VERSION=$version timeout 1800 nice -n 10 "${COMPOSE[@]}" --profile export build export \
    >"$WORK/build-export.log" 2>&1 || { tail -40 "$WORK/build-export.log"; fail "export image build failed"; }
  rm -f "$WHEEL"; WHEEL=""
  local size
  size=$(docker image inspect -f '{{.Size}}' nmt-train)
  log "export image: $((size / 1000000)) MB"
  [ "$size" -lt 2500000000 ] || fail "the export image is $((size / 1000000)) MB: CUDA's libraries came in"
  # The export container runs as its own user (uid 10001): it reads the checkpoint, writes the package.
  chmod a+rx "$WORK" && chmod -R a+rX "$dir"
  mkdir -p "$WORK/models" && chown 10001:10001 "$WORK/models"
  log "exporting $1 with docker-compose --profile export run --rm export"
  NMT_CHECKPOINTS=$dir NMT_CHECKPOINT=$name timeout 900 nice -n 10 "${COMPOSE[@]}" --profile export run --rm export \
    >"$WORK/export.log" 2>&1 || { tail -20 "$WORK/export.log"; fail "the export service on $1"; }
  [ -f "$WORK/models/default/model.json" ] || fail "the export service wrote no package"
  for graph in encoder.int8.onnx decoder.int8.onnx encoder.fp16.onnx decoder.fp16.onnx; do
    [ -f "$WORK/models/default/$graph" ] || fail "the exported package lacks $graph (README's export: int8 + fp16)"
  done
}
if [ -n "$ckpt" ] && ! export_in_compose "$ckpt"; then
  log "exporting $ckpt"
  timeout 900 nice -n 10 .venv/bin/nmt-export "$ckpt" "$WORK/models/default" --int8 --force >"$WORK/export.log" 2>&1 \
    || { tail -20 "$WORK/export.log"; fail "nmt-export $ckpt"; }
fi
chmod -R a+rX "$WORK/models"

# --- 4. the stack --------------------------------------------------------------------
log "starting 2 CPU replicas, the balancer and Prometheus"
STACK_UP=1
timeout 400 "${COMPOSE[@]}" up -d || fail "docker-compose up"  # as README: the default stack + monitoring
mapfile -t replicas < <("${COMPOSE[@]}" ps -q server)
[ "${#replicas[@]}" -eq 2 ] || fail "expected 2 replicas of server, found ${#replicas[@]}"
# up returns once the containers started; the replicas are healthy once the model is in.
end=$((SECONDS + 300))
for c in "${replicas[@]}"; do
  until [ "$(docker inspect -f '{{.State.Health.Status}}' "$c")" = healthy ]; do
    [ $SECONDS -lt $end ] || fail "replica $c is not healthy after 300s"
    sleep 1
  done
  [ "$(docker exec "$c" id -u)" != 0 ] || fail "replica $c runs as root"
done

wait_balancer "$ADDRESS" 60

# Translates one text through the balancer; prints the translation.
translate() {
  # CLIENT: nmt-translate
  timeout 60 .venv/bin/nmt-translate --address "$ADDRESS" --source en --target de --quiet "$1"
}

# The same through scripts/request.py, which never retries: after a replica stops, the
# balancer itself must route around it.
translate_once() {
  timeout 60 $PY scripts/request.py --address "$ADDRESS" --source en --target de --beam 1 "$1" | tail -1
}

# Sum of nmt_requests_total{method="Translate",code="OK"} of one replica, read from its
# metrics port on the container's own loopback.
translated_by() {
  timeout 30 docker exec "$1" python -c '
import re, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9090/metrics", timeout=10).read().decode()
print(int(sum(float(v) for v in re.findall(r"^nmt_requests_total\{(?=[^}]*method=\"Translate\")(?=[^}]*code=\"OK\")[^}]*\} (\S+)$", text, re.M))))'
}

out=$(translate "In the beginning God created the heavens and the earth.") || fail "translation through the balancer"
[ -n "$out" ] || fail "empty translation through the balancer"
log "translated through the balancer: $out"

# The HTTP gateway in front of the balancer, as a LibreTranslate client calls it.
wait_gateway "$HTTP_PORT" 60
http_out=$(gateway_translate "$HTTP_PORT" "In the beginning God created the heavens and the earth.") \
  || fail "translation through the HTTP gateway"
# /translate decodes with the gateway's beam (4 by default): compare with the same over gRPC.
beam_out=$(timeout 60 .venv/bin/nmt-translate --address "$ADDRESS" --source en --target de --quiet --beam 4 \
  "In the beginning God created the heavens and the earth.") || fail "beam translation through the balancer"
[ "$http_out" = "$beam_out" ] || fail "the gateway's translation differs from gRPC's: '$http_out' vs '$beam_out'"
page=$(timeout 10 $PY -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$HTTP_PORT/', timeout=5).read().decode())") \
  || fail "the web page"
grep -q "<html" <<<"$page" || fail "the gateway's / is not the web page"
log "translated through the HTTP gateway (LibreTranslate's /translate): same text; the web page is served"

log "load test through the balancer"
# CLIENT: nmt-loadtest
timeout 120 .venv/bin/nmt-loadtest --address "$ADDRESS" --source en --target de --concurrency 1,4 --duration 3 \
  --warmup 1 --max-total 60 --json "$WORK/load.json" >"$WORK/load.log" 2>&1 || { cat "$WORK/load.log"; fail "nmt-loadtest"; }
tail -5 "$WORK/load.log"

declare -A served
total=0
for c in "${replicas[@]}"; do
  n=$(translated_by "$c") || fail "cannot read the metrics of replica $c"
  served[$c]=$n
  total=$((total + n))
  log "replica $(docker inspect -f '{{.Name}}' "$c") answered $n Translate requests"
  [ "$n" -gt 0 ] || fail "replica $c served no request: the balancer does not spread the load"
done
[ "$total" -ge 10 ] || fail "only $total requests reached the replicas"

log "waiting for Prometheus to scrape both replicas"
end=$((SECONDS + 90))
until timeout 10 $PY - "$PROM_PORT" <<'EOF'
import json, sys, urllib.parse, urllib.request
query = 'count(sum by (instance) (nmt_requests_total{job="nmt-cpu",method="Translate"}) > 0)'
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": query})
result = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
sys.exit(0 if result and int(float(result[0]["value"][1])) == 2 else 1)
EOF
do
  [ $SECONDS -lt $end ] || fail "Prometheus does not show Translate requests from 2 replicas"
  sleep 2
done
log "Prometheus scrapes both replicas"

stopped=${replicas[0]}
kept=${replicas[1]}
log "stopping replica $(docker inspect -f '{{.Name}}' "$stopped")"
timeout 60 docker stop -t 30 "$stopped" >/dev/null || fail "docker stop"
code=$(docker inspect -f '{{.State.ExitCode}}' "$stopped")
[ "$code" = 0 ] || fail "the stopped replica exited with $code (SIGTERM should drain and exit 0)"
# Read the whole log first: with pipefail, `docker logs | grep -q` fails when grep exits at
# the first match and docker logs dies of SIGPIPE.
stopped_log=$(docker logs "$stopped" 2>&1)
grep -q "draining" <<<"$stopped_log" || fail "the stopped replica did not log its drain"
before=${served[$kept]}
for i in 1 2 3 4 5 6; do
  out=$(translate_once "Jesus wept.") || fail "translation $i through the balancer after one replica stopped"
done
log "the balancer's log of those requests (upstream: the replicas tried, in order):"
timeout 30 docker logs --tail 6 "$("${COMPOSE[@]}" ps -q lb)" 2>/dev/null | sed 's/^/    /'
after=$(translated_by "$kept")
[ "$after" -ge $((before + 6)) ] || fail "the remaining replica did not answer the requests ($before -> $after)"
log "with one replica stopped: 6/6 translations through the balancer (last: $out)"
