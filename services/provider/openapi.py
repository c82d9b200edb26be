"""What the OpenAPI schema (``/openapi.json``) says the admin API and the registry answer.

Every status a route can answer is documented with its content type, so that a client (and
Schemathesis, RELIABILITY F05) can hold the answers to the schema: an admin error is JSON with a
``detail``, a registry error is plain text, the registry's lists are XML. FastAPI documents a
request it cannot validate as 422; this app answers it 400
(:func:`wiscat.provider.app.bad_request`), and :func:`document_bad_requests` makes the schema say
so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

Responses = dict[int | str, dict[str, Any]]

_DETAIL = {
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {"type": "string"},
        # a request FastAPI could not validate: what is wrong, and where
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"loc": {"type": "array"}, "msg": {"type": "string"}},
            },
        },
    },
}


class XMLResponse(Response):
    """An XML document (the registry's lists and blocks); for the schema's sake."""

    media_type = "application/xml"


def json_error(description: str) -> dict[str, Any]:
    """A documented answer whose body is ``{"detail": "..."}``."""
    return {"description": description, "content": {"application/json": {"schema": _DETAIL}}}


def text(description: str) -> dict[str, Any]:
    """A documented answer whose body is a line of plain text."""
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def body(media_type: str, description: str) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads its body itself (FastAPI cannot see it)."""
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {media_type: {"schema": {"type": "string"}}},
        }
    }


def form(fields: dict[str, str], required: list[str]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads a form itself; ``fields``: name -> description."""
    properties = {name: {"type": "string", "description": said} for name, said in fields.items()}
    schema = {"type": "object", "properties": properties, "required": required}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/x-www-form-urlencoded": {"schema": schema}},
        }
    }


#: What every admin route may answer besides its own statuses.
ADMIN: Responses = {
    400: json_error("bad request: a parameter or the body is not valid, or refused (the reason)"),
    401: json_error("missing or wrong bearer token"),
    403: json_error("the admin API is disabled (no WISCAT_ADMIN_TOKEN)"),
    503: json_error("the database is unavailable; retry later"),
}

#: The registry's answer when this node is in no registry network.
NO_REGISTRY = text("this node is not in a registry network (no WISCAT_REGISTRY_KEY_FILE)")


def document_bad_requests(app: FastAPI) -> None:
    """Make ``app``'s schema document the 400 this app answers where FastAPI says 422."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def schema() -> dict[str, Any]:
        document = generate()  # FastAPI's, made once and kept: rewritten in place, once
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                invalid = responses.pop("422", None)
                if invalid is None:
                    continue
                bad = responses.setdefault("400", json_error("bad request"))
                bad.setdefault("content", {})["application/json"] = {"schema": _DETAIL}
        return document

    app.openapi = schema  # type: ignore[method-assign]


#: The admin API's security scheme: what ``admin.require_admin`` checks, for the schema's sake
#: (Swagger UI's "Authorize" button); the check itself is ``require_admin``'s alone.
BEARER = "adminToken"


def document_bearer(app: FastAPI) -> None:
    """Make ``app``'s schema declare the bearer token that every ``/admin`` route asks for."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def schema() -> dict[str, Any]:
        document = generate()
        schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[BEARER] = {
            "type": "http",
            "scheme": "bearer",
            "description": "WISCAT_ADMIN_TOKEN, sent as `Authorization: Bearer <token>`",
        }
        for path, operations in document.get("paths", {}).items():
            if path.startswith("/admin/"):
                for operation in operations.values():
                    operation["security"] = [{BEARER: []}]
        return document

    app.openapi = schema  # type: ignore[method-assign]


# -- the OAI-PMH endpoint (GET|POST /oai), described by hand: the route reads its arguments
# itself (wiscat.provider.responses.request_pairs), so FastAPI cannot see them.

#: The six verbs (OAI-PMH 2.0 §4); any other string is a badVerb answer, not a refusal.
OAI_VERBS = (
    "Identify",
    "ListMetadataFormats",
    "ListSets",
    "ListIdentifiers",
    "ListRecords",
    "GetRecord",
)

_OAI_ARGUMENTS = {
    "verb": "the request: one of the six verbs (any other string is answered badVerb)",
    "metadataPrefix": "the format of the records (ListMetadataFormats lists them)",
    "identifier": "a record's OAI identifier (GetRecord; ListMetadataFormats optionally)",
    "set": "a setSpec to list (ListIdentifiers, ListRecords)",
    "from": "the earliest datestamp to list, YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ",
    "until": "the latest datestamp to list, YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ",
    "resumptionToken": "continues a list from the token of its previous page (exclusive)",
}


def _oai_argument(name: str) -> dict[str, Any]:
    if name == "verb":  # the six verbs, and the strings a client may send instead
        return {"anyOf": [{"type": "string", "enum": list(OAI_VERBS)}, {"type": "string"}]}
    return {"type": "string"}


#: ``openapi_extra`` of ``GET /oai``: the arguments as query parameters (§3.1.1.1). Each is
#: optional here: which ones a verb requires, allows or forbids is the protocol's, and a wrong
#: set of them is answered badArgument in an OAI-PMH document.
OAI_GET: dict[str, Any] = {
    "parameters": [
        {
            "name": name,
            "in": "query",
            "required": False,
            "description": said,
            "schema": _oai_argument(name),
        }
        for name, said in _OAI_ARGUMENTS.items()
    ]
}

#: ``openapi_extra`` of ``POST /oai``: the same arguments as a form body (§3.1.1.2).
OAI_POST: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "properties": {
                        name: {**_oai_argument(name), "description": said}
                        for name, said in _OAI_ARGUMENTS.items()
                    },
                }
            }
        },
    }
}

_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before asking again",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    }
}

#: What ``GET|POST /oai`` answers: every answer of the protocol, errors included, is an OAI-PMH
#: document with HTTP 200 (§3.6); overload and an unavailable database a 503 with Retry-After
#: (§3.1.2.2 allows it for flow control).
OAI: Responses = {
    200: {
        "description": "an OAI-PMH response (OAI-PMH.xsd): the answer, or its error codes",
        "content": {"text/xml; charset=utf-8": {"schema": {"type": "string"}}},
    },
    503: {
        **text("too many list requests at once, or the database is unavailable; retry later"),
        "headers": _RETRY_AFTER,
    },
}

#: ``POST /oai`` besides: a body larger than the cap (RELIABILITY S11).
OAI_TOO_LARGE: Responses = {
    413: json_error("the request body is larger than an OAI-PMH request may be"),
}
