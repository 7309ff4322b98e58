"""The gateway's HTTP API as an OpenAPI 3.1 document: every route ``create_app`` serves, its
parameters (query string, JSON, form or multipart, as each route takes them), its request and
response bodies and its error answers. nmt-http serves it at ``/spec`` (as LibreTranslate does)
and renders it at ``/docs`` (gateway/reference.py).

Written by hand next to the code it describes, and held to it by tests/test_openapi.py: the
paths and methods here equal the app's routes (a new route fails that test until it is described
here), the document passes openapi-spec-validator, and /v1/translate's keys equal the ones the
app accepts. Only the standard library and the generated protobuf module: nothing here imports
the app.
"""

from __future__ import annotations

from typing import Any

from cli.version import VERSION_HEADER, __version__
from nmt.v1 import translator_pb2 as pb

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
HTML = "text/html"
UINT32_MAX = 2**32 - 1

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def string(description: str, **more: Any) -> Schema:
    return {"type": "string", "description": description, **more}


def boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def integer(description: str, **more: Any) -> Schema:
    return {"type": "integer", "description": description, **more}


def array(items: Schema, description: str = "") -> Schema:
    out: Schema = {"type": "array", "items": items}
    if description:
        out["description"] = description
    return out


def obj(properties: dict[str, Schema], required: tuple[str, ...] = (), description: str = "",
        closed: bool = False) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    if closed:
        out["additionalProperties"] = False
    return out


# ---------------------------------------------------------------- schemas
TEXTS = {"oneOf": [{"type": "string"}, array({"type": "string"})],
         "description": "the text, or a list of texts (the answer then holds a list, in the same order)"}
SPLIT_SENTENCES = {"type": ["string", "integer", "boolean"], "enum": ["1", "0", "nonewlines", 1, 0, True, False],
                   "description": "DeepL's split_sentences: 1 splits each text at its sentence ends and at every "
                                  "line break; nonewlines at its sentence ends only (a line break inside a "
                                  "sentence is read as a space); 0 translates each text as one sentence. Default: "
                                  "1 for text, nonewlines for html"}
API_KEY = string("one of the gateway's keys, when it runs with --api-keys-file (also accepted as "
                 "'Authorization: Bearer KEY')")
# Glossaries and do-not-translate spans (gateway/terms.py): /v1/translate's keys, and our extension
# of LibreTranslate's /translate (it has none). The server checks the limits (docs/translate.md).
TERM_FIELDS: dict[str, Schema] = {
    "keep": {"oneOf": [array({"type": "string"}), {"type": "string"}],
             "description": "ours: spans to give back as they are (do-not-translate; matched as whole words in any "
                            "case), a list of strings or one string; in a form, a JSON list is read as one"},
    "glossary": {"oneOf": [{"type": "object", "additionalProperties": {"type": "string"}},
                           array(obj({"source": string("the term"), "target": string("its translation")},
                                     ("source", "target"), closed=True)),
                           {"type": "string"}],
                 "description": "ours: terms to translate as given, {\"source term\": \"target term\"} or a list of "
                                "{source, target} objects (in a form: that as JSON text)"},
    "glossary_name": string("ours: a glossary the server loaded (nmt-serve --glossary NAME=FILE) for this pair"),
}
LIBRE_TRANSLATE_FIELDS: dict[str, Schema] = {
    "q": TEXTS,
    "source": string("the source language's code (case-insensitive), or auto to detect each text's language",
                     examples=["en", "auto"]),
    "target": string("the target language's code (case-insensitive)", examples=["de"]),
    "format": string("text, or html: each block of running text is translated whole and its inline markup put "
                     "back where the attention says its words went", enum=["text", "html"], default="text"),
    "alternatives": {"type": ["integer", "string"], "default": 0,
                     "description": "how many other translations to add (n-best of the same beam), a whole "
                                    "number; a negative one is read as 0; none for html"},
    "split_sentences": SPLIT_SENTENCES,
    **TERM_FIELDS,
    "api_key": API_KEY,
}
STOP_REASONS = [v.name.removeprefix("STOP_REASON_") for v in pb.StopReason.DESCRIPTOR.values]  # as /v1 spells them
DETECTION = obj({"confidence": {"type": "number", "description": "a percentage; the candidates' sum to 100"},
                 "language": string("a language code")}, ("confidence", "language"))
HYPOTHESIS = obj({
    "text": string("the translation"),
    "score": {"type": "number", "description": "log-probability (length-normalised for beam search); 0 unless "
                                               "return_scores"},
    "num_tokens": integer("target tokens generated (without the end-of-sentence token)"),
    "stop_reason": string("why decoding stopped: LENGTH_LIMIT means the text may be cut short; UNSPECIFIED for "
                          "an empty text", enum=STOP_REASONS),
    "source_pieces": array({"type": "string"}, "with return_attention: the source's pieces"),
    "target_pieces": array({"type": "string"}, "with return_attention: the translation's pieces"),
    "attention": array(array({"type": "number"}), "with return_attention: one row per target piece, one "
                                                   "column per source piece (the last decoder layer's "
                                                   "cross-attention, averaged over heads)"),
}, ("text", "score", "num_tokens", "stop_reason"))
MODEL_LIMITS = obj({f.name: integer(f"ModelInfo.{f.name} (0: no limit)", minimum=0)
                    for f in pb.ModelInfo.DESCRIPTOR.fields if f.name.startswith("max_")},
                   description="the model's limits, as ListModels gives them")
V1_OPTIONS: dict[str, Schema] = {
    "beam_size": integer("beam size; 0 or absent: the gateway's --beam (4), within the model's largest; 1: "
                         "greedy", minimum=0, maximum=UINT32_MAX),
    "num_hypotheses": integer("n-best, at most beam_size; 0: 1", minimum=0, maximum=UINT32_MAX),
    "length_penalty": {"type": "number", "description": "GNMT alpha of beam search; 0: the server's default"},
    "max_output_tokens": integer("per sentence; 0: 3 x source tokens + 10, at most the model's limit", minimum=0,
                                 maximum=UINT32_MAX),
    "return_scores": boolean("fill each hypothesis' score"),
    "return_attention": boolean("add source_pieces, target_pieces and attention to each hypothesis"),
    "no_sentence_split": boolean("translate each text as one sentence instead of sentence by sentence"),
}

SCHEMAS: dict[str, Schema] = {
    "Error": obj({"error": string("what went wrong, in LibreTranslate's words where it has them")}, ("error",),
                 "every answer other than 200 (and the 499 a vanished client never sees)"),
    "TranslateRequest": obj(LIBRE_TRANSLATE_FIELDS, ("q", "source", "target"),
                            "LibreTranslate's /translate parameters, from the query string and the body (the "
                            "body's win); in a form, q given more than once is a list"),
    "TranslateResponse": obj({
        "translatedText": {"oneOf": [{"type": "string"}, array({"type": "string"})],
                           "description": "the translation, or a list of them when q is a list"},
        "alternatives": {"oneOf": [array({"type": "string"}), array(array({"type": "string"}))],
                         "description": "with alternatives > 0: the other translations (a list per text when q is a "
                                        "list), without repeats"},
        "detectedLanguage": {"oneOf": [ref("Detection"), array(ref("Detection"))],
                             "description": "with source auto: each text's language (a list when q is a list); a "
                                            "text in the target language, or with none to tell, comes back as it "
                                            "was"},
    }, ("translatedText",)),
    "DetectRequest": obj({"q": TEXTS, "api_key": API_KEY}, ("q",),
                         "LibreTranslate's /detect parameters, from the query string and the body"),
    "Detection": DETECTION,
    "Language": obj({"code": string("a language code", examples=["en"]),
                     "name": string("its English name", examples=["English"]),
                     "targets": array({"type": "string"}, "the languages it is translated into (none for a "
                                                          "language that is only a target)")},
                    ("code", "name", "targets")),
    "FrontendSettings": obj({
        "charLimit": integer("the longest text in characters (the smallest model's limit); -1 when the server "
                             "cannot be asked"),
        "frontendTimeout": integer("milliseconds the page waits after typing before it translates"),
        "apiKeys": boolean("whether the gateway has API keys (--api-keys-file)"),
        "keyRequired": boolean("whether /translate, /detect and /v1/translate need a key"),
        "suggestions": boolean("always false: no /suggest here"),
        "filesTranslation": boolean("whether files can be translated"),
        "supportedFilesFormat": array({"type": "string"}, "the file formats that can be translated"),
        "language": obj({"source": ref("LanguageChoice"), "target": ref("LanguageChoice")}, ("source", "target"),
                        "the page's default languages"),
    }, ("charLimit", "frontendTimeout", "apiKeys", "keyRequired", "suggestions", "filesTranslation",
        "supportedFilesFormat", "language")),
    "TranslateFileRequest": obj({
        "file": {"type": "string", "format": "binary", "description": "the document; its extension is its format"},
        "source": string("the document's language, or auto", examples=["en"]),
        "target": string("the language to translate it into", examples=["de"]),
        "api_key": API_KEY,
    }, ("file", "source", "target")),
    "TranslateFileResponse": obj({"translatedFileUrl": string("the absolute URL of the translation, at "
                                                              "/download_file/NAME")}, ("translatedFileUrl",)),
    "LanguageChoice": obj({"code": string("a language code, or auto"), "name": string("its name")},
                          ("code", "name")),
    "Status": obj({"status": string("ok", enum=["ok"])}, ("status",)),
    "Readiness": obj({
        "status": string("the gRPC server's health status, or UNREACHABLE",
                         enum=["SERVING", "NOT_SERVING", "UNKNOWN", "SERVICE_UNKNOWN", "UNREACHABLE"]),
        "error": string("with UNREACHABLE: the gRPC error"),
    }, ("status",)),
    "V1TranslateRequest": obj({
        "q": TEXTS,
        "source": string("the source language's code", examples=["en"]),
        "target": string("the target language's code", examples=["de"]),
        "model": string("a model's name (GET /v1/models); empty or absent: the first model serving the pair"),
        **V1_OPTIONS,
        **TERM_FIELDS,
        "api_key": API_KEY,
    }, ("q", "source", "target"), "a JSON object; any other key is answered 400, naming it", closed=True),
    "V1TranslateResponse": obj({"model": string("the model that translated (through a pivot: the second leg's)"),
                                "pivot": obj({"via": string("the language the text went through", examples=["en"]),
                                              "model": string("the model of the first leg (source -> via)")},
                                             ("via", "model"), "only when no model serves the pair directly"),
                                "translations": array(ref("V1Translation"), "one per text, in order")},
                               ("model", "translations")),
    "V1Translation": obj({
        "hypotheses": array(ref("Hypothesis"), "the whole text, best first: each sentence's i-th hypothesis in "
                                               "its place"),
        "segments": array(ref("Segment"), "the text's sentences, in order; none for a blank text"),
    }, ("hypotheses", "segments")),
    "Segment": obj({"source": string("the sentence as it stands in the text"),
                    "start": integer("where it starts in the text, in code points", minimum=0),
                    "end": integer("where it ends: text[start:end] == source", minimum=0),
                    "hypotheses": array(ref("Hypothesis"), "best first")},
                   ("source", "start", "end", "hypotheses")),
    "Hypothesis": HYPOTHESIS,
    "V1Models": obj({"models": array(ref("V1Model")),
                     "pivots": array(ref("PivotRoute"), "pairs no model serves directly, translated in two legs")},
                    ("models", "pivots")),
    "PivotRoute": obj({"pair": string("the pair", examples=["de-fr"]),
                       "via": string("the language between the legs", examples=["en"]),
                       "first_model": string("the model of source -> via"),
                       "second_model": string("the model of via -> target")},
                      ("pair", "via", "first_model", "second_model")),
    "V1Model": obj({"name": string("the model's name"),
                    "pairs": array({"type": "string"}, "its language pairs, such as en-de"),
                    "device": string("where it runs: cpu or cuda"),
                    "variant": string("its graphs: fp32, int8 or fp16"),
                    "device_resident": boolean("the decoder's caches stay on the device between steps"),
                    "limits": ref("ModelLimits")},
                   ("name", "pairs", "device", "variant", "device_resident", "limits")),
    "ModelLimits": MODEL_LIMITS,
}


# ---------------------------------------------------------------- parameters and answers
def query(name: str, schema: Schema, description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description or schema.get("description", "")}


TIMEOUT = {"name": "X-Timeout-Seconds", "in": "header", "required": False,
           "schema": {"type": "number", "exclusiveMinimum": 0},
           "description": "lowers this request's deadline (the gateway's --timeout, 30 s) to this many seconds"}
LIBRE_QUERY = [query("q", {"type": "string"}, "the text; given more than once, a list of texts")] + \
    [query(name, {k: v for k, v in schema.items() if k != "description"}, schema["description"])
     for name, schema in LIBRE_TRANSLATE_FIELDS.items() if name != "q"]

RESPONSES: dict[str, dict[str, Any]] = {
    "400": {"description": "a bad request: a missing or wrong parameter, an unknown language or pair, a text over "
                           "a limit, malformed JSON, a bad X-Timeout-Seconds, a Host not in --allowed-hosts, or a "
                           "missing API key ('Please contact the server operator to get an API key'), or more "
                           "characters than the key may send in a whole minute or day"},
    "401": {"description": "/metrics without the token of --metrics-token-file ('Invalid authentication token')"},
    "403": {"description": "a wrong API key ('Invalid API key')"},
    "408": {"description": "the body did not arrive within --body-seconds"},
    "404": {"description": "not found"},
    "413": {"description": "a body over --max-body-bytes"},
    "429": {"description": "the translation server is saturated (its queue is full: 'server busy: ...'), or the API "
                           "key is over one of its limits of --api-keys-file ('Slowdown: ...'); try again after "
                           "Retry-After seconds", "retry": True},
    "500": {"description": "anything else (never with a traceback)"},
    "503": {"description": "the translation server cannot be reached or is shutting down, or the gateway is at "
                           "--max-connections", "retry": True},
    "504": {"description": "the deadline passed (--timeout, or X-Timeout-Seconds)"},
}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer"}}}
VERSION = {VERSION_HEADER: {"description": "the gateway's version (on every answer)", "schema": {"type": "string"}}}


def error_response(status: str) -> dict[str, Any]:
    spec = RESPONSES[status]
    out: dict[str, Any] = {"description": spec["description"], "content": {JSON: {"schema": ref("Error")}}}
    if spec.get("retry"):
        out["headers"] = RETRY_AFTER
    return out


def answers(ok: dict[str, Any], *errors: str) -> dict[str, Any]:
    """The responses of an operation: 200 (``ok``), then each error status by its component."""
    return {"200": {**ok, "headers": VERSION}, **{s: {"$ref": f"#/components/responses/{s}"} for s in errors}}


def json_ok(description: str, schema: Schema) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def libre_body(schema: str, description: str) -> dict[str, Any]:
    """A body as LibreTranslate takes it: JSON, a form or multipart (each field a text, q repeated for a list)."""
    form = {"schema": ref(schema), "encoding": {"q": {"style": "form", "explode": True}}}
    return {"required": False, "description": description,
            "content": {JSON: {"schema": ref(schema)}, FORM: form, MULTIPART: form}}


TRANSLATE_ERRORS = ("400", "403", "408", "413", "429", "500", "503", "504")
MODEL_LIST_ERRORS = ("400", "500", "503", "504")
KEYED = [{}, {"bearer": []}]  # a key is needed only with --api-keys-file: then api_key or this header

PATHS: dict[str, dict[str, Any]] = {
    "/translate": {"post": {
        "tags": ["LibreTranslate"], "operationId": "translate", "summary": "Translate text or HTML",
        "description": "LibreTranslate's call. Parameters come from the query string and the body (JSON, form or "
                       "multipart); the body's win. With source auto, each text is translated from its own "
                       "detected language.",
        "parameters": [*LIBRE_QUERY, TIMEOUT], "security": KEYED,
        "requestBody": libre_body("TranslateRequest", "the parameters (they may be in the query string instead)"),
        "responses": answers(json_ok("the translation", ref("TranslateResponse")), *TRANSLATE_ERRORS)}},
    "/detect": {"post": {
        "tags": ["LibreTranslate"], "operationId": "detect", "summary": "Detect the language of a text",
        "description": "The likeliest languages of q among those the models serve, best first, at most three (one "
                       "ranking for a list). A text with no language to tell: [{\"confidence\": 0.0, "
                       "\"language\": \"en\"}].",
        "parameters": [query("q", {"type": "string"}, "the text; given more than once, a list of texts"),
                       query("api_key", {"type": "string"}, API_KEY["description"]), TIMEOUT],
        "security": KEYED,
        "requestBody": libre_body("DetectRequest", "the parameters (they may be in the query string instead)"),
        "responses": answers(json_ok("the candidates, best first", array(ref("Detection"))),
                             "400", "403", "408", "413", "429", "500", "503", "504")}},
    "/translate_file": {"post": {
        "tags": ["LibreTranslate"], "operationId": "translateFile", "summary": "Translate a document",
        "description": "LibreTranslate's call: a multipart form with the file (.txt, .html, .htm, .md, .srt, .vtt, "
                       ".docx, .odt; /frontend/settings lists them), source (auto: told from the document's text), "
                       "target and api_key. The document is translated whole, its structure and formatting kept, "
                       "and stored for --files-ttl seconds; a segment that fails fails the request, naming it "
                       "(\"paragraph 12: ...\"). The body may be --max-file-bytes (and a little more) long.",
        "parameters": [query("api_key", {"type": "string"}, API_KEY["description"]), TIMEOUT], "security": KEYED,
        "requestBody": {"required": True, "content": {MULTIPART: {"schema": ref("TranslateFileRequest")}}},
        "responses": answers(json_ok("where to download the translation", ref("TranslateFileResponse")),
                             *TRANSLATE_ERRORS)}},
    "/download_file/{name}": {"get": {
        "tags": ["LibreTranslate"], "operationId": "downloadFile", "summary": "Download a translated document",
        "description": "The file /translate_file stored, as an attachment named as LibreTranslate names it "
                       "(report_de.docx), with its format's media type; 404 for a name that is not a stored "
                       "file's or one older than --files-ttl.",
        "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"},
                        "description": "the last part of translatedFileUrl"}],
        "responses": answers({"description": "the translated file",
                              "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                  "format": "binary"}}}},
                             "404")}},
    "/languages": {"get": {
        "tags": ["LibreTranslate"], "operationId": "languages", "summary": "The languages served",
        "description": "Every language of every model's pairs, each with the languages it is translated into.",
        "parameters": [TIMEOUT],
        "responses": answers(json_ok("the languages", array(ref("Language"))), *MODEL_LIST_ERRORS)}},
    "/frontend/settings": {"get": {
        "tags": ["LibreTranslate"], "operationId": "frontendSettings", "summary": "Settings for a web page",
        "description": "The character limit, whether keys are needed, and the page's default languages. Answers "
                       "even when the translation server cannot be reached (charLimit -1).",
        "parameters": [TIMEOUT],
        "responses": answers(json_ok("the settings", ref("FrontendSettings")))}},
    "/health": {"get": {
        "tags": ["LibreTranslate"], "operationId": "health", "summary": "The gateway runs",
        "description": "LibreTranslate's health check: 200 while this process answers.",
        "responses": answers(json_ok("it runs", ref("Status")))}},
    "/v1/translate": {"post": {
        "tags": ["JSON API"], "operationId": "v1Translate", "summary": "Translate with every decoding option",
        "description": "Every DecodingOptions field of the gRPC API, every hypothesis, per text and per sentence, "
                       "with scores and attention on request.",
        "parameters": [query("api_key", {"type": "string"}, API_KEY["description"]), TIMEOUT], "security": KEYED,
        "requestBody": {"required": True, "content": {JSON: {"schema": ref("V1TranslateRequest")}}},
        "responses": answers(json_ok("the translations", ref("V1TranslateResponse")), *TRANSLATE_ERRORS)}},
    "/v1/models": {"get": {
        "tags": ["JSON API"], "operationId": "v1Models", "summary": "The models served",
        "description": "The gRPC server's ListModels: each model's pairs, device, variant and limits.",
        "parameters": [TIMEOUT],
        "responses": answers(json_ok("the models", ref("V1Models")), *MODEL_LIST_ERRORS)}},
    "/healthz": {"get": {
        "tags": ["Operations"], "operationId": "healthz", "summary": "The gateway runs (liveness)",
        "description": "200 while this process answers, whatever the translation server's state: for a "
                       "container's health check.",
        "responses": answers(json_ok("it runs", ref("Status")))}},
    "/readyz": {"get": {
        "tags": ["Operations"], "operationId": "readyz", "summary": "The translation server serves (readiness)",
        "description": "200 while the gRPC server's health check says SERVING, else 503: for a load balancer in "
                       "front, not for restarting the gateway.",
        "responses": {"200": {**json_ok("the server is SERVING", ref("Readiness")), "headers": VERSION},
                      "503": json_ok("the server is not serving or cannot be reached", ref("Readiness"))}}},
    "/": {"get": {
        "tags": ["Page"], "operationId": "page", "summary": "The web page",
        "description": "Plain HTML, CSS and JavaScript (gateway/static/) over this API.",
        "responses": answers({"description": "the page", "content": {HTML: {"schema": {"type": "string"}}}},
                             "404")}},
    "/static/{path}": {"get": {
        "tags": ["Page"], "operationId": "static", "summary": "The web page's files",
        "parameters": [{"name": "path", "in": "path", "required": True, "schema": {"type": "string"},
                        "description": "a file of gateway/static/, such as app.js"}],
        "responses": answers({"description": "the file", "content": {"*/*": {"schema": {"type": "string"}}}},
                             "404")}},
    "/metrics": {"get": {
        "tags": ["Operations"], "operationId": "metrics", "summary": "Prometheus metrics",
        "description": "With --metrics (LibreTranslate's): each API key's requests, characters and refusals by limit "
                       "(nmt_http_key_*), labelled by the key's name in --api-keys-file or a short hash, never the "
                       "key. With --metrics-token-file, only for 'Authorization: Bearer TOKEN'.",
        "responses": answers({"description": "Prometheus's text format",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}, "401", "404")}},
    "/spec": {"get": {
        "tags": ["Reference"], "operationId": "spec", "summary": "This API as an OpenAPI document",
        "description": "This document (OpenAPI 3.1, JSON), as LibreTranslate serves its own at /spec.",
        "responses": answers(json_ok("the OpenAPI document", {"type": "object"}))}},
    "/docs": {"get": {
        "tags": ["Reference"], "operationId": "docs", "summary": "This API as a web page",
        "description": "The OpenAPI document rendered as one self-contained HTML page (no script, nothing fetched).",
        "responses": answers({"description": "the page", "content": {HTML: {"schema": {"type": "string"}}}})}},
}

DESCRIPTION = (
    "nmt-http: LibreTranslate's API, a JSON API of its own (/v1/...) and a web page, in front of the nmt-serve gRPC "
    "server; it never loads a model. Every error is {\"error\": \"message\"} with the status LibreTranslate uses. "
    "Any request may also be answered 400 when its Host is not one of --allowed-hosts, 408 when its body is slower "
    "than --body-seconds, 413 over --max-body-bytes and 503 beyond --max-connections. Every answer carries the "
    f"gateway's version in {VERSION_HEADER}.")


def document() -> dict[str, Any]:
    """The OpenAPI document (a fresh dict each call: callers may change theirs)."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "nmt-http", "version": __version__, "description": DESCRIPTION,
                 "license": {"name": "MIT", "identifier": "MIT"}},
        "tags": [{"name": "LibreTranslate", "description": "LibreTranslate's API, as its clients use it"},
                 {"name": "JSON API", "description": "what LibreTranslate's API cannot express"},
                 {"name": "Operations", "description": "liveness and readiness probes, metrics"},
                 {"name": "Page", "description": "the web page"},
                 {"name": "Reference", "description": "this document"}],
        "paths": _copy(PATHS),
        "components": {
            "schemas": _copy(SCHEMAS),
            "responses": {status: error_response(status) for status in RESPONSES},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "an API key as 'Authorization: Bearer KEY' (instead of "
                                                          "api_key), when the gateway has --api-keys-file"}},
        },
    }


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
