"""The Kubernetes manifests (docker/kubernetes/): valid against Kubernetes' own schemas, and
wired to what the code really has: every NMT_* variable is a setting the server or gateway
reads (and its value parses there), probes and Services point at the ports the settings
open, the autoscaler's metric is one the server exports, and the images are compose's.
No cluster runs here: this checks everything short of applying them."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway import config as gateway_config
from server import config as server_config
from server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "docker" / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.30.0"  # the oldest version still supported upstream when these were written


def documents() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in yaml.safe_load_all(path.read_text()) if d]


def one(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def container(deployment: str) -> dict[str, Any]:
    [c] = one("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return c


def ports(c: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in c["ports"]}


def settings(c: dict[str, Any], module: ModuleType, config: type) -> Any:
    """The container's settings as the program itself reads them from its environment; every
    variable given must be one of its settings (an unknown one would be ignored silently)."""
    given = {e["name"]: e["value"] for e in c["env"]}
    known = {module.env_name(f.name) for f in fields(config)}
    assert set(given) <= known, set(given) - known
    cfg = module.parse_args([], environ=given)
    assert cfg.problems() == []
    return cfg


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_kubernetes(doc):
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises with the field that is wrong


def test_the_server_reads_every_variable_it_is_given_and_listens_where_probes_and_service_look():
    c = container("nmt-server")
    cfg = settings(c, server_config, server_config.ServerConfig)
    assert (cfg.host, cfg.metrics_host, cfg.device, cfg.int8) == ("0.0.0.0", "0.0.0.0", "cpu", True)
    assert ports(c) == {"grpc": cfg.port, "metrics": cfg.metrics_port}
    assert c["startupProbe"]["grpc"]["port"] == c["readinessProbe"]["grpc"]["port"] == cfg.port
    assert c["livenessProbe"]["tcpSocket"]["port"] == "grpc"  # alive while draining (health NOT_SERVING)
    assert cfg.model == ("default=/models/default",)
    assert {m["mountPath"]: m["readOnly"] for m in c["volumeMounts"]} == {"/models": True}
    pod = one("Deployment", "nmt-server")["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(cfg.metrics_port)
    # The drain fits in the pod's grace: preStop's wait, then --grace-seconds, before SIGKILL.
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["spec"]["terminationGracePeriodSeconds"] > pre_stop + cfg.grace_seconds
    assert cfg.max_connection_age_seconds > 0  # clients of the headless Service find new replicas


def test_the_gateway_reaches_every_server_replica_through_the_headless_service():
    c = container("nmt-gateway")
    cfg = settings(c, gateway_config, gateway_config.GatewayConfig)
    service = one("Service", "nmt-server")
    assert service["spec"]["clusterIP"] == "None"
    grpc_port = {p["name"]: p["port"] for p in service["spec"]["ports"]}["grpc"]
    assert cfg.grpc_address == f"dns:///{service['metadata']['name']}:{grpc_port}"
    assert ports(c) == {"http": cfg.port}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("name", ["nmt-server", "nmt-gateway"])
def test_services_select_their_pods_and_name_ports_the_pods_have(name):
    service, deployment = one("Service", name), one("Deployment", name)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports(container(name)))


def test_the_autoscaler_scales_the_server_on_a_metric_the_server_exports():
    hpa = one("HorizontalPodAutoscaler", "nmt-server")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nmt-server"}
    [pods] = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    exported = {m.name for m in Metrics().registry.collect()}
    assert pods in exported
    rules = yaml.safe_load(one("ConfigMap", "nmt-prometheus-adapter")["data"]["config.yaml"])["rules"]
    assert [r["name"]["as"] for r in rules] == [pods]
    assert re.fullmatch(rules[0]["name"]["matches"], pods)
    assert hpa["spec"]["minReplicas"] >= one("PodDisruptionBudget", "nmt-server")["spec"]["minAvailable"] + 1


def test_images_are_the_ones_docker_compose_builds():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert container("nmt-server")["image"] == compose["server"]["image"]
    assert container("nmt-gateway")["image"] == compose["gateway"]["image"]
    [loader] = one("Pod", "nmt-loader")["spec"]["containers"]
    assert loader["image"] == compose["server"]["image"]
    assert one("Pod", "nmt-loader")["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "nmt-models"
