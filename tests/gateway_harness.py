"""Run the real gateway (uvicorn on a socket bound as nmt-http binds it) in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import httpx

from gateway.config import GatewayConfig
from gateway.keys import ApiKey
from gateway.main import listen
from gateway.main import server as gateway_server
from tests.server_harness import wait_until


class GatewayThread:
    """The gateway as nmt-http runs it (uvicorn on a socket bound by gateway.main.listen), in a thread."""

    def __init__(self, cfg: GatewayConfig, api_keys: Sequence[ApiKey] = (), grpc_token: str = "",
                 metrics_token: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        self.sock = listen("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = gateway_server(cfg, api_keys, grpc_token, metrics_token, clock)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, 10)
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
