"""The admin API as a newcomer meets it: ``/docs`` (Swagger UI) served whole by the node itself,
the bearer token declared in the schema, and a warning while a secret is the example's
placeholder.

A real provider on loopback, on a real PostgreSQL; aiohttp as the browser.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urljoin, urlsplit

import aiohttp
import pytest

from tests.support.servers import provider_settings, running_provider
from wiscat.provider.app import create_app

# every src= or href= of the page, and the url: given to SwaggerUIBundle
REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|\burl\s*:\s*["']([^"']+)["']""")


async def test_docs_page_and_its_assets_come_from_the_node(database_url: str) -> None:
    """/docs and every script, style sheet, icon and schema it names are answered by the node
    itself (on a closed network no CDN is reachable, and the page would be blank)."""
    async with running_provider(database_url) as provider, aiohttp.ClientSession() as http:
        async with http.get(provider.root + "/docs") as page:
            assert page.status == 200
            html = await page.text()
        references = [a or b for a, b in REFERENCE.findall(html)]
        urls = {urljoin(provider.root + "/docs", ref) for ref in references}
        assert {urlsplit(url).netloc for url in urls} == {urlsplit(provider.root).netloc}, urls
        kinds = {}
        for url in sorted(urls):
            async with http.get(url) as asset:
                body = await asset.read()
                assert (asset.status, url) == (200, url)
                assert body, url
                kinds[urlsplit(url).path] = asset.content_type
    assert kinds == {
        "/openapi.json": "application/json",
        "/docs/static/favicon.png": "image/png",
        "/docs/static/swagger-ui-bundle.js": "text/javascript",
        "/docs/static/swagger-ui.css": "text/css",
    }


def test_schema_declares_the_admin_bearer_token() -> None:
    """Every /admin operation asks for the bearer token (Swagger UI's "Authorize"), and no
    other operation does."""
    app = create_app(provider_settings(8080), "postgresql://127.0.0.1:9/unused")
    document = app.openapi()
    assert document["components"]["securitySchemes"] == {
        "adminToken": {
            "type": "http",
            "scheme": "bearer",
            "description": "WISCAT_ADMIN_TOKEN, sent as `Authorization: Bearer <token>`",
        }
    }
    secured = {
        f"{method.upper()} {path}": operation.get("security")
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }
    admin = {name: said for name, said in secured.items() if " /admin/" in name}
    assert len(admin) == 19
    assert set(map(str, admin.values())) == {str([{"adminToken": []}])}
    assert [name for name, said in secured.items() if said and name not in admin] == []


TAGS = ["OAI-PMH", "admin", "registry", "WIS monitoring", "WIS2 records", "dashboard", "health"]


def test_every_operation_is_under_a_tag_with_a_summary_of_its_own() -> None:
    """/docs listed every endpoint under "default", summed up by its handler's name ("Oai
    Endpoint", "Healthz"): each now sits under one of the tags, each tag described, and its
    summary is written, not made from the name."""
    app = create_app(provider_settings(8080), "postgresql://127.0.0.1:9/unused")
    document = app.openapi()
    assert [tag["name"] for tag in document["tags"]] == TAGS
    assert all(tag["description"] for tag in document["tags"])
    operations = [
        (f"{method.upper()} {path}", operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]
    untagged = [name for name, operation in operations if len(operation.get("tags", [])) != 1]
    assert untagged == []
    assert [name for name, operation in operations if operation["tags"][0] not in TAGS] == []
    # FastAPI makes a missing summary of the handler's name, every word capitalised ("Oai
    # Endpoint"); a written one is a phrase ("Add a link")
    named = [name for name, operation in operations if operation["summary"].istitle()]
    assert named == []
    by_tag = {tag: [n for n, o in operations if o["tags"] == [tag]] for tag in TAGS}
    assert all(by_tag.values())  # no tag without an operation
    assert by_tag["OAI-PMH"] == ["GET /oai", "POST /oai", "GET /oai/changes"]
    assert by_tag["health"] == ["GET /healthz", "GET /readyz", "GET /metrics"]
    assert all(name.startswith("GET /collections") for name in by_tag["WIS2 records"])
    assert all(
        name.startswith(
            ("GET /admin/", "PUT /admin/", "POST /admin/", "PATCH /admin/", "DELETE /admin/")
        )
        for name in by_tag["admin"]
    )


def test_every_admin_json_answer_has_its_model() -> None:
    """Each success of an /admin route is documented with the model of its body (a named
    schema, not ``{}``); the bytes of a quarantined record are the one answer that is no JSON."""
    app = create_app(provider_settings(8080), "postgresql://127.0.0.1:9/unused")
    document = app.openapi()
    models: dict[str, object] = {}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if not path.startswith("/admin/"):
                continue
            for status, answer in operation["responses"].items():
                if status.startswith("2"):
                    for media, content in answer.get("content", {}).items():
                        schema = content.get("schema", {})
                        named = schema.get("$ref") or schema.get("items", {}).get("$ref")
                        where = f"{method.upper()} {path} {status} {media}"
                        models[where] = named and named.rsplit("/", 1)[-1] + (
                            "[]" if "items" in schema else ""
                        )
    assert models == {
        "PUT /admin/records/{identifier} 200 application/json": "RecordAnswer",
        "PUT /admin/records/{identifier} 201 application/json": "RecordAnswer",
        "DELETE /admin/records/{identifier} 200 application/json": "RecordAnswer",
        "GET /admin/links 200 application/json": "LinkAnswer[]",
        "GET /admin/links/{name} 200 application/json": "LinkShown",
        "GET /admin/links/{name}/refused 200 application/json": "RefusedAnswer[]",
        "POST /admin/links 201 application/json": "LinkAnswer",
        "PATCH /admin/links/{name} 200 application/json": "LinkChanged",
        "DELETE /admin/links/{name} 200 application/json": "Removed",
        "POST /admin/links/{name}/harvest 202 application/json": "HarvestRequested",
        "GET /admin/runs 200 application/json": "RunAnswer[]",
        "GET /admin/wis2/invalid 200 application/json": "WCMP2InvalidAnswer[]",
        "GET /admin/quarantine 200 application/json": "QuarantineAnswer[]",
        "GET /admin/quarantine/{quarantine_id} 200 application/octet-stream": None,
        "GET /admin/checks 200 application/json": "CheckListed[]",
        "PUT /admin/checks/{name} 200 application/json": "CheckAnswer",
        "DELETE /admin/checks/{name} 200 application/json": "Removed",
        "POST /admin/checks/{name}/run 202 application/json": "CheckRequested",
        "GET /admin/check-reports 200 application/json": "ReportAnswer[]",
        "GET /admin/check-reports/{report_id} 200 application/json": "ReportAnswer",
    }


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"admin_token": "change-me"}, ["WISCAT_ADMIN_TOKEN"]),
        ({"token_secret": "change-me-too"}, ["WISCAT_TOKEN_SECRET"]),
        ({}, []),
    ],
)
async def test_placeholder_secrets_are_warned_about_at_start(
    database_url: str,
    caplog: pytest.LogCaptureFixture,
    overrides: dict[str, str],
    named: list[str],
) -> None:
    """A provider started with .env.example's placeholder for a secret says so, once, at start,
    without the secret's value; a node with its own secrets says nothing."""
    caplog.set_level(logging.WARNING, logger="wiscat.provider")
    async with running_provider(database_url, **overrides):
        pass
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "wiscat.provider" and r.levelno == logging.WARNING
    ]
    assert warnings == [
        f"{name} is the placeholder of .env.example: set a long random one "
        "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        for name in named
    ]
