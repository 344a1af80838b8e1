# syntax=docker/dockerfile:1
# Walras container image.
#
#   docker build -t walras:dev .                      # slim CPU image: numpy/scipy backend
#   docker build -t walras:dev-cuda --build-arg VARIANT=cuda .   # adds torch (CUDA wheels)
#
# Runs as a non-root user and writes nothing outside /tmp, so it works with
# readOnlyRootFilesystem (the Helm chart mounts an emptyDir on /tmp). The entrypoint is
# `walras operator`; the chart's agent DaemonSet overrides the command with `walras agent`.
# The CUDA variant needs no CUDA base image: the torch wheels bundle the CUDA runtime and the
# node's NVIDIA container runtime supplies the driver.

ARG PYTHON_VERSION=3.11
ARG VARIANT=cpu

# ---- build: a virtualenv in /opt/walras with walras and its dependencies -------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/walras
# Dependencies first, from pyproject alone, so that a source change reuses this layer.
COPY pyproject.toml README.md ./
RUN mkdir -p src/walras && touch src/walras/__init__.py \
    && /opt/walras/bin/pip install . \
    && /opt/walras/bin/pip uninstall --yes walras
COPY src ./src

FROM build AS build-cpu
RUN /opt/walras/bin/pip install --no-deps .

FROM build AS build-cuda
RUN /opt/walras/bin/pip install '.[torch]'

# build-cpu or build-cuda is a stage of this file, not an image to pin (hence DL3006 off).
# hadolint ignore=DL3006
FROM build-${VARIANT} AS venv

# ---- runtime ---------------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ARG VARIANT
LABEL org.opencontainers.image.title="walras" \
      org.opencontainers.image.description="Walras GPU scheduler (price discovery, PS-DSF)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      dev.walras.variant="${VARIANT}"
RUN groupadd --system --gid 65532 walras \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin walras
COPY --from=venv /opt/walras /opt/walras
# Everything that might write (HOME, matplotlib, caches, bytecode) is pointed at /tmp or disabled.
ENV PATH=/opt/walras/bin:$PATH \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/.cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
# metrics, health probes
EXPOSE 8080 8081
ENTRYPOINT ["walras", "operator"]
