# wiscat node image: the provider and the harvester run from it as separate services, and its
# default command runs a whole node (embedded PostgreSQL in /var/lib/wiscat).
#
# PYTHON_IMAGE: any Python 3.11 image with pip and venv. On a host without a container registry,
# deploy/containers/base-images.sh builds one from Debian's packages (docs/deploy.md).
ARG PYTHON_IMAGE=python:3.11-slim

# The build stage: a virtual environment with wiscat installed in it, pinned by the lock file (a
# package install: the migrations and SQL files are package data). Every dependency comes as a
# wheel, so no compiler.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY requirements ./requirements
COPY shared ./shared
COPY services ./services
COPY migrations ./migrations
RUN python3 -m venv /opt/wiscat \
    && /opt/wiscat/bin/pip install --no-compile -c requirements/node.txt '.[embedded]'

# The final stage: the base image and the virtual environment, no source tree, no build tools.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/wiscat/bin:$PATH \
    WISCAT_DATA_DIR=/var/lib/wiscat
COPY --from=build /opt/wiscat /opt/wiscat
# A fixed uid, so that a file mounted into the container (the registry's private key, readable by
# its owner only) can be given to this user on the host: chown 10001 node.pem. Its home is the
# data folder of `wiscat run` (the embedded PostgreSQL), which it must be able to write.
RUN useradd --uid 10001 --home-dir /var/lib/wiscat --shell /usr/sbin/nologin wiscat \
    && install -d -o wiscat -g wiscat -m 0700 /var/lib/wiscat
WORKDIR /var/lib/wiscat
USER wiscat

EXPOSE 8080 8081
CMD ["wiscat", "run"]
