# Training and export (nmt-train, nmt-evaluate, nmt-export, nmt-verify): PyTorch + onnx.
#
#   docker build -f docker/train.Dockerfile -t nmt-train .
#   docker build -f docker/train.Dockerfile --build-arg TORCH_INDEX=<PyTorch's CPU wheel index URL> -t nmt-train:cpu .
#
# torch is pinned (TORCH_VERSION). A torch wheel in docker/wheels/ is installed as it is
# (an offline build, or a CPU wheel you already have: scripts/compose_e2e.sh puts the
# host's there). Else, without TORCH_INDEX, pip takes torch from the default index, where
# the Linux build carries the CUDA libraries (several GB): right for a GPU training
# machine. For a CPU-only image (the export job needs no GPU) pass the CPU wheel index
# that PyTorch's "Get started" page gives as TORCH_INDEX: a few hundred MB.
# The export job in docker-compose.yml runs this image:
#   nmt-export /checkpoints/CKPT /models/NAME --int8 --force
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=""
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

COPY docker/wheels/ /tmp/wheels/
RUN set -eux; \
    packages="tini ca-certificates"; \
    command -v python3 >/dev/null || packages="$packages python3 python3-venv"; \
    apt-get update; \
    apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --upgrade pip "setuptools>=77" wheel; \
    wheel=$(ls /tmp/wheels/torch-"$TORCH_VERSION"[-+]*.whl 2>/dev/null | head -1 || true); \
    if [ -n "$wheel" ]; then \
        /opt/venv/bin/pip install "$wheel"; \
    elif [ -n "$TORCH_INDEX" ]; then \
        /opt/venv/bin/pip install --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION"; \
    else \
        /opt/venv/bin/pip install "torch==$TORCH_VERSION"; \
    fi; \
    rm -rf /tmp/wheels; \
    /opt/venv/bin/python -c 'import torch; print("torch", torch.__version__)'; \
    if /opt/venv/bin/pip list 2>/dev/null | grep -qi '^nvidia-'; then \
        echo "NOTE: this image carries torch's CUDA libraries (several GB): right for GPU training;" \
             "for a CPU-only export image pass PyTorch's CPU wheel index as --build-arg TORCH_INDEX=..."; \
    fi

# The other dependencies of the train and export extras (torch held at the version above).
COPY pyproject.toml /src/pyproject.toml
RUN set -eux; \
    /opt/venv/bin/python -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]; e = p["optional-dependencies"]; print("\n".join(p["dependencies"] + e["train"] + e["export"]))' > /tmp/requirements.txt; \
    /opt/venv/bin/python -c 'from importlib.metadata import version; print("torch==" + version("torch"))' > /tmp/constraints.txt; \
    /opt/venv/bin/pip install -r /tmp/requirements.txt -c /tmp/constraints.txt

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
    mkdir -p /models /checkpoints /runs; \
    chown nmt:nmt /models /runs

ENV PATH=/opt/venv/bin:$PATH
USER nmt
WORKDIR /home/nmt
ENTRYPOINT ["tini", "--"]
CMD ["nmt-export", "--help"]
