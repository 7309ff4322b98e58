# Prometheus (Debian's package) with the scrape configuration of docker-compose.yml.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends prometheus tini; \
    rm -rf /var/lib/apt/lists/*; \
    mkdir -p /prometheus; \
    chown prometheus:prometheus /prometheus
COPY docker/prometheus.yml /etc/prometheus/prometheus.yml
RUN promtool check config /etc/prometheus/prometheus.yml
USER prometheus
EXPOSE 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090"]
ENTRYPOINT ["tini", "--"]
CMD ["prometheus", "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", \
     "--web.listen-address=:9090", "--storage.tsdb.retention.time=15d"]
