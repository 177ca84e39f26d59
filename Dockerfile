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
# WITH_SPARK=1 adds Java and PySpark for the spark_jobs (docker-compose's spark-job service).
ARG WITH_SPARK=0
RUN if [ "$WITH_SPARK" = "1" ]; then \
      mkdir -p /usr/share/man/man1 && apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
      && rm -rf /var/lib/apt/lists/* && pip install '.[spark]'; \
    fi
RUN pip install . \
 && useradd --system --uid 1000 --home-dir /var/lib/minikafka --create-home minikafka \
 && mkdir -p /var/lib/minikafka/data && chown -R minikafka /var/lib/minikafka
USER minikafka
VOLUME ["/var/lib/minikafka/data"]
EXPOSE 19092 29092 39092 9404
ENTRYPOINT ["minikafka"]
CMD ["broker", "--config", "/etc/minikafka/server.properties"]
