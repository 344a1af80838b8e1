# syntax=docker/dockerfile:1
# Walras container image.
#
#   make image                                    # hack/build-image.sh: docker, else buildah
#   docker build -t walras:dev .                  # slim CPU image: numpy/scipy backend
#   docker build -t walras:dev-cuda --build-arg VARIANT=cuda .   # adds torch (CUDA wheels)
#
# Dependencies install from locks/image-<variant>.txt (hack/lock.sh; `make verify` checks them
# against pyproject.toml), with hashes, so an image is reproducible from its commit.
#
# The base is Debian's own bookworm-slim with Debian's Python 3.11, not python:3.11-slim: the
# project's machines have no Docker engine and cannot pull from a registry, so hack/build-image.sh
# makes an identical debian:bookworm-slim from Debian's packages (debootstrap) and builds this very
# file with buildah. The python image's interpreter is compiled by the image's maintainers and
# cannot be made here; Debian's is.
#
# Runs as a non-root user (uid 65532) and writes nothing outside /tmp, so it works with
# readOnlyRootFilesystem (the Helm chart mounts an emptyDir on /tmp). The entrypoint is
# `walras operator`; the chart's agent DaemonSet overrides the command with `walras agent`.
# The CUDA variant needs no CUDA base image: the torch wheels bundle the CUDA runtime and the
# node's NVIDIA container runtime supplies the driver.

ARG VARIANT=cpu

# Few steps, and the large ones last: under buildah's vfs store (hack/build-image.sh) every step is
# a full copy of the file system, so each step after the virtualenv's COPY would copy ~400 MB.

# ---- build: a virtualenv in /opt/walras with walras and its dependencies -------------------------
FROM debian:bookworm-slim AS build
# PIP_CERT: a CA bundle for pip, for build machines whose egress re-signs TLS (hack/build-image.sh
# mounts the host's and sets it). Unset, pip trusts its own bundle.
ARG PIP_CERT
ARG VARIANT
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Versions come from the Debian release (bookworm: Python 3.11) and its security updates; pinning
# exact Debian revisions would break the build at the next security update (hence DL3008 off).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/walras
# Dependencies first, exactly as locked (locks/image-cpu.txt or image-cuda.txt, made by
# hack/lock.sh from pyproject.toml): every version and every file's sha256 fixed, wheels only, no
# resolution at build time, so two builds of one commit install the same files. The locks alone are
# copied here, so a change of the sources reuses this layer. No matplotlib (the plots extra).
COPY locks/ /tmp/locks/
RUN /opt/walras/bin/pip install --require-hashes --no-deps --only-binary :all: \
        --requirement "/tmp/locks/image-${VARIANT}.txt"
# The context is pyproject.toml, README.md, src/ and locks/ only (.dockerignore).
COPY . ./
# walras itself, built with the locked setuptools (no build isolation: nothing unlocked is fetched).
RUN /opt/walras/bin/pip install --no-deps --no-build-isolation .

# ---- runtime ---------------------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
ARG VARIANT
LABEL org.opencontainers.image.title="walras" \
      org.opencontainers.image.description="Walras GPU scheduler (price discovery, PS-DSF)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      dev.walras.variant="${VARIANT}"
# metrics, health probes
EXPOSE 8080 8081
ENTRYPOINT ["walras", "operator"]
WORKDIR /tmp
# The interpreter the virtualenv was made with (/usr/bin/python3), nothing else (DL3008: above).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 65532 walras \
    && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin walras
# Everything that might write (HOME, caches, bytecode; matplotlib too, were the plots extra added
# to a derived image) is pointed at /tmp or disabled.
# One OpenBLAS thread: the allocator's BLAS calls are small, and idle OpenBLAS workers busy-waiting
# for more work took the CPU its numpy kernels needed (walras.allocator.pricing.solver's
# one_blas_thread and fairness.market measured it).
ENV PATH=/opt/walras/bin:$PATH \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/.cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OPENBLAS_NUM_THREADS=1
USER 65532:65532
# Owned by root and read-only to the user: the image writes only under /tmp.
COPY --from=build /opt/walras /opt/walras
