# wiscat node image: the provider and the harvester run from it as separate services.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY migrations ./migrations
# Editable, so the code runs from /app: shared/db/migrate.py finds migrations/ next to its package
# (a plain install would import it from site-packages, where no migrations/ is installed).
# A fixed uid, so that a file mounted into the container (the registry's private key, readable by
# its owner only) can be given to this user on the host: chown 10001 node.pem.
RUN pip install --no-compile -e . \
    && useradd --system --uid 10001 --home /app wiscat
USER wiscat

EXPOSE 8080 8081
CMD ["wiscat", "run"]
