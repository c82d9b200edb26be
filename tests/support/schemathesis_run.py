"""RELIABILITY F05's Schemathesis run, in a network namespace of its own (test_api_schema):

    unshare --net python -m tests.support.schemathesis_run DATABASE_URL FOLDER

Inside, the only network is the namespace's loopback, brought up here. On it: a real provider
(in this process, on a real PostgreSQL reached through its Unix socket), in a registry network
of one member with the fetch rules of a node's defaults (no private address), a canary on
127.0.0.1 and ::1 at a port the node may fetch from, and Schemathesis, authenticated with the
admin token. ``POST /urls`` fetches the URL it is given: a generated host name's DNS query or a
public address finds no route here, and every hostile URL (tests/support/schemathesis_hooks.py)
names
the canary's port, so a connection to it would show a refused address fetched.

Writes FOLDER/result.json: the namespace's interfaces, Schemathesis's exit status and the
canary's connections; the hooks write each ``POST /urls`` asked and answered to
FOLDER/urls.jsonl.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.support import wis2_rows
from tests.support.netns import interfaces, loopback_up
from tests.support.registry_network import canary, make_network, node_overrides
from tests.support.servers import running_provider
from wiscat.shared.db.pool import connect

EXAMPLES = int(os.environ.get("WISCAT_SCHEMATHESIS_EXAMPLES", "5"))
SEED = os.environ.get("WISCAT_SCHEMATHESIS_SEED", "1")
# the coverage phase (every boundary and wrong type of every parameter) and the stateful one
# take minutes: make fuzz runs them
PHASES = os.environ.get("WISCAT_SCHEMATHESIS_PHASES", "fuzzing")
# POST /urls is asked again on its own, this many times at least: its hostile base URLs are the
# point, and each is refused in milliseconds
URL_EXAMPLES = max(EXAMPLES, 50)
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "oai_pmh_xsd_conformance",  # tests/support/schemathesis_hooks.py
)
ROOT = Path(__file__).parents[2]


def schemathesis(root: str, token: str, selection: tuple[str, ...], examples: int) -> list[str]:
    """The Schemathesis command for the provider at ``root``: the operations ``selection``
    names, ``examples`` an operation."""
    return [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        root + "/openapi.json",
        *selection,
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        PHASES,
        "--max-examples",
        str(examples),
        # "random": Schemathesis draws one, and prints it for a rerun
        *(("--seed", SEED) if SEED != "random" else ()),
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--no-color",
    ]


async def wcmp2_records(database_url: str) -> None:
    """A few WCMP2 records for the collection's routes to serve (one of them deleted, one under
    an id with a "/" and a "%"), as the WIS2 renderer stores them."""
    conn = await connect(database_url)
    try:
        for n in range(4):
            await wis2_rows.store(conn, wis2_rows.rendered(n))
        await wis2_rows.store(conn, wis2_rows.rendered(4), wcmp2_id="urn:wmo:md:de-dwd:a/b%")
        await wis2_rows.delete(conn, wis2_rows.rendered(3).wcmp2_id)
    finally:
        await conn.close()


async def main(database_url: str, folder: Path) -> None:
    loopback_up()
    await wcmp2_records(database_url)
    result: dict[str, object] = {"interfaces": interfaces()}
    net = make_network(folder, 1)
    async with canary() as listening:
        overrides = node_overrides(
            net,
            0,
            allow_private_fetch=False,  # a node's default: the refusals S01 to S08 test
            registry_fetch_ports=(80, 443, 8080, 8443, listening.port),
            registry_rate_limit_per_minute=1000,  # the most a node allows
            wis2_records=True,
        )
        async with running_provider(database_url, **overrides) as provider:
            token = provider.settings.admin_token.get_secret_value()
            env = {
                **os.environ,
                "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                "WISCAT_F05_CANARY_PORT": str(listening.port),
                "WISCAT_F05_URLS": str(folder / "urls.jsonl"),
            }
            statuses = []
            for selection, examples in (
                (
                    (
                        "--include-path-regex",
                        "^/(oai|urls|collections)$|^/(admin|registry|collections)/",
                    ),
                    EXAMPLES,
                ),
                (("--include-name", "POST /urls"), URL_EXAMPLES),
            ):
                process = await asyncio.create_subprocess_exec(
                    *schemathesis(provider.root, token, selection, examples), cwd=folder, env=env
                )
                statuses.append(await process.wait())
            result["schemathesis"] = statuses
        result["canary_port"] = listening.port
        result["canary_connections"] = listening.connections
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
