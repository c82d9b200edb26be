# wiscat node image: the provider and the harvester run from it as separate services.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY migrations ./migrations
RUN pip install --no-compile . \
    && useradd --system --home /app wiscat
USER wiscat

EXPOSE 8080 8081
CMD ["wiscat", "run"]
