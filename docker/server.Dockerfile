# The gRPC translation server (nmt-serve) on onnxruntime. No torch, no onnx.
#
#   docker build -f docker/server.Dockerfile -t nmt-server:cpu .                       # CPU
#   docker build -f docker/server.Dockerfile --build-arg VARIANT=gpu -t nmt-server:gpu .  # CUDA
#
# BASE_IMAGE: any Debian-based image (a public Python image by default; a plain Debian
# image works too: Python is installed from Debian when the base has none).
# VARIANT=cpu installs the `serve` extra (onnxruntime); VARIANT=gpu installs the `gpu`
# extra (onnxruntime-gpu) with the CUDA and cuDNN libraries it needs from pip, so the
# host needs only the NVIDIA driver and container toolkit. ORT_GPU pins onnxruntime-gpu
# (e.g. "onnxruntime-gpu==1.22.*" for hosts whose driver only supports CUDA 12).
# The model packages are mounted at /models (or copied there by a derived image);
# NMT_MODEL names them. Every server flag is an NMT_* environment variable.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG VARIANT=cpu
ARG ORT_GPU="onnxruntime-gpu[cuda,cudnn]"
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# tini as PID 1 forwards SIGTERM to the server (which drains) and reaps children.
RUN set -eux; \
    packages="tini ca-certificates"; \
    command -v python3 >/dev/null || packages="$packages python3 python3-venv"; \
    apt-get update; \
    apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*; \
    case "$VARIANT" in cpu|gpu) ;; *) echo "VARIANT must be cpu or gpu, not $VARIANT" >&2; exit 1;; esac; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --upgrade pip "setuptools>=77" wheel

# Dependencies first (a layer that survives code changes), read from pyproject.toml.
COPY pyproject.toml /src/pyproject.toml
RUN set -eux; \
    extra=$([ "$VARIANT" = gpu ] && echo gpu || echo serve); \
    /opt/venv/bin/python -c 'import sys, tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"][sys.argv[1]]))' "$extra" > /tmp/requirements.txt; \
    if [ "$VARIANT" = gpu ]; then sed -i "s/^onnxruntime-gpu.*/$ORT_GPU/" /tmp/requirements.txt; fi; \
    cat /tmp/requirements.txt; \
    /opt/venv/bin/pip install -r /tmp/requirements.txt; \
    if [ "$VARIANT" = gpu ]; then \
        find /opt/venv/lib -path '*/site-packages/nvidia/*' -name lib -type d > /etc/ld.so.conf.d/nvidia-pip.conf; \
        ldconfig; \
    fi; \
    if /opt/venv/bin/python -c 'import torch' 2>/dev/null; then echo "torch must not be in the server image" >&2; exit 1; fi

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
    groupadd --gid 10001 nmt; \
    useradd --no-log-init --uid 10001 --gid nmt --home-dir /home/nmt --create-home --shell /usr/sbin/nologin nmt; \
    mkdir -p /models; \
    chown nmt:nmt /models

# nmt-serve listens on 127.0.0.1 unless told otherwise; in a container it must listen on
# every interface (gRPC and metrics) for the published ports and Prometheus to reach it.
ENV PATH=/opt/venv/bin:$PATH \
    NMT_HOST=0.0.0.0 \
    NMT_PORT=50051 \
    NMT_METRICS_HOST=0.0.0.0 \
    NMT_METRICS_PORT=9090 \
    NMT_DEVICE=auto
USER nmt
WORKDIR /home/nmt
EXPOSE 50051 9090
HEALTHCHECK --interval=10s --timeout=10s --start-period=120s --retries=3 CMD ["nmt-health", "--timeout", "3"]
ENTRYPOINT ["tini", "--"]
CMD ["nmt-serve"]
