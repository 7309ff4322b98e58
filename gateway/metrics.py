"""The gateway's Prometheus metrics at GET /metrics, as LibreTranslate's ``--metrics`` serves
them: off unless --metrics, and with --metrics-token-file only for 'Authorization: Bearer
TOKEN' (LibreTranslate's --metrics-auth-token). They count each API key's requests, characters
and refusals (gateway/keys.py), labelled by the key's name or hash, never the key.
"""

from __future__ import annotations

import hmac

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

OFF = "metrics are off: start nmt-http with --metrics"
UNAUTHORIZED = "Invalid authentication token"  # LibreTranslate's words for /metrics without its token


class Exporter:
    def __init__(self, enabled: bool, token: str = "") -> None:
        self.registry = CollectorRegistry()
        self.enabled, self.token = enabled, token

    async def endpoint(self, request: Request) -> Response:
        if not self.enabled:
            return JSONResponse({"error": OFF}, 404)
        if self.token:
            scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return JSONResponse({"error": UNAUTHORIZED}, 401, headers={"WWW-Authenticate": "Bearer"})
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(self.registry), headers={"Content-Type": content_type})
