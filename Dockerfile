# raftlog node image: python:3.11-slim with the project installed.
# Build: docker build -t raftlog .   Run: see docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/raftlog
COPY pyproject.toml README.md ./
COPY raftlog ./raftlog
COPY metadata_quorum ./metadata_quorum
COPY data_plane ./data_plane
COPY chaos ./chaos
COPY spark_sink ./spark_sink
RUN pip install . \
    && useradd --system --home-dir /var/lib/raftlog --create-home raftlog \
    && mkdir -p /etc/raftlog /var/lib/raftlog/data \
    && chown -R raftlog /etc/raftlog /var/lib/raftlog
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/raftlog-entrypoint

USER raftlog
VOLUME ["/var/lib/raftlog/data"]
# Kafka (broker) and controller listeners.
EXPOSE 9092 9093
ENTRYPOINT ["raftlog-entrypoint"]
