# syntax=docker/dockerfile:1
# The dralet DRA driver image: `dralet run` is the entrypoint; the Helm chart in
# deploy/chart/dralet passes the flags (driver, sockets, CDI dir, ports).
#
#   docker build -t dralet:0.1.0 .
#
# Base images are pinned by version; never a floating tag.

ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# ---- build: dralet and every dependency, as wheels and then installed under
# /home/builder/install (a root of its own), all as an unprivileged user
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN useradd --uid 10001 --create-home builder
USER 10001:10001
WORKDIR /home/builder/src
COPY --chown=10001:10001 pyproject.toml README.md ./
COPY --chown=10001:10001 src ./src
# The nvidia extra (nvidia-ml-py, pure Python) is always in: one image serves every driver.
# Bytecode is compiled with hashes of the sources, not their mtimes (the install time),
# and with the paths it will have, so two builds of the same sources give the same files.
RUN python -m pip wheel --wheel-dir /home/builder/wheels ".[nvidia]" \
    && python -m pip install --no-index --no-compile --no-warn-script-location \
       --root=/home/builder/install \
       --find-links=/home/builder/wheels "dralet[nvidia]" \
    && python -m compileall -q -j 0 -s /home/builder/install \
       --invalidation-mode unchecked-hash /home/builder/install \
    && purelib=$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
    && PYTHONPATH=/home/builder/install$purelib \
       /home/builder/install/usr/local/bin/dralet --help >/dev/null

# ---- runtime: the installed files only (one layer: no wheels, compilers or pip cache),
# copied rather than bind-mounted, so a layer cache keys it on their content
FROM ${PYTHON_IMAGE}
# The package's version (pyproject.toml), as the chart's appVersion; tests/docs compare them.
ARG DRALET_VERSION=0.1.0
LABEL org.opencontainers.image.title="dralet" \
      org.opencontainers.image.version=$DRALET_VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build --chown=0:0 /home/builder/install/ /
# Root, on purpose, and only for this reason: the driver creates its sockets and CDI
# specs in the kubelet's host directories (/var/lib/kubelet/plugins_registry,
# /var/lib/kubelet/plugins/<driver>, /var/run/cdi), which are owned by root with
# modes 0750/0755, and the kubelet dials those sockets as root. The DaemonSet
# drops every capability, forbids privilege escalation and mounts the root
# filesystem read-only, so uid 0 here can write those directories and nothing else.
# Everything that does not need it (the build above) runs unprivileged.
USER 0:0
EXPOSE 51515/tcp 9400/tcp
ENTRYPOINT ["dralet", "run"]
