#!/usr/bin/env bash
# End-to-end test of the deployment on Docker Swarm: docker-compose.yml, unchanged, as a stack.
#
#   sudo bash scripts/swarm_e2e.sh [PACKAGE_DIR]
#
# 1. Starts a Docker engine when none answers (as scripts/compose_e2e.sh does) and makes this
#    node a single-node swarm when it is in none (it leaves that swarm at the end).
# 2. Builds the server, balancer and gateway images with docker-compose (cached when
#    compose_e2e.sh built them) and a model package: $1 or $E2E_PACKAGE, else the shipped
#    models/default exported with nmt-export on the host.
# 3. `docker stack deploy -c docker-compose.yml` (plus docker/swarm-without-ipvs.yml when the
#    kernel has no IPVS, which the routing mesh and virtual IPs need), waits for 2 healthy
#    server replicas, translates through the balancer and through the gateway (LibreTranslate's
#    /translate, the same text as gRPC with beam 4).
# 4. Rolling update under load: scripts/steady_load.py keeps gRPC and HTTP clients busy (no
#    retries) while `docker service update --image` moves the servers to a new tag of the
#    image, one replica at a time (start-first: the new one healthy before an old one drains);
#    every request must succeed and every replica must end on the new image.
# 5. Removes the stack (and its network), leaves the swarm if it made it.
#
# Only 127.0.0.1 (published ports) is ever targeted. Every wait is bounded.
# Settings: E2E_PACKAGE, E2E_PORT (50081), E2E_HTTP_PORT (5081), BASE_IMAGE
# (local/debian:bookworm), E2E_KEEP=1 (leave the stack up on failure).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-local/debian:bookworm}
STACK=nmt-swarm-e2e
PORT=${E2E_PORT:-50081}
HTTP_PORT=${E2E_HTTP_PORT:-5081}
ADDRESS=127.0.0.1:$PORT
NEXT_IMAGE=nmt-server:swarm-e2e-next  # the "new version" the rolling update moves to
WORK=$(mktemp -d -t nmt-swarm-e2e.XXXXXX)
STARTED=$(date +%s)
STACK_UP=""
MADE_SWARM=""
PY=.venv/bin/python

log() { echo "[swarm-e2e +$(($(date +%s) - STARTED))s] $*"; }
fail() { echo "[swarm-e2e] FAILED: $*" >&2; exit 1; }
# shellcheck source=scripts/e2e_docker.sh
source scripts/e2e_docker.sh

# The stack file reads these for the mounts and the published ports; compose for the builds.
export BASE_IMAGE NMT_MODELS=$WORK/models NMT_PACKAGE=default NMT_GRPC_PORT=$PORT NMT_HTTP_PORT=$HTTP_PORT \
       NMT_CPU_THREADS=1 NMT_CPU_REPLICAS=2
export COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0 COMPOSE_HTTP_TIMEOUT=300 DEBIAN_FRONTEND=noninteractive
STACK_FILES=(-c docker-compose.yml)

remove_stack() {
  timeout 60 docker stack rm "$STACK" >/dev/null 2>&1 || true
  local end=$((SECONDS + 90))  # the network goes last, once every task is gone
  while docker network inspect "${STACK}_default" >/dev/null 2>&1 && [ $SECONDS -lt $end ]; do sleep 1; done
}

cleanup() {
  local rc=$?
  set +e
  [ -f "$WORK/stop" ] || touch "$WORK/stop"  # a load still running stops
  # Its own pid only: a bare `wait` would also wait for the dockerd start_engine ran in the
  # background, forever (a failed run hung here).
  [ -z "$load" ] || wait "$load" 2>/dev/null
  if [ -n "$STACK_UP" ]; then
    if [ "$rc" -ne 0 ]; then
      log "state of the stack:"
      docker stack ps --no-trunc "$STACK" 2>&1 | head -20
      log "containers of the stack that stopped:"
      report_exited "com.docker.stack.namespace=$STACK"
      for service in server lb gateway; do
        log "last lines of ${STACK}_$service:"
        timeout 30 docker service logs --no-task-ids --tail 15 "${STACK}_$service" 2>&1 | tail -15
      done
    fi
    if [ "$rc" -ne 0 ] && [ -n "${E2E_KEEP:-}" ]; then
      log "E2E_KEEP: leaving the stack $STACK up"
    else
      log "removing the stack"
      remove_stack
    fi
  fi
  if [ -n "$MADE_SWARM" ] && ! { [ "$rc" -ne 0 ] && [ -n "${E2E_KEEP:-}" ]; }; then
    log "leaving the single-node swarm this script made"
    timeout 60 docker swarm leave --force >/dev/null 2>&1 || log "swarm leave failed"
  fi
  docker image rm "$NEXT_IMAGE" >/dev/null 2>&1
  stop_engine
  rm -rf "$WORK"
  if [ "$rc" -eq 0 ]; then log "PASSED in $(($(date +%s) - STARTED))s"; else log "failed (exit $rc)"; fi
  exit "$rc"
}
load=""  # the load generator's pid, once it runs
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. the engine and the swarm -----------------------------------------------------------
start_engine
if [ "$(docker info --format '{{.Swarm.LocalNodeState}}')" != active ]; then
  log "making this node a single-node swarm"
  timeout 60 docker swarm init --advertise-addr 127.0.0.1 >/dev/null || fail "docker swarm init"
  MADE_SWARM=1
fi
[ "$(docker info --format '{{.Swarm.ControlAvailable}}')" = true ] || fail "this node is not a swarm manager"
if [ ! -e /proc/net/ip_vs ]; then
  log "the kernel has no IPVS (no routing mesh, no virtual IPs): adding docker/swarm-without-ipvs.yml"
  STACK_FILES+=(-c docker/swarm-without-ipvs.yml)
fi
remove_stack  # one left by an earlier run (E2E_KEEP) would hold the ports

# --- 2. images and a package ---------------------------------------------------------------
ensure_base_image
log "building the server, balancer and gateway images"
timeout 1800 nice -n 10 docker-compose -p "$STACK" build server lb gateway >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log"; fail "image build failed"; }
package=${1:-${E2E_PACKAGE:-}}
mkdir -p "$WORK/models"
if [ -n "$package" ]; then
  [ -f "$package/model.json" ] || fail "$package is not a model package"
  cp -r "$package" "$WORK/models/default"
else
  [ -f models/default/model.pt ] || fail "no package given and no models/default/model.pt to export"
  log "exporting models/default/model.pt (int8)"
  OMP_NUM_THREADS=1 timeout 900 nice -n 10 .venv/bin/nmt-export models/default/model.pt "$WORK/models/default" \
    --int8 --force >"$WORK/export.log" 2>&1 || { tail -20 "$WORK/export.log"; fail "nmt-export"; }
fi
chmod a+rx "$WORK" && chmod -R a+rX "$WORK/models"

# --- 3. the stack --------------------------------------------------------------------------
log "docker stack deploy ${STACK_FILES[*]} $STACK"
STACK_UP=1
timeout 120 docker stack deploy --resolve-image never "${STACK_FILES[@]}" "$STACK" >"$WORK/deploy.log" 2>&1 \
  || { cat "$WORK/deploy.log"; fail "docker stack deploy"; }
grep -i "ignoring unsupported options" "$WORK/deploy.log" | sed 's/^/    /' || true
for service in lb gateway; do
  log "${STACK}_$service publishes $(docker service inspect -f '{{range .Endpoint.Ports}}{{.PublishMode}}:{{.PublishedPort}}->{{.TargetPort}} {{end}}' "${STACK}_$service")"
done

# Healthy replicas of the server service running $1 (the image name the service asks for).
healthy_replicas() {
  local n=0 c
  for c in $(docker ps -q --filter "label=com.docker.swarm.service.name=${STACK}_server" --filter health=healthy); do
    [ "$(docker inspect -f '{{index .Config.Labels "com.docker.stack.namespace"}} {{.Config.Image}}' "$c")" \
      = "$STACK $1" ] && n=$((n + 1))
  done
  echo "$n"
}
end=$((SECONDS + 300))
until [ "$(healthy_replicas nmt-server:cpu)" -eq 2 ]; do
  [ $SECONDS -lt $end ] || fail "2 healthy server replicas did not come within 300s"
  sleep 2
done
log "2 server replicas are healthy"
wait_balancer "$ADDRESS" 90
wait_gateway "$HTTP_PORT" 90
TEXT="Please restart your computer before installing the update."
# CLIENT: nmt-translate
grpc_out=$(timeout 60 .venv/bin/nmt-translate --address "$ADDRESS" --source en --target de --quiet --beam 4 "$TEXT") \
  || fail "translation through the balancer"
[ -n "$grpc_out" ] || fail "empty translation through the balancer"
http_out=$(gateway_translate "$HTTP_PORT" "$TEXT") || fail "translation through the HTTP gateway"
# /translate decodes with the gateway's beam (4 by default), as the gRPC call above.
[ "$http_out" = "$grpc_out" ] || fail "the gateway's translation differs from gRPC's: '$http_out' vs '$grpc_out'"
log "translated through the balancer and the gateway: $grpc_out"

# --- 4. a rolling update under load --------------------------------------------------------
docker tag nmt-server:cpu "$NEXT_IMAGE"
log "load on (gRPC and HTTP, 2 clients each, no retries); docker service update --image $NEXT_IMAGE"
$PY scripts/steady_load.py --address "$ADDRESS" --http-port "$HTTP_PORT" --workers 2 --stop-file "$WORK/stop" \
  --max-seconds 900 >"$WORK/load.json" 2>"$WORK/load.err" &
load=$!
sleep 5  # the load is flowing before the update starts
timeout 600 docker service update --detach=false --no-resolve-image --image "$NEXT_IMAGE" "${STACK}_server" \
  >"$WORK/update.log" 2>&1 || { tail -20 "$WORK/update.log"; fail "docker service update"; }
# The command returns once every replica was replaced; the update is "completed" after the
# monitor period (deploy.update_config.monitor) passes without a replica failing.
end=$((SECONDS + 120))
while state=$(docker service inspect -f '{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}' "${STACK}_server") \
      && [ "$state" = updating ] && [ $SECONDS -lt $end ]; do
  sleep 2
done
[ "$state" = completed ] || fail "the rolling update ended '$state', not completed (rolled back?)"
[ "$(healthy_replicas "$NEXT_IMAGE")" -eq 2 ] || fail "not every replica runs the new image and is healthy"
sleep 10  # and the load goes on against the updated replicas
touch "$WORK/stop"
load_rc=0
wait "$load" || load_rc=$?
cat "$WORK/load.json"
[ "$load_rc" -eq 0 ] || { cat "$WORK/load.err"; fail "requests failed during the rolling update (above)"; }
log "rolling update done: 2 replicas on $NEXT_IMAGE, no request failed"
out=$(timeout 60 .venv/bin/nmt-translate --address "$ADDRESS" --source en --target de --quiet --beam 4 "$TEXT") \
  || fail "translation after the update"
[ "$out" = "$grpc_out" ] || fail "the updated replicas translate differently: '$out' vs '$grpc_out'"
