"""The API's reference, served by the gateway itself: ``GET /spec`` answers the OpenAPI document
(gateway/openapi.py) as JSON, ``GET /docs`` the same document rendered as one self-contained HTML
page: every operation with its parameters, bodies and answers, then every schema. The page has
no script and fetches nothing (LibreTranslate's /docs loads Swagger UI from a CDN, which a
gateway without Internet access cannot)."""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.openapi import document

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: 1rem 1.5rem; color: #1d1d1f; }
h1 { margin-bottom: 0; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { margin: 1.8rem 0 .3rem; font-family: ui-monospace, monospace; } h4 { margin: 1rem 0 .3rem; }
table { border-collapse: collapse; width: 100%; margin: .3rem 0; }
th, td { text-align: left; vertical-align: top; padding: .25rem .5rem; border-bottom: 1px solid #eee; }
code { font-family: ui-monospace, monospace; font-size: 90%; }
.method { display: inline-block; min-width: 3.5rem; padding: 0 .4rem; border-radius: 3px; color: #fff;
          background: #3b6; text-transform: uppercase; } .post { background: #37c; }
nav ul { columns: 2; padding-left: 1.2rem; } .muted { color: #666; }
"""


@functools.cache
def spec_document() -> dict[str, Any]:
    return document()


@functools.cache
def spec_json() -> bytes:
    return json.dumps(spec_document(), ensure_ascii=False, indent=1).encode()


@functools.cache
def docs_page() -> str:
    return render(spec_document())


async def spec(request: Request) -> Response:
    """``GET /spec``: the OpenAPI document."""
    return Response(spec_json(), media_type="application/json")


async def docs(request: Request) -> Response:
    """``GET /docs``: the OpenAPI document as a web page."""
    return HTMLResponse(docs_page())


# ---------------------------------------------------------------- rendering
def e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def anchor(*parts: str) -> str:
    return "-".join("".join(c if c.isalnum() else "-" for c in p).strip("-") for p in parts).lower()


def schema_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def kind(schema: dict[str, Any]) -> str:
    """A schema in a few words of HTML: a type, a link to a named schema, a list of them."""
    if "$ref" in schema:
        name = schema_name(schema["$ref"])
        return f'<a href="#{anchor("schema", name)}">{e(name)}</a>'
    if "oneOf" in schema:
        return " or ".join(kind(s) for s in schema["oneOf"])
    types = schema.get("type", "any")
    types = types if isinstance(types, list) else [types]
    words = []
    for t in types:
        if t == "array":
            words.append(f"list of {kind(schema.get('items', {}))}")
        else:
            words.append(e(t))
    out = " or ".join(words)
    if "enum" in schema:
        out += ": " + ", ".join(f"<code>{e(json.dumps(v))}</code>" for v in schema["enum"])
    if "default" in schema:
        out += f" (default <code>{e(json.dumps(schema['default']))}</code>)"
    return out


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """An HTML table; the cells are HTML already."""
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def fields(schema: dict[str, Any]) -> str:
    """The properties of an object schema as a table (name, type, required, description)."""
    required = set(schema.get("required", ()))
    rows = [(f"<code>{e(name)}</code>", kind(prop), "yes" if name in required else "",
             e(prop.get("description", ""))) for name, prop in schema.get("properties", {}).items()]
    note = '<p class="muted">No other field is accepted.</p>' if schema.get("additionalProperties") is False else ""
    return table(("field", "type", "required", "description"), rows) + note


def body_html(body: dict[str, Any]) -> str:
    media = ", ".join(f"<code>{e(m)}</code>" for m in body.get("content", {}))
    schemas = {kind(c["schema"]) for c in body.get("content", {}).values() if "schema" in c}
    required = "Required" if body.get("required") else "Optional"
    text = f"; {e(body['description'])}" if body.get("description") else ""
    return f"<p>{required}, as {media}: {', '.join(sorted(schemas))}{text}.</p>"


def responses_html(responses: dict[str, Any], shared: dict[str, Any]) -> str:
    rows = []
    for status, answer in responses.items():
        if "$ref" in answer:
            answer = shared[schema_name(answer["$ref"])]
        content = answer.get("content", {})
        what = "; ".join(f"{kind(c['schema'])} as <code>{e(m)}</code>" for m, c in content.items() if "schema" in c)
        headers = ", ".join(f"<code>{e(h)}</code>" for h in answer.get("headers", {}))
        rows.append((f"<b>{e(status)}</b>", e(answer.get("description", "")), what, headers))
    return table(("status", "when", "body", "headers"), rows)


def operation_html(path: str, method: str, op: dict[str, Any], shared: dict[str, Any]) -> str:
    out = [f'<h3 id="{anchor(method, path)}"><span class="method {method}">{e(method)}</span> {e(path)}</h3>',
           f"<p><b>{e(op.get('summary', ''))}</b></p>"]
    if op.get("description"):
        out.append(f"<p>{e(op['description'])}</p>")
    if op.get("security") and any(op["security"]):
        out.append('<p class="muted">With --api-keys-file: a key as <code>api_key</code> or '
                   "<code>Authorization: Bearer KEY</code>.</p>")
    if op.get("parameters"):
        rows = [(f"<code>{e(p['name'])}</code>", e(p["in"]), kind(p.get("schema", {})),
                 "yes" if p.get("required") else "", e(p.get("description", ""))) for p in op["parameters"]]
        out += ["<h4>Parameters</h4>", table(("name", "in", "type", "required", "description"), rows)]
    if op.get("requestBody"):
        out += ["<h4>Body</h4>", body_html(op["requestBody"])]
    out += ["<h4>Answers</h4>", responses_html(op.get("responses", {}), shared)]
    return "\n".join(out)


def render(doc: dict[str, Any]) -> str:
    """The whole page: a table of contents, the operations by tag, the schemas."""
    info, paths = doc["info"], doc["paths"]
    shared = doc.get("components", {}).get("responses", {})
    operations = [(path, method, op) for path, item in paths.items() for method, op in item.items()
                  if method in METHODS]
    tags = [t["name"] for t in doc.get("tags", [])]
    tags += sorted({t for *_, op in operations for t in op.get("tags", ["Other"])} - set(tags))
    toc, sections = [], []
    for tag in tags:
        mine = [(p, m, op) for p, m, op in operations if tag in op.get("tags", ["Other"])]
        if not mine:
            continue
        toc += [f'<li><a href="#{anchor(m, p)}">{e(m.upper())} {e(p)}</a> {e(op.get("summary", ""))}</li>'
                for p, m, op in mine]
        description = next((t.get("description", "") for t in doc.get("tags", []) if t["name"] == tag), "")
        sections.append(f'<h2 id="{anchor("tag", tag)}">{e(tag)}</h2><p class="muted">{e(description)}</p>')
        sections += [operation_html(p, m, op, shared) for p, m, op in mine]
    schemas = doc.get("components", {}).get("schemas", {})
    sections.append('<h2 id="schemas">Schemas</h2>')
    for name, schema in schemas.items():
        sections.append(f'<h3 id="{anchor("schema", name)}">{e(name)}</h3>')
        if schema.get("description"):
            sections.append(f"<p>{e(schema['description'])}</p>")
        sections.append(fields(schema) if schema.get("properties") else f"<p>{kind(schema)}</p>")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(info['title'])} {e(info['version'])}: HTTP API</title><style>{STYLE}</style></head><body>"
            f"<h1>{e(info['title'])} HTTP API</h1><p class=\"muted\">version {e(info['version'])}, OpenAPI "
            f'{e(doc["openapi"])}: the document itself is at <a href="spec">/spec</a>.</p>'
            f"<p>{e(info.get('description', ''))}</p><nav><ul>{''.join(toc)}</ul></nav>"
            + "\n".join(sections) + "</body></html>\n")
