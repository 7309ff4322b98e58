"""The deployment files: docker-compose.yml (with docker-compose.override.yml) validates with
docker-compose (every profile), docker-compose.yml alone takes nothing Docker Swarm rejects, and
the server image installs no torch. The stacks themselves run in scripts/compose_e2e.sh and
scripts/swarm_e2e.sh."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
PROFILES = ([], ["gpu"], ["monitoring"], ["export"], ["gpu", "monitoring", "export"])


def compose(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (scripts/compose_e2e.sh installs it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMT_", "COMPOSE_"))}
    env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"  # validating needs no engine
    return subprocess.run(["docker-compose", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("profiles", PROFILES, ids=lambda p: "+".join(p) or "default")
def test_compose_file_validates(profiles):
    flags = [f for p in profiles for f in ("--profile", p)]
    r = compose(*flags, "config", "-q")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def _profiles_of_services(config: str) -> dict[str, set[str]]:
    """{service: its profiles} from the YAML that ``docker-compose config`` prints."""
    out: dict[str, set[str]] = {}
    section = service = key = ""
    for line in config.splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
        elif section == "services" and re.match(r"^  \S.*:$", line):
            service, key = line.strip().rstrip(":"), ""
            out[service] = set()
        elif section == "services" and key == "profiles" and line.startswith("    - "):
            out[service].add(line[6:].strip())
        elif section == "services" and re.match(r"^    \w", line):
            key = line.strip().split(":")[0]
    return out


def test_compose_services_and_profiles():
    # docker-compose up (no profile): the CPU replicas and their balancer; the GPU server,
    # monitoring and the export job only when asked for (a CPU-only host never builds CUDA).
    assert _profiles_of_services(compose("config").stdout) == {
        "server-gpu": {"gpu"}, "server": set(), "lb": set(), "gateway": set(), "prometheus": {"monitoring"},
        "export": {"export"}}


def test_the_replica_count_is_a_setting_that_stays():
    # --scale on one "up" is undone by the next plain "up"; NMT_CPU_REPLICAS is read by every one.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMT_", "COMPOSE_"))}
    r = subprocess.run(["docker-compose", "config"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**env, "NMT_CPU_REPLICAS": "4", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}) \
        if shutil.which("docker-compose") else pytest.skip("docker-compose is not installed")
    assert r.returncode == 0, r.stderr
    assert "replicas: 4" in r.stdout


def test_compose_wiring():
    text = compose("--profile", "gpu", "--profile", "monitoring", "--profile", "export", "config").stdout
    assert "replicas: 2" in text
    # The balancer starts without replicas too (it resolves them per request): no health condition,
    # which Swarm's stack files cannot express.
    assert re.search(r"lb:\n(?:    .*\n)*?    depends_on:\n      server:\n        condition: service_started", text)
    assert "- capabilities:\n            - gpu\n            count: 1\n            driver: nvidia" in text
    assert "nmt-export /checkpoints/default/model.pt /models/default --force --int8 --fp16" in " ".join(text.split())
    assert text.count("- nmt-health") == 2  # both servers' health checks use the gRPC probe
    assert "127.0.0.1:50051:8080" in text  # published on loopback unless NMT_PUBLISH_HOST says otherwise
    # The HTTP gateway talks gRPC to the balancer, listens on every interface of its container,
    # and is published on its own port.
    assert re.search(r"gateway:\n(?:    .*\n)*?    depends_on:\n      lb:\n        condition: service_started", text)
    assert "NMT_HTTP_GRPC_ADDRESS: lb:8080" in text and "NMT_HTTP_HOST: 0.0.0.0" in text
    assert "127.0.0.1:5000:5000" in text


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_server_image_installs_no_torch():
    project = _pyproject()["project"]
    for extra in ("serve", "gpu"):  # what docker/server.Dockerfile installs
        deps = project["dependencies"] + project["optional-dependencies"][extra]
        assert not [d for d in deps if re.match(r"(torch|onnx)\b(?!runtime)", d)], (extra, deps)
    dockerfile = (DOCKER / "server.Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and not [line for line in installs if "torch" in line]
    assert 'optional-dependencies"][sys.argv[1]]' in dockerfile and "echo gpu || echo serve" in dockerfile
    assert "import torch' 2>/dev/null; then echo \"torch must not be in the server image\"" in dockerfile


def test_images_use_the_base_image_argument_and_a_non_root_user():
    for name in ("server", "train", "nginx", "prometheus", "gateway"):
        text = (DOCKER / f"{name}.Dockerfile").read_text()
        assert text.startswith("#") and "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in text, name
        assert re.search(r"^USER (?!root)\w+$", text, re.M), name
        assert 'ENTRYPOINT ["tini", "--"]' in text, name
    server = (DOCKER / "server.Dockerfile").read_text()
    assert 'HEALTHCHECK' in server and '"nmt-health"' in server
    assert _pyproject()["project"]["scripts"]["nmt-health"] == "server.health_probe:main"


def test_training_image_pins_the_torch_of_the_cpu_install():
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "scripts/constraints-cpu.txt").read_text(), re.M).group(1)
    text = (DOCKER / "train.Dockerfile").read_text()
    assert f"ARG TORCH_VERSION={pinned}\n" in text
    assert f"TORCH_VERSION: ${{TORCH_VERSION:-{pinned}}}" in (ROOT / "docker-compose.override.yml").read_text()


def test_build_context_holds_sources_not_data():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[1:2] == ["*"]  # everything is out unless listed
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    packages = {p.split(".")[0] for p in _pyproject()["tool"]["setuptools"]["packages"]} - {"nmt"}
    assert packages <= included  # setuptools needs every package to build the wheel
    assert not included & {"runs", "packages", "models", ".venv", "data"}


def test_servers_in_containers_listen_on_every_interface():
    """nmt-serve listens on 127.0.0.1 unless told; in a container the balancer, Prometheus and the
    published ports reach it from outside, so the image and both services say so explicitly."""
    compose_file = (ROOT / "docker-compose.yml").read_text() + (ROOT / "docker-compose.override.yml").read_text()
    assert compose_file.count("NMT_HOST: 0.0.0.0") == 2 and compose_file.count("NMT_METRICS_HOST: 0.0.0.0") == 2
    server = (DOCKER / "server.Dockerfile").read_text()
    assert "    NMT_HOST=0.0.0.0 \\\n" in server and "    NMT_METRICS_HOST=0.0.0.0 \\\n" in server


@pytest.mark.parametrize("name", ["server", "gateway", "train"])
def test_images_copy_every_package_of_the_wheel(name):
    """Each image builds the project's wheel from the sources it copies: a package setuptools
    lists but the Dockerfile leaves out fails the build ("package directory ... does not exist")."""
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ") and "/src/" in line}
    packages = {p.split(".")[0] for p in _pyproject()["tool"]["setuptools"]["packages"]} - {"nmt"}
    assert packages - copied == set()


def _stack_file() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_stack_file_holds_nothing_swarm_rejects_and_the_extras_are_behind_profiles():
    """`docker stack deploy -c docker-compose.yml` takes the file unchanged: Swarm's schema has no
    profiles, no scale, no depends_on conditions and no device requests; those live in the
    override file docker-compose reads by itself, every service there behind a profile."""
    import yaml

    stack = _stack_file()
    assert set(stack["services"]) == {"server", "lb", "gateway"}
    for name, service in stack["services"].items():
        assert not {"profiles", "scale", "devices"} & set(service), name
        assert isinstance(service.get("depends_on", []), list), name
        assert "devices" not in json.dumps(service.get("deploy", {})), name
    server = stack["services"]["server"]["deploy"]
    assert server["replicas"] == "${NMT_CPU_REPLICAS:-2}" and server["endpoint_mode"] == "dnsrr"
    assert server["update_config"]["order"] == "start-first" and server["update_config"]["failure_action"] == "rollback"
    extras = yaml.safe_load((ROOT / "docker-compose.override.yml").read_text())["services"]
    assert {name: s["profiles"] for name, s in extras.items()} == {
        "server-gpu": ["gpu"], "prometheus": ["monitoring"], "export": ["export"]}


def test_a_replica_stops_within_its_grace_period():
    """Swarm and compose SIGKILL a container stop_grace_period after SIGTERM: the lame-duck
    period and the drain's grace must both fit in it."""
    server = _stack_file()["services"]["server"]
    env = server["environment"]
    period = int(server["stop_grace_period"].rstrip("s"))
    assert period >= float(env["NMT_LAMEDUCK_SECONDS"]) + float(env["NMT_GRACE_SECONDS"]) + 5
    # The lame duck outlasts the balancer's DNS cache, so nginx stops sending before work is refused.
    valid = int(re.search(r"resolver 127\.0\.0\.11 valid=(\d+)s", (DOCKER / "nginx.conf").read_text()).group(1))
    assert float(env["NMT_LAMEDUCK_SECONDS"]) > valid


def test_the_balancer_keeps_client_connections_for_long():
    """nginx closes a client's HTTP/2 connection with a GOAWAY every keepalive_requests requests
    (default 1,000), and a call started as it arrives fails UNAVAILABLE (seen in a rolling update
    under load): gRPC channels must not be cut that often."""
    conf = (DOCKER / "nginx.conf").read_text()
    assert int(re.search(r"^\s*keepalive_requests (\d+);", conf, re.M).group(1)) >= 1_000_000
    assert re.search(r"^\s*keepalive_time 24h;", conf, re.M)
    assert int(re.search(r"^\s*keepalive_timeout (\d+)s;", conf, re.M).group(1)) >= 600


def _docker_stack_config(*files: str) -> subprocess.CompletedProcess:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "stack", "config", "--help"], capture_output=True).returncode != 0:
        pytest.skip("no docker CLI with `docker stack config` (Docker 23 or later)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMT_", "COMPOSE_", "DOCKER_"))}
    args = [a for f in files for a in ("-c", f)]
    return subprocess.run([docker, "stack", "config", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_swarm_reads_the_stack_file():
    r = _docker_stack_config("docker-compose.yml")
    assert r.returncode == 0, r.stderr
    assert "replicas: 2" in r.stdout and "endpoint_mode: dnsrr" in r.stdout and "order: start-first" in r.stdout
    r = _docker_stack_config("docker-compose.yml", "docker/swarm-without-ipvs.yml")
    assert r.returncode == 0, r.stderr
    # Each entry point publishes its port once, on the node that runs it.
    assert r.stdout.count("mode: host") == 2 and r.stdout.count("published: ") == 2
    assert r.stdout.count("endpoint_mode: dnsrr") == 3
