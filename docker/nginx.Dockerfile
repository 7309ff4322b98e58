# The gRPC load balancer in front of the CPU replicas: Debian's nginx, HTTP/2 in and out
# (grpc_pass). Runs as an unprivileged user; listens on 8080 (gRPC).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends nginx tini; \
    rm -rf /var/lib/apt/lists/*; \
    rm -f /etc/nginx/sites-enabled/default; \
    groupadd --gid 10002 lb; \
    useradd --no-log-init --uid 10002 --gid lb --no-create-home --shell /usr/sbin/nologin lb; \
    install -d -o lb -g lb /run/lb
COPY docker/nginx.conf /etc/nginx/nginx.conf
USER lb
RUN nginx -t -e stderr -c /etc/nginx/nginx.conf
EXPOSE 8080
# The balancer is up when it accepts connections (the replicas have their own checks).
# Swarm replaces a container whose probe fails `retries` times in a row, and this is the stack's
# one balancer: replacing it drops every client's connection. A probe is a `docker exec`, which
# can take seconds on a loaded 2-core machine (a CI run lost its balancer in a rolling update
# under load with 3 s x 3; the task ended "Complete": nginx exits 0 on the SIGTERM). So only a
# minute of failed or 10-second probes replaces it.
HEALTHCHECK --interval=10s --timeout=10s --start-period=10s --retries=6 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
ENTRYPOINT ["tini", "--"]
CMD ["nginx", "-e", "stderr", "-c", "/etc/nginx/nginx.conf", "-g", "daemon off;"]
