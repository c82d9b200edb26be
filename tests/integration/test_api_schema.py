"""RELIABILITY F05: Schemathesis against the OAI-PMH endpoint, the admin API, the registry and the
WCMP2 records collection (/collections, a few records stored, one deleted), as
the provider's own OpenAPI schema (``/openapi.json``) describes them.

A real provider on loopback, on a real PostgreSQL, in a registry network of one member (so the
registry's routes answer, not 404), authenticated with the admin token. Schemathesis generates
valid and invalid requests from the schema and checks every answer: no 5xx, and a status code,
content type and body the schema documents for it; every 200 of ``/oai`` validates against
the official OAI-PMH.xsd besides (tests/support/schemathesis_hooks.py), since generated arguments
are the
hostile input P02 lists. ``make test`` runs the fuzzing phase, 5
examples an operation, from seed 1; ``make fuzz`` every phase (``WISCAT_SCHEMATHESIS_PHASES``:
coverage, fuzzing, stateful), 200 examples an operation (``WISCAT_SCHEMATHESIS_EXAMPLES``), from
a random seed (``WISCAT_SCHEMATHESIS_SEED=random``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.netns import isolated, through_unix_socket
from tests.support.registry_network import S02_HOSTS
from tests.support.schemathesis_hooks import HOSTILE_SCHEMES
from tests.support.servers import provider_settings
from wiscat.provider.app import create_app

ROOT = Path(__file__).parents[2]
UNREACHABLE = "the repository cannot be reached from this registry node (its log says why)\n"


async def test_f05_oai_admin_and_registry_answers_conform_to_the_schema(
    database_url: str, tmp_path: Path
) -> None:
    """RELIABILITY F05: 0 HTTP 5xx, every answer's status, content type and body as the schema
    documents them, and every 200 of GET|POST /oai valid against OAI-PMH.xsd, under generated
    valid and invalid requests; and S01 to S08 still hold: POST /urls of generated and hostile
    base URLs accepts none, answers every hostile one 400 with its refusal, and connects to no
    refused address (the canary at their port sees nothing). The run is in a network namespace
    whose only network is its loopback (tests/support/schemathesis_run.py), so no generated URL
    leaves
    the machine."""
    assert through_unix_socket(database_url), (
        "F05 runs its provider in a network namespace of its own, which reaches PostgreSQL "
        f"through a Unix socket only; this server is at {urlsplit(database_url).netloc}"
    )
    process = await asyncio.create_subprocess_exec(
        *isolated(
            [sys.executable, "-m", "tests.support.schemathesis_run", database_url, str(tmp_path)]
        ),
        cwd=ROOT,
        # ROOT for the tests package, before what PYTHONPATH already holds (make mutants' copy)
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    report = output.decode("utf-8", "replace")
    print(report[-3000:])
    assert process.returncode == 0, report
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["interfaces"] == ["lo"]
    assert result["schemathesis"] == [0, 0], report
    assert result["canary_connections"] == 0
    posted = [json.loads(line) for line in (tmp_path / "urls.jsonl").read_text().splitlines()]
    assert all(answer["status"] != 200 for answer in posted), posted  # nothing reachable
    hostile = [answer for answer in posted if _refused_form(answer["baseURL"])]
    # those that reach the canary, were the address not refused: at least one was asked
    assert [a for a in hostile if _loopback_at(a["baseURL"], result["canary_port"])], hostile
    for answer in hostile:
        assert answer["status"] == 400, answer
        text = answer["text"]
        assert text == UNREACHABLE or text.startswith(PORTS) or MALFORMED in text, answer
    print(f"POST /urls: {len(posted)} asked, {len(hostile)} of them hostile, all refused")


# what a node answers a URL of another scheme or with credentials, or at a port off its list
MALFORMED = " is malformed: "
PORTS = "this registry node fetches from ports "


# S02's forms that name this machine itself (the canary listens on its 127.0.0.1 and ::1)
LOOPBACK_FORMS = ("localhost", "[::1]", "0.0.0.0", "127.1", "0x7f.1", "0177.0.0.1", "2130706433")


def _loopback_at(url: str, port: int) -> bool:
    return url.startswith("http") and any(
        url.partition("://")[2].startswith(f"{host}:{port}/") for host in LOOPBACK_FORMS
    )


def _refused_form(url: object) -> bool:
    if not isinstance(url, str):
        return False
    host = url.partition("://")[2].partition("/")[0].rpartition("@")[2].rpartition(":")[0]
    return host in S02_HOSTS or url.partition("://")[0] in HOSTILE_SCHEMES


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
    assert len(admin) == 19
    assert [name for name, codes in admin.items() if not {"401", "403"} <= codes] == []
    collection = "/collections/wis2-discovery-metadata"
    records = {name: codes for name, codes in documented.items() if " /collections" in name}
    assert len(records) == 5
    assert [name for name, codes in records.items() if not {"200", "404", "503"} <= codes] == []
    assert "400" in documented[f"GET {collection}/items"]
    assert {"304", "410"} <= documented[f"GET {collection}/items/{{wcmp2_id}}"]
    item = paths[f"{collection}/items/{{wcmp2_id}}/revisions/{{revision}}"]["get"]["responses"]
    assert set(item["200"]["content"]) == {"application/geo+json"}
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
