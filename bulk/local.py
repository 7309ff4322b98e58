"""The server's translation path in this process, without the network: what each Ray actor of
``nmt-bulk`` holds.

``LocalClient`` loads a package as ``nmt-serve`` does (``server.main.load_models``: the same
runtime, scheduler and continuous batching) and answers ``translate`` calls through the
server's own ``TranslatorService`` (sentence splitting, placeholders, limits, the same
errors), so a line comes out byte for byte as ``nmt-translate`` gets it from a server. It
has the method ``clients.translate_file.FileTranslator`` calls on a gRPC client, so the
file client's per-line rules (blank lines kept, a rejected batch resent line by line, a
failing line left empty and reported) are the very same code here.
"""

from __future__ import annotations

from clients.client import Translation, TranslationError, make_request, parse_translations
from server.config import ServerConfig
from server.main import load_models
from server.metrics import Metrics
from server.service import RequestError, TranslatorService

MODEL_NAME = "default"  # the one model a LocalClient holds


class LocalClient:
    """One package loaded in this process, translated through the server's service."""

    def __init__(self, package: str, *, threads: int = 1, int8: bool = True, device: str = "cpu") -> None:
        self.cfg = ServerConfig(model=(f"{MODEL_NAME}={package}",), device=device, threads=threads, int8=int8,
                                metrics_port=-1)
        metrics = Metrics()  # counted as a server counts, never exported (metrics_port -1)
        self.models = load_models(self.cfg, metrics)
        for m in self.models.values():
            m.scheduler.start()
        self.service = TranslatorService(self.models, self.cfg, metrics)
        model = self.models[MODEL_NAME]
        self.max_chars = model.limits.chars_per_text
        self.max_texts = model.limits.texts
        self.pairs = tuple(model.package.pairs)

    async def translate(self, texts, source: str, target: str, *, model: str = "", timeout: float | None = None,
                        **options) -> list[Translation]:
        """What ``AsyncTranslatorClient.translate`` returns for the same call to a server;
        the server's refusals raise ``TranslationError`` with its status code and message."""
        if not texts:
            return []
        try:
            response = await self.service.translate_here(make_request(texts, source, target, model, **options))
        except RequestError as e:
            raise TranslationError(e.code, e.message) from None
        return parse_translations(response)

    def close(self) -> None:
        for m in self.models.values():
            m.scheduler.stop()
