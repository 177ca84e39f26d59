# One image for a minikafka broker or the CLI.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/minikafka
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY broker ./broker
COPY controller ./controller
COPY client ./client
COPY spark_jobs ./spark_jobs
RUN pip install . \
 && useradd --system --uid 1000 --home-dir /var/lib/minikafka --create-home minikafka \
 && mkdir -p /var/lib/minikafka/data && chown -R minikafka /var/lib/minikafka
USER minikafka
VOLUME ["/var/lib/minikafka/data"]
EXPOSE 19092 29092 39092 9404
ENTRYPOINT ["minikafka"]
CMD ["broker", "--config", "/etc/minikafka/server.properties"]
