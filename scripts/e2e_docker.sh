# Shared by scripts/compose_e2e.sh and scripts/swarm_e2e.sh (sourced, not run): a Docker engine,
# the base image, and waiting for and translating through a deployed stack. The caller defines
# log, fail, WORK (a scratch directory) and PY (the project's python), and calls stop_engine from
# its exit trap.
DOCKERD_PID=""  # the dockerd start_engine started, if any

# Starts a Docker engine when none answers (installs docker.io, docker-compose and debootstrap
# from Debian first when missing; starting needs root).
start_engine() {
  local need_install="" tool
  for tool in dockerd docker docker-compose debootstrap; do
    command -v "$tool" >/dev/null || need_install=1
  done
  if [ -n "$need_install" ]; then
    [ "$(id -u)" -eq 0 ] || fail "docker.io, docker-compose and debootstrap are missing and this is not root"
    log "installing docker.io docker-compose debootstrap"
    timeout 600 apt-get update -qq || fail "apt-get update failed"
    timeout 900 apt-get install -y -qq docker.io docker-compose debootstrap >"$WORK/apt.log" 2>&1 \
      || { tail -20 "$WORK/apt.log"; fail "apt-get install failed"; }
  fi
  if ! timeout 20 docker info >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || fail "no Docker engine answers and this is not root (cannot start dockerd)"
    local attempt
    for attempt in 1 2 3; do
      clear_stale_engine
      log "starting dockerd (attempt $attempt)"
      dockerd >"$WORK/dockerd.log" 2>&1 &
      DOCKERD_PID=$!
      for _ in $(seq 60); do
        timeout 5 docker info >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 1
      done
      timeout 5 docker info >/dev/null 2>&1 && break
      # A panic's first lines say where; the tail of its trace says only that it was dockerd.
      if grep -q '^panic:' "$WORK/dockerd.log"; then grep -A3 -m1 '^panic:' "$WORK/dockerd.log"
      else grep -v 'module=grpc' "$WORK/dockerd.log" | tail -5; fi
      log "dockerd did not come up (attempt $attempt)"
      stop_engine
      set_aside_broken_network_store
    done
    timeout 5 docker info >/dev/null 2>&1 || fail "dockerd did not answer after 3 attempts (log: $WORK/dockerd.log)"
  fi
  log "engine $(docker version --format '{{.Server.Version}}'), $(docker-compose version --short)"
}

# docker.io 20.10 panics at start ("index out of range" in libnetwork's reservePools) when its
# network store holds a network whose removal was cut short: marked inDelete, its addresses
# already released. An engine killed while `docker-compose down` ran leaves one, and every later
# start fails the same way (moby issue 45057, fixed upstream after 20.10). The store is the one
# file libnetwork rebuilds by itself (bridge, host and none come back; networks a stack made
# are made again when it is deployed), so only on that panic it is moved aside, kept beside the
# original name, and the next attempt starts clean.
set_aside_broken_network_store() {
  local store aside
  grep -q 'libnetwork.(\*controller).reservePools' "$WORK/dockerd.log" || return 0
  store="$(docker_root)/network/files/local-kv.db"
  [ -f "$store" ] || return 0
  aside="$store.broken-$(date +%Y%m%d%H%M%S)"
  log "dockerd panicked on a network whose removal was cut short: its network store moves aside to $aside"
  mv "$store" "$aside"
}

# The engine's data root: "data-root" in dockerd's configuration file (DOCKERD_CONFIG, by
# default the file dockerd reads) when set, else dockerd's default.
docker_root() {
  local root="" config="${DOCKERD_CONFIG:-/etc/docker/daemon.json}"
  [ -f "$config" ] && root="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("data-root", ""))' "$config" 2>/dev/null)" || true
  echo "${root:-/var/lib/docker}"
}

# An engine killed without its shutdown (a dockerd and the containerd it started, or that
# containerd alone) keeps holding containerd's metadata lock: a new dockerd's containerd then waits
# on it and dockerd gives up ("timeout waiting for containerd to start"). Such leftovers answer no
# `docker info` (start_engine only calls this when none answered), so they are stopped first.
clear_stale_engine() {
  local pids pid
  pids="$(pgrep -x dockerd; pgrep -f 'containerd --config /var/run/docker/containerd/containerd.toml')" || true
  [ -n "$pids" ] || return 0
  log "stopping a Docker engine that does not answer: pids $(echo $pids)"
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null; kill -CONT "$pid" 2>/dev/null || true; done
  for _ in $(seq 40); do
    pids="$(for pid in $pids; do kill -0 "$pid" 2>/dev/null && echo "$pid"; done)" || true
    [ -n "$pids" ] || return 0
    sleep 0.5
  done
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
  sleep 1
}

# Why containers of a stack stopped, for a failure's report: every exited container labelled
# $1 (a `docker ps --filter` label), with its exit code, whether the kernel killed it for memory,
# and its last health probes (start, end, exit code, output). Swarm shows a task it stopped for
# failing its health check as "Complete" when the process exits 0 on SIGTERM (nginx does): only
# the probes tell that apart from a process that ended by itself.
report_exited() {
  local c
  for c in $(docker ps -aq --filter "label=$1" --filter status=exited); do
    docker inspect -f '{{.Name}}: exit {{.State.ExitCode}}, OOM-killed {{.State.OOMKilled}}, ended {{.State.FinishedAt}}{{if .State.Health}}{{range .State.Health.Log}}
    probe {{.Start}} .. {{.End}}: exit {{.ExitCode}} {{printf "%.120q" .Output}}{{end}}{{end}}' "$c" 2>&1
  done
}

# Stops the dockerd start_engine started (nothing when the engine was already running).
stop_engine() {
  [ -n "$DOCKERD_PID" ] || return 0
  log "stopping the dockerd this script started (pid $DOCKERD_PID)"
  # Every step tolerates an engine that has already exited (one that panicked at start): under
  # the callers' `set -e` a failing kill here ended the script before its second attempt.
  kill -TERM "$DOCKERD_PID" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$DOCKERD_PID" 2>/dev/null; then kill -KILL "$DOCKERD_PID" 2>/dev/null || true; fi
  DOCKERD_PID=""
}

# The base image $BASE_IMAGE: reused while it exists; local/debian:bookworm is built with
# debootstrap (scripts/base_image.sh, as README says), any other must exist.
ensure_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image $BASE_IMAGE exists"
  else
    [ "$BASE_IMAGE" = local/debian:bookworm ] || fail "base image $BASE_IMAGE does not exist"
    log "building $BASE_IMAGE with debootstrap (scripts/base_image.sh, as README says)"
    bash scripts/base_image.sh "$BASE_IMAGE" >/dev/null || fail "scripts/base_image.sh failed"
  fi
}

# Waits until the balancer at $1 (HOST:PORT) answers SERVING, at most $2 seconds; prints nothing.
wait_balancer() {
  local end=$((SECONDS + $2))
  until timeout 10 $PY scripts/wait_serving.py --address "$1" --timeout 5 >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "the balancer at $1 did not answer SERVING within $2s"
    sleep 1
  done
}

# Waits until the HTTP gateway on 127.0.0.1:$1 is ready (/readyz 200), at most $2 seconds.
wait_gateway() {
  local end=$((SECONDS + $2))
  until timeout 5 $PY -c "import urllib.request as u, sys; sys.exit(u.urlopen('http://127.0.0.1:$1/readyz', timeout=3).status != 200)" 2>/dev/null; do
    [ $SECONDS -lt $end ] || fail "the gateway on 127.0.0.1:$1 was not ready within $2s"
    sleep 1
  done
}

# Translates $2 from English into German through the gateway on 127.0.0.1:$1, as a
# LibreTranslate client calls it (/translate; the gateway's beam, 4 by default); prints it.
gateway_translate() {
  timeout 60 $PY - "$1" "$2" <<'EOF'
import json, sys, urllib.request
body = json.dumps({"q": sys.argv[2], "source": "en", "target": "de", "format": "text"}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/translate", data=body,
                             headers={"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=30))["translatedText"])
EOF
}
