"""Where the provider serves the WCMP2 records: an OGC API - Records collection beside ``/oai``.

The collection is ``{site}/collections/wis2-discovery-metadata``, ``{site}`` the provider's
``WISCAT_BASE_URL`` without its ``/oai``; a record is at ``.../items/{id}``, each of its
revisions at ``.../items/{id}/revisions/{revision}`` (the URL a notification names). An id is
one path segment, percent-encoded (:func:`item_url`); :func:`path_segment` reads it back.
"""

from __future__ import annotations

from urllib.parse import quote, unquote_to_bytes, urlsplit, urlunsplit

COLLECTION_ID = "wis2-discovery-metadata"
COLLECTIONS_PATH = "/collections"
COLLECTION_PATH = f"{COLLECTIONS_PATH}/{COLLECTION_ID}"
ITEMS_PATH = f"{COLLECTION_PATH}/items"


def site_root(base_url: str) -> str:
    """The root the provider's routes hang from, given its ``/oai`` URL (``WISCAT_BASE_URL``):
    the URL without its last path segment (``/oai``, or the name a proxy gives it), no ``/``
    at the end."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/").rpartition("/")[0]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def collection_url(base_url: str) -> str:
    """The collection's URL, given the provider's ``/oai`` URL (``WISCAT_BASE_URL``)."""
    return site_root(base_url) + COLLECTION_PATH


def segment(text: str) -> str:
    """``text`` as one path segment: every character but the unreserved ones and ``:``
    percent-encoded (UTF-8), ``/`` and ``%`` included."""
    return quote(text, safe=":")


def path_segment(raw: str) -> str | None:
    """The text of one raw (percent-encoded) path segment; None if it is no UTF-8."""
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None


def item_url(base: str, wcmp2_id: str, revision: str | None = None) -> str:
    """The URL of the record ``wcmp2_id`` in the collection at ``base`` (:func:`collection_url`):
    its current form, or the one ``revision`` names."""
    url = f"{base.rstrip('/')}/items/{segment(wcmp2_id)}"
    return url if revision is None else f"{url}/revisions/{segment(revision)}"
