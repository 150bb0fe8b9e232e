# syntax=docker/dockerfile:1
# One image for the operator (`llmscale run`, the default command) and the mock GPU engine
# (`llmscale engine`, which the operator starts for spec.engine.type=mock).
#   docker build -t llmscale:dev .
# The base is pinned by tag (Python 3.11, Debian 12); release builds pin it by digest too
# (python:3.11-slim-bookworm@sha256:...) in both FROM lines.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# requirements/image.txt pins every runtime dependency, with hashes (`make requirements`): the
# image gets exactly those files, whatever the index holds on the day it is built.
COPY requirements/image.txt ./requirements/image.txt
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY operator ./operator
# Everything (wheels compiled to .pyc) lands in one venv that the final stage copies; pip itself
# is removed from it, so the final stage carries no build or install tooling of ours. The pinned
# dependencies go in first (hash-checked); llmscale itself adds none (--no-deps), and `pip check`
# fails the build if the pins no longer satisfy pyproject.toml.
RUN python -m venv /opt/llmscale \
 && /opt/llmscale/bin/pip install --upgrade pip==25.3 \
 && /opt/llmscale/bin/pip install --require-hashes --no-deps -r requirements/image.txt \
 && /opt/llmscale/bin/pip install --no-deps . \
 && /opt/llmscale/bin/pip check \
 && /opt/llmscale/bin/pip uninstall --yes pip

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="llmscale" \
      org.opencontainers.image.description="Kubernetes operator that scales LLM inference on leading signals, and its mock GPU engine" \
      org.opencontainers.image.source="https://github.com/llmscale/llmscale" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric non-root user (65532, as distroless "nonroot") so that Kubernetes can check
# runAsNonRoot without a user database lookup.
RUN groupadd --system --gid 65532 llmscale \
 && useradd --system --uid 65532 --gid llmscale --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin llmscale
COPY --from=build /opt/llmscale /opt/llmscale
# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only in the pod. No matplotlib: plotting is
# the `plot` extra (simulate --plot, demo), which the operator never needs.
ENV PATH="/opt/llmscale/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# 8080: the operator's /metrics, /healthz, /readyz. 8000: the mock engine's OpenAI API and /metrics.
EXPOSE 8080 8000
# Kubernetes probes the operator (/healthz, /readyz) and the engine (/health); Docker's
# HEALTHCHECK is ignored by Kubernetes, so none is declared.
HEALTHCHECK NONE
ENTRYPOINT ["llmscale"]
CMD ["run"]
