"""The gateway's OpenAPI document (gateway/openapi.py) and its pages (/spec, /docs):

- its paths and methods are the routes the app really serves, read from the Starlette app
  itself: a route added to gateway/app.py fails here until it is described;
- it is a valid OpenAPI 3.1 document by openapi-spec-validator;
- the answers of a real gateway in front of a real server (the tiny model) fit the schemas it
  documents, as do the keys /v1/translate accepts;
- /spec serves it, /docs renders it with nothing fetched from elsewhere, and every answer
  carries the version (X-NMT-Version).
"""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import jsonschema
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from referencing.exceptions import Unresolvable
from starlette.routing import Mount, Route

from cli import free_port
from cli.version import VERSION_HEADER, __version__
from gateway.app import V1_KEYS, create_app
from gateway.config import GatewayConfig
from gateway.openapi import document
from gateway.reference import METHODS, anchor, render
from tests.gateway_harness import GatewayThread
from tests.server_harness import ServerThread

DOC = document()


def served(routes, prefix: str = "") -> set[tuple[str, str]]:
    """(path, method) of every route of a Starlette app, as OpenAPI spells them: a path
    parameter without its converter ("{name:path}" -> "{name}"), a mounted app without routes
    of its own (static files) as "{path}" below its mount, and no HEAD beside a GET (Starlette
    answers HEAD wherever it answers GET; OpenAPI leaves it implied)."""
    out = set()
    for route in routes:
        if isinstance(route, Mount):
            out |= served(route.routes, prefix + route.path) if route.routes else {(prefix + route.path + "/{path}",
                                                                                    "get")}
        elif isinstance(route, Route):
            path = prefix + "/".join(part.split(":")[0] + "}" if part.startswith("{") else part
                                     for part in route.path.split("/"))
            methods = set(route.methods or ()) - ({"HEAD"} if "GET" in (route.methods or ()) else set())
            out |= {(path, m.lower()) for m in methods}
        else:
            raise AssertionError(f"a route of a kind this test does not read: {route!r}")
    return out


def documented(doc: dict) -> set[tuple[str, str]]:
    return {(path, method) for path, item in doc["paths"].items() for method in item if method in METHODS}


def test_the_document_describes_exactly_the_routes_the_app_serves():
    app = create_app(GatewayConfig())
    real, described = served(app.routes), documented(DOC)
    assert real - described == set(), (f"routes served but not described in gateway/openapi.py (add them to PATHS): "
                                       f"{sorted(real - described)}")
    assert described - real == set(), f"described in gateway/openapi.py but not served: {sorted(described - real)}"


def test_the_route_reader_sees_converters_mounts_and_head():
    assert served([Route("/download_file/{name:path}", lambda r: None, methods=["GET"]),
                   Mount("/files", routes=[Route("/{id:int}", lambda r: None, methods=["POST", "DELETE"])])]) == \
        {("/download_file/{name}", "get"), ("/files/{id}", "post"), ("/files/{id}", "delete")}


def test_the_document_is_valid_openapi():
    validate(DOC)
    assert DOC["openapi"].startswith("3.1") and DOC["info"]["version"] == __version__


def test_the_validator_refuses_a_broken_document():
    """The validator is real: a reference to a schema that does not exist, or a parameter in
    Swagger 2's "body", is refused."""
    broken = copy.deepcopy(DOC)
    broken["paths"]["/translate"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] = \
        {"$ref": "#/components/schemas/Nothing"}
    with pytest.raises((OpenAPIValidationError, Unresolvable)):
        validate(broken)
    broken = copy.deepcopy(DOC)
    broken["paths"]["/languages"]["get"]["parameters"][0]["in"] = "body"
    with pytest.raises(OpenAPIValidationError):
        validate(broken)


def test_v1_translate_documents_the_keys_the_app_accepts():
    schema = DOC["components"]["schemas"]["V1TranslateRequest"]
    assert set(schema["properties"]) == set(V1_KEYS)
    assert schema["additionalProperties"] is False


def check(instance, schema: dict) -> None:
    """``instance`` fits ``schema`` (which may refer to the document's components)."""
    jsonschema.Draft202012Validator({"components": DOC["components"], **schema}).validate(instance)


def ok_schema(path: str, method: str) -> dict:
    return DOC["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]


# ---------------------------------------------------------------- a real gateway
@pytest.fixture(scope="module")
def alone():
    """A gateway with no gRPC server behind it: /spec, /docs and the probes need none."""
    g = GatewayThread(GatewayConfig(grpc_address=f"127.0.0.1:{free_port()}"))
    yield g
    g.stop()


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        values = dict(attrs)
        if "id" in values:
            self.ids.add(values["id"])
        for name in ("href", "src"):
            if values.get(name):
                self.links.append(values[name])

    def handle_data(self, data):
        self.text.append(data)


def test_spec_serves_the_document(alone):
    r = alone.client.get("/spec")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json() == json.loads(json.dumps(DOC))
    assert r.headers[VERSION_HEADER] == __version__


def test_docs_renders_every_operation_and_schema_with_nothing_fetched(alone):
    r = alone.client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers[VERSION_HEADER] == __version__
    page = Page()
    page.feed(r.text)
    text = " ".join("".join(page.text).split())
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert all(link.startswith("#") or link == "spec" for link in page.links), page.links
    assert {link[1:] for link in page.links if link.startswith("#")} <= page.ids  # no dangling anchor
    for path, method in documented(DOC):
        assert f"{method} {path}" in text and anchor(method, path) in page.ids, (method, path)
    for name in DOC["components"]["schemas"]:
        assert name in text
    assert render(DOC) == r.text


def test_every_answer_carries_the_version_and_health_stays_libretranslates(alone):
    r = alone.client.get("/health")
    assert (r.status_code, r.json(), r.headers[VERSION_HEADER]) == (200, {"status": "ok"}, __version__)
    check(r.json(), ok_schema("/health", "get"))
    r = alone.client.get("/nothing-here")
    assert (r.status_code, r.headers[VERSION_HEADER]) == (404, __version__)
    r = alone.client.get("/readyz")  # no server: 503, as documented
    assert r.status_code == 503 and r.headers[VERSION_HEADER] == __version__
    check(r.json(), DOC["paths"]["/readyz"]["get"]["responses"]["503"]["content"]["application/json"]["schema"])
    check(alone.client.get("/frontend/settings").json(), ok_schema("/frontend/settings", "get"))


@pytest.fixture(scope="module")
def stack(tiny_package):
    s = ServerThread(tiny_package, max_chars=500)
    g = GatewayThread(GatewayConfig(grpc_address=s.address))
    yield g.client
    g.stop()
    s.stop()


def test_real_answers_fit_the_documented_schemas(stack):
    """Each 200 and each error of a real gateway in front of a real server fits what the document says."""
    calls = [
        ("/translate", "post", {"json": {"q": "Jesus wept.", "source": "en", "target": "de", "alternatives": 1}}),
        ("/translate", "post", {"data": {"q": ["Jesus wept.", "Peace."], "source": "auto", "target": "de"}}),
        ("/detect", "post", {"json": {"q": "Und Jesus weinte."}}),
        ("/languages", "get", {}),
        ("/frontend/settings", "get", {}),
        ("/v1/translate", "post", {"json": {"q": ["Jesus wept. He wept."], "source": "en", "target": "de",
                                            "num_hypotheses": 2, "return_scores": True, "return_attention": True}}),
        ("/v1/models", "get", {}),
        ("/healthz", "get", {}),
        ("/readyz", "get", {}),
    ]
    for path, method, kwargs in calls:
        r = stack.request(method.upper(), path, **kwargs)
        assert r.status_code == 200, (path, r.text)
        check(r.json(), ok_schema(path, method))
    error = DOC["components"]["responses"]["400"]["content"]["application/json"]["schema"]
    for path, body in (("/translate", {"q": "x", "source": "en", "target": "xx"}), ("/v1/translate", {"q": 1}),
                       ("/detect", {})):
        r = stack.post(path, json=body)
        assert r.status_code == 400 and "400" in DOC["paths"][path]["post"]["responses"]
        check(r.json(), error)
