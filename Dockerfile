# wiscat node image: the provider and the harvester run from it as separate services.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src

COPY pyproject.toml README.md LICENSE ./
COPY requirements ./requirements
COPY shared ./shared
COPY services ./services
COPY migrations ./migrations
# A package install, pinned by the lock file: the migrations and SQL files are package data.
# A fixed uid, so that a file mounted into the container (the registry's private key, readable by
# its owner only) can be given to this user on the host: chown 10001 node.pem. /app is its home,
# and the embedded PostgreSQL's data folder (/app/var) is its own.
RUN pip install --no-compile -c requirements/node.txt '.[embedded]' \
    && useradd --system --uid 10001 --home-dir /app --create-home wiscat \
    && install -d -o wiscat -g wiscat /app/var
WORKDIR /app
USER wiscat

EXPOSE 8080 8081
CMD ["wiscat", "run"]
