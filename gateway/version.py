"""The gateway tells its version on every answer, errors included: the ``X-NMT-Version`` header
(cli/version.py defines both). A client or an operator can tell which gateway answered without
a call of its own; the OpenAPI document (/spec) carries the same version."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cli.version import VERSION_HEADER, __version__


class VersionHeader:
    """ASGI middleware adding ``X-NMT-Version: <version>`` to every HTTP response."""

    HEADER = (VERSION_HEADER.lower().encode("latin-1"), __version__.encode("latin-1"))

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_version(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), self.HEADER]
            await send(message)

        await self.app(scope, receive, send_with_version)
