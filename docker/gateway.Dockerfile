# The HTTP gateway (nmt-http): LibreTranslate's API, our JSON API and the web page, in
# front of the gRPC service. No onnxruntime, no torch: it only speaks gRPC to the servers.
#
#   docker build -f docker/gateway.Dockerfile -t nmt-http .
#
# BASE_IMAGE: any Debian-based image (Python is installed from Debian when the base has
# none). Every gateway flag is an NMT_HTTP_* environment variable; NMT_HTTP_GRPC_ADDRESS
# names the gRPC service (the balancer in docker-compose.yml).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

RUN set -eux; \
    packages="tini ca-certificates"; \
    command -v python3 >/dev/null || packages="$packages python3 python3-venv"; \
    apt-get update; \
    apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --upgrade pip "setuptools>=77" wheel

# Dependencies first (a layer that survives code changes): the project's and the http extra.
COPY pyproject.toml /src/pyproject.toml
RUN set -eux; \
    /opt/venv/bin/python -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["http"]))' > /tmp/requirements.txt; \
    cat /tmp/requirements.txt; \
    /opt/venv/bin/pip install -r /tmp/requirements.txt; \
    if /opt/venv/bin/python -c 'import onnxruntime' 2>/dev/null; then echo "onnxruntime must not be in the gateway image" >&2; exit 1; fi

# The sources (not COPY . : docker/wheels/, in the build context for the training image, stays out)
COPY pyproject.toml README.md /src/
COPY cli /src/cli
COPY corpus /src/corpus
COPY engine /src/engine
COPY training /src/training
COPY export /src/export
COPY bench /src/bench
COPY server /src/server
COPY clients /src/clients
COPY bulk /src/bulk
COPY documents /src/documents
COPY gateway /src/gateway
COPY protos /src/protos
RUN set -eux; \
    /opt/venv/bin/pip install --no-deps --no-build-isolation /src; \
    rm -rf /src; \
    /opt/venv/bin/python -c 'import importlib.resources as r; assert r.files("gateway").joinpath("static/index.html").is_file()'; \
    groupadd --gid 10003 http; \
    useradd --no-log-init --uid 10003 --gid http --no-create-home --shell /usr/sbin/nologin http

# nmt-http listens on 127.0.0.1 unless told otherwise; in a container, on every interface.
ENV PATH=/opt/venv/bin:$PATH \
    NMT_HTTP_HOST=0.0.0.0 \
    NMT_HTTP_PORT=5000
USER http
EXPOSE 5000
# Healthy while the gateway itself answers (/healthz). Not /readyz, which also asks the servers:
# Swarm replaces an unhealthy container, and restarting the gateway cures no server outage.
# As for the balancer (docker/nginx.Dockerfile), the stack's one gateway is replaced only after a
# minute of failed or 10-second probes: a probe starts a Python, slow on a loaded machine.
HEALTHCHECK --interval=10s --timeout=10s --start-period=20s --retries=6 \
    CMD ["python3", "-c", "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:5000/healthz', timeout=3).status != 200)"]
ENTRYPOINT ["tini", "--"]
CMD ["nmt-http"]
