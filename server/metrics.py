"""Prometheus metrics, on their own port, in a registry per server (tests run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("nmt_requests", "RPCs answered, by method and status code", ["method", "code"],
                                registry=r)
        self.texts = Counter("nmt_texts", "Texts received for translation", ["model"], registry=r)
        self.latency = Histogram("nmt_request_latency_seconds", "RPC latency", ["method"], buckets=LATENCY_BUCKETS,
                                 registry=r)
        self.queue_seconds = Histogram("nmt_queue_seconds", "Time a text waited before joining the batch",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("nmt_batch_rows", "Rows (sequences x beams) in each decoder step",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.tokens_generated = Counter("nmt_tokens_generated", "Decoder tokens generated (all beams)", registry=r)
        self.in_flight = Gauge("nmt_in_flight_sequences", "Texts being decoded", ["model"], registry=r)
        self.queued = Gauge("nmt_queued_texts", "Texts waiting to join the batch", ["model"], registry=r)
        self.sentences = Counter("nmt_sentences", "Sentences decoded (texts after sentence splitting)", ["model"],
                                 registry=r)
        # Outputs that may be cut short: a rate above a few per thousand of nmt_sentences
        # says the output-length limit is too tight for what is sent.
        self.length_limited = Counter("nmt_length_limited", "Sentences whose best hypothesis stopped at the "
                                      "output-length limit", ["model"], registry=r)

        # 1 per loaded model, labelled with where it really runs (engine/runtime.py checks the
        # providers the sessions got): a server meant for the GPU that fell back shows cpu here.
        self.model_device = Gauge("nmt_model_device", "Device, graph variant and cache residency of each model",
                                  ["model", "device", "variant", "resident"], registry=r)

    def serve(self, port: int, host: str) -> int:
        """Start the HTTP exporter; returns the bound port (port 0 picks a free one). Raises
        OSError (errno EADDRINUSE: the port is taken) when it cannot listen."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server.server_port
