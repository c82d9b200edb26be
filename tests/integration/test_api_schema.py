"""RELIABILITY F05: Schemathesis against the OAI-PMH endpoint, the admin API and the registry, as
the provider's own OpenAPI schema (``/openapi.json``) describes them.

A real provider on loopback, on a real PostgreSQL, in a registry network of one member (so the
registry's routes answer, not 404), authenticated with the admin token. Schemathesis generates
valid and invalid requests from the schema and checks every answer: no 5xx, and a status code,
content type and body the schema documents for it; every 200 of ``/oai`` validates against
the official OAI-PMH.xsd besides (tests/schemathesis_hooks.py), since generated arguments are the
hostile input P02 lists. ``make test`` runs the fuzzing phase, 5
examples an operation, from seed 1; ``make fuzz`` every phase (``WISCAT_SCHEMATHESIS_PHASES``:
coverage, fuzzing, stateful), 200 examples an operation (``WISCAT_SCHEMATHESIS_EXAMPLES``), from
a random seed (``WISCAT_SCHEMATHESIS_SEED=random``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.registry_network import make_network, node_overrides
from tests.servers import provider_settings, running_provider
from wiscat.provider.app import create_app

EXAMPLES = int(os.environ.get("WISCAT_SCHEMATHESIS_EXAMPLES", "5"))
SEED = os.environ.get("WISCAT_SCHEMATHESIS_SEED", "1")
# the coverage phase (every boundary and wrong type of every parameter) and the stateful one
# take minutes: make fuzz runs them
PHASES = os.environ.get("WISCAT_SCHEMATHESIS_PHASES", "fuzzing")
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "oai_pmh_xsd_conformance",  # tests/schemathesis_hooks.py
)
ROOT = Path(__file__).parents[2]
# POST /urls fetches the base URL it is given: a generated host name would be looked up in DNS,
# and the tests reach nothing beyond loopback (S01 to S08 test that route's guards).
EXCLUDED = ("POST /urls",)


async def test_f05_oai_admin_and_registry_answers_conform_to_the_schema(
    database_url: str, tmp_path: Path
) -> None:
    """RELIABILITY F05: 0 HTTP 5xx, every answer's status, content type and body as the schema
    documents them, and every 200 of GET|POST /oai valid against OAI-PMH.xsd, under generated
    valid and invalid requests."""
    net = make_network(tmp_path, 1)
    async with running_provider(database_url, **node_overrides(net, 0)) as provider:
        command = [
            str(Path(sys.executable).parent / "schemathesis"),
            "run",
            provider.root + "/openapi.json",
            "--include-path-regex",
            "^/(oai$|(admin|urls|registry)/)",
            *(arg for operation in EXCLUDED for arg in ("--exclude-name", operation)),
            "--header",
            f"Authorization: Bearer {provider.settings.admin_token.get_secret_value()}",
            "--checks",
            ",".join(CHECKS),
            "--phases",
            PHASES,
            "--max-examples",
            str(EXAMPLES),
            # "random": Schemathesis draws one, and prints it for a rerun
            *(("--seed", SEED) if SEED != "random" else ()),
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--no-color",
        ]
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=tmp_path,
            env={
                **os.environ,
                "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
                "PYTHONPATH": str(ROOT),
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
    report = output.decode("utf-8", "replace")
    print(report[-3000:])
    assert process.returncode == 0, report


def test_f05_the_schema_documents_400_where_fastapi_would_say_422() -> None:
    """The app answers a request it cannot validate with 400 (app._validation): the schema says
    so, and documents every admin route's refusal of a missing or wrong token."""
    app = create_app(provider_settings(8080), "postgresql://127.0.0.1:9/unused")
    paths = app.openapi()["paths"]
    documented = {
        f"{method.upper()} {path}": set(operation["responses"])
        for path, operations in paths.items()
        for method, operation in operations.items()
    }
    assert [name for name, codes in documented.items() if "422" in codes] == []
    assert "400" in documented["GET /admin/runs"]
    assert "400" in documented["GET /registry/announce"]
    admin = {name: codes for name, codes in documented.items() if " /admin/" in name}
    assert len(admin) == 16
    assert [name for name, codes in admin.items() if not {"401", "403"} <= codes] == []
    blocks = paths["/registry/blocks"]["get"]["responses"]
    assert set(blocks["200"]["content"]) == {"application/xml"}
    assert set(blocks["404"]["content"]) == {"text/plain"}


def test_f05_the_schema_describes_the_oai_endpoint_by_hand() -> None:
    """RELIABILITY F05: /openapi.json carries the hand-written description of GET|POST /oai (its
    route reads its arguments itself): the seven arguments, optional, and the answers — 200 XML
    for every OAI-PMH answer, errors included (§3.6), 503 text with Retry-After, 413 for a POST
    body over the cap."""
    app = create_app(provider_settings(8080), "postgresql://127.0.0.1:9/unused")
    oai = app.openapi()["paths"]["/oai"]
    arguments = ["verb", "metadataPrefix", "identifier", "set", "from", "until", "resumptionToken"]
    get, post = oai["get"], oai["post"]
    assert [(p["name"], p["in"], p["required"]) for p in get["parameters"]] == [
        (name, "query", False) for name in arguments
    ]
    verb = get["parameters"][0]["schema"]["anyOf"]
    assert verb[0]["enum"] == [
        "Identify",
        "ListMetadataFormats",
        "ListSets",
        "ListIdentifiers",
        "ListRecords",
        "GetRecord",
    ]
    assert verb[1] == {"type": "string"}
    form = post["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]
    assert list(form["properties"]) == arguments
    assert "required" not in form
    assert set(get["responses"]) == {"200", "503"}
    assert set(post["responses"]) == {"200", "503", "413"}
    for operation in (get, post):
        responses = operation["responses"]
        assert set(responses["200"]["content"]) == {"text/xml; charset=utf-8"}
        assert set(responses["503"]["content"]) == {"text/plain"}
        assert responses["503"]["headers"]["Retry-After"]["required"] is True
    assert set(post["responses"]["413"]["content"]) == {"application/json"}
