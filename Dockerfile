# One image for a minikafka broker or the CLI. Nothing secret is baked in: certificates and
# credentials are made at run time into a volume (docker-compose's `secrets` service).
# The base is pinned to Debian bookworm, whose packages include openjdk-17-jre-headless (for the
# Spark profile); newer Debian releases no longer ship Java 17.

# Build stage: a compiler for the record validator (proto/_codec.c); the result is a wheel.
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY proto ./proto
COPY zk ./zk
COPY broker ./broker
COPY controller ./controller
COPY client ./client
COPY spark_jobs ./spark_jobs
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -c "import zipfile,glob,sys; n=zipfile.ZipFile(glob.glob('/wheels/*.whl')[0]).namelist(); \
sys.exit(0 if all(any(m in x for x in n) for m in ('_codec', '_columnar')) else 'a compiled codec is missing from the wheel')" \
 && python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['spark']))" \
    > /spark-requirements.txt

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/minikafka
# WITH_SPARK=1 adds Java and PySpark for the spark_jobs (docker-compose's spark-job service): the
# packages of the wheel's [spark] extra (their list made in the build stage from pyproject.toml), in a
# layer (~1.3 GB) before the wheel's, so a change to the code does not download them again.
ARG WITH_SPARK=0
COPY --from=build /spark-requirements.txt /tmp/
RUN if [ "$WITH_SPARK" = "1" ]; then \
      mkdir -p /usr/share/man/man1 && apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
      && rm -rf /var/lib/apt/lists/* /tmp/hsperfdata_root && pip install -r /tmp/spark-requirements.txt; \
    fi && rm /tmp/spark-requirements.txt
COPY --from=build /wheels /wheels
RUN pip install "$(ls /wheels/*.whl)$([ "$WITH_SPARK" = "1" ] && echo '[spark]')" && rm -rf /wheels \
 && useradd --system --uid 1000 --home-dir /var/lib/minikafka --create-home minikafka \
 && mkdir -p /var/lib/minikafka/data /etc/minikafka/secrets \
 && chown -R minikafka /var/lib/minikafka /etc/minikafka
USER minikafka
VOLUME ["/var/lib/minikafka/data"]
EXPOSE 19092 29092 39092 9404
ENTRYPOINT ["minikafka"]
CMD ["broker", "--config", "/etc/minikafka/server.properties"]
