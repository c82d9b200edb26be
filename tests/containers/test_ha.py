"""compose.ha.yaml for real (docs/scaling.md): a primary and its hot standby, two providers
reading from the standby behind the nginx load balancer, two harvesters, started with
podman-compose on the base images built from Debian's packages; then the failover runbook,
done as an operator does it.

Run by ``make test-containers`` after tests/containers/test_containers.py (the image and the
base images are the session's). The tests run in order and share the one project: each step
starts from the state the one before left.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from prometheus_client.parser import text_string_to_metric_families

from tests.containers.engine import (
    FIGURES,
    HaProject,
    http,
    inspect,
    logs,
    podman,
    print_figures,
    wait_healthy,
    wait_http,
)
from wiscat.shared.generator import generate_record, identifier_for

OAI = "{http://www.openarchives.org/OAI/2.0/}"
GISC = "CHARLIE"
CENTRE = "charlie"
OWN_SET = f"WIS-GISC-{GISC}"
RECORDS = 5
PROVIDERS = ("provider1", "provider2")
HARVESTERS = ("harvester1", "harvester2")
DATA = "/var/lib/postgresql/data"


@pytest.fixture(scope="module")
def ha(
    image: str,
    base_images: dict[str, str],
    checkout: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[HaProject]:
    folder = tmp_path_factory.mktemp("ha") / "wiscatha"
    shutil.copytree(checkout, folder)
    project = HaProject(
        name="wiscatha",
        folder=folder,
        gisc=GISC,
        postgres_image=base_images["postgres"],
        lb_image=base_images["nginx"],
    )
    project.remove()
    try:
        yield project
    finally:
        project.remove()
        print_figures()


def oai(ha: HaProject, query: str) -> etree._Element:
    status, body = http(ha.url(f"/oai?{query}"))
    assert status == 200, body
    return etree.fromstring(body)


def pages(ha: HaProject) -> list[list[str]]:
    """The own set's identifiers, page by page, through the load balancer to its end."""
    query = f"verb=ListIdentifiers&metadataPrefix=iso19139&set={OWN_SET}"
    found: list[list[str]] = []
    while True:
        root = oai(ha, query)
        error = root.find(f"{OAI}error")
        if error is not None and error.get("code") == "noRecordsMatch" and not found:
            return []
        assert error is None, etree.tostring(root)
        found.append([str(e.text) for e in root.iter(f"{OAI}identifier")])
        token = root.findtext(f".//{OAI}resumptionToken")
        if not token:
            return found
        query = f"verb=ListIdentifiers&resumptionToken={token}"


def listed(ha: HaProject) -> set[str]:
    return {identifier for page in pages(ha) for identifier in page}


def wait_listed(ha: HaProject, wanted: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (found := listed(ha)) != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"listed {sorted(found)}, not {sorted(wanted)}")
        time.sleep(1)


def get_record_error(ha: HaProject, identifier: str) -> str | None:
    root = oai(ha, f"verb=GetRecord&metadataPrefix=iso19139&identifier={identifier}")
    error = root.find(f"{OAI}error")
    return None if error is None else error.get("code")


def put(ha: HaProject, n: int) -> tuple[int, object]:
    record = generate_record(n, centre=CENTRE)
    return ha.admin("PUT", f"/admin/records/{identifier_for(n, CENTRE)}", record)


def list_requests(ha: HaProject, provider: str) -> float:
    """ListIdentifiers requests the provider answered (its own /metrics, from inside it)."""
    text = podman(
        "exec", ha.container(provider), "python", "-c",
        "import sys, urllib.request;"
        "sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:8080/metrics').read().decode())",
    )  # fmt: skip
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "wiscat_oai_requests_total"
        and sample.labels == {"verb": "ListIdentifiers", "outcome": "ok"}
    )


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def wait_sql(ha: HaProject, service: str, query: str, wanted: list[list[str]]) -> None:
    deadline = time.monotonic() + 60
    while (rows := ha.sql(service, query)) != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"{service}: {query} gave {rows}, not {wanted}")
        time.sleep(1)


def test_the_node_comes_up_with_a_streaming_standby(ha: HaProject) -> None:
    started = time.monotonic()
    ha.up()
    wait_http(ha.url("/oai?verb=Identify"), timeout=60)
    FIGURES["compose.ha.yaml up (primary, standby, migrate, providers, harvesters, lb)"] = (
        f"{time.monotonic() - started:.0f} s"
    )
    for service in (*ha.DATABASES, *ha.SERVICES, "lb"):
        assert inspect(ha.container(service))["State"]["Status"] == "running", service
    replication = "select client_addr, state from pg_stat_replication"
    wait_sql(ha, "primary", replication, [[ha.address("standby"), "streaming"]])
    assert ha.sql("standby", "select pg_is_in_recovery()") == [["t"]]
    assert ha.sql("primary", "select pg_is_in_recovery()") == [["f"]]
    identify = oai(ha, "verb=Identify").find(f"{OAI}Identify")
    assert identify is not None
    assert identify.findtext(f"{OAI}repositoryName") == f"GISC {GISC} on a primary and a standby"
    assert identify.findtext(f"{OAI}baseURL") == ha.url("/oai")


def test_records_put_on_the_primary_are_listed_from_the_standby(ha: HaProject) -> None:
    for n in range(RECORDS):
        status, answer = put(ha, n)
        assert status == 201, answer
    wait_listed(ha, {identifier_for(n, CENTRE) for n in range(RECORDS)})
    # The providers' reads are the standby's: they hold connections to it, and while it
    # replays nothing a record just written on the primary is not found through either.
    clients = "select distinct client_addr from pg_stat_activity where datname = 'wiscat'"
    readers = {row[0] for row in ha.sql("standby", clients)}
    assert {ha.address(p) for p in PROVIDERS} <= readers, readers
    late = identifier_for(RECORDS, CENTRE)
    ha.sql("standby", "select pg_wal_replay_pause()")
    try:
        status, answer = put(ha, RECORDS)
        assert status == 201, answer
        # the load balancer takes turns: both providers asked
        assert [get_record_error(ha, late) for _ in PROVIDERS] == ["idDoesNotExist"] * 2
    finally:
        ha.sql("standby", "select pg_wal_replay_resume()")
    deadline = time.monotonic() + 30
    while get_record_error(ha, late) is not None:
        assert time.monotonic() < deadline, f"{late} not found once the standby replays"
        time.sleep(0.5)
    wait_listed(ha, {identifier_for(n, CENTRE) for n in range(RECORDS + 1)})


def test_a_list_goes_on_page_by_page_on_either_provider(ha: HaProject) -> None:
    before = {p: list_requests(ha, p) for p in PROVIDERS}
    found = pages(ha)
    served = {p: list_requests(ha, p) - before[p] for p in PROVIDERS}
    identifiers = [identifier for page in found for identifier in page]
    assert sorted(identifiers) == sorted(identifier_for(n, CENTRE) for n in range(RECORDS + 1))
    assert [len(page) for page in found] == [3, 3]  # WISCAT_PAGE_SIZE=3
    assert sum(served.values()) == len(found)
    assert all(served.values()), f"one provider served every page: {served}\n" + logs(
        ha.container("lb")
    )


def runs_of(ha: HaProject, link: str) -> list[dict[str, Any]]:
    status, runs = ha.admin("GET", f"/admin/runs?link={link}&limit=10")
    assert status == 200, runs
    return list(runs)


def wait_run(ha: HaProject, link: str, since: float = 0) -> dict[str, Any]:
    """The link's latest finished run begun after ``since`` (seconds since the epoch)."""
    deadline = time.monotonic() + 60
    while True:
        runs = runs_of(ha, link)  # newest first
        done = [r for r in runs if r["finished_at"] and epoch(r["started_at"]) > since]
        if done:
            return done[0]
        if time.monotonic() > deadline:
            outputs = "\n".join(logs(ha.container(h)) for h in HARVESTERS)
            raise AssertionError(f"no run of {link} begun after {since}: {runs}\n{outputs}")
        time.sleep(1)


def test_failover_runbook(ha: HaProject) -> None:
    """docs/scaling.md, "Failover runbook": the primary stopped, the standby promoted with
    pg_ctl, and nothing restarted: the providers and harvesters write to the promoted server."""
    # The only peer in reach is the node itself, through its load balancer: a run of this link
    # stops at that check (LinkToItself), and a harvester records it, as any run.
    link = {"name": "itself", "url": "http://lb:8080/oai", "set": OWN_SET, "into": "WIS-GISC-X"}
    status, answer = ha.admin("POST", "/admin/links", link)
    assert status == 201, answer
    before = wait_run(ha, "itself")
    running = {s: inspect(ha.container(s))["State"] for s in (*PROVIDERS, *HARVESTERS)}
    stopped = time.monotonic()
    # 1. make sure it stays down
    ha.compose("stop", "primary")
    assert inspect(ha.container("primary"))["State"]["Status"] == "exited"
    assert put(ha, RECORDS + 1) == (503, {"detail": "the database is unavailable; retry later"})
    # 2. promote the standby
    ha.compose("exec", "-T", "--user", "postgres", "standby", "pg_ctl", "promote", "-D", DATA)
    wait_sql(ha, "standby", "select pg_is_in_recovery()", [["f"]])
    promoted = float(ha.sql("standby", "select extract(epoch from now())")[0][0])
    # 3. restart nothing: a record put now is written and listed
    deadline = time.monotonic() + 60
    while (put_answer := put(ha, RECORDS + 1))[0] != 201:
        assert time.monotonic() < deadline, f"no write after the promotion: {put_answer}"
        time.sleep(1)
    FIGURES["primary stopped until a record is written on the promoted standby"] = (
        f"{time.monotonic() - stopped:.0f} s"
    )
    wait_listed(ha, {identifier_for(n, CENTRE) for n in range(RECORDS + 2)})
    # a run begun since (the one asked for now, or a scheduled retry) is recorded there by a
    # harvester
    status, answer = ha.admin("POST", "/admin/links/itself/harvest")
    assert status == 202, answer
    after = wait_run(ha, "itself", since=promoted)
    assert after["id"] > before["id"], (before, after)
    assert (after["status"], after["error_kind"]) == ("failed", "LinkToItself"), after
    host = after["worker"].partition(":")[0]
    assert any(inspect(ha.container(h))["Id"].startswith(host) for h in HARVESTERS), after
    for service in (*PROVIDERS, *HARVESTERS):
        wait_healthy(ha.container(service))
        now = inspect(ha.container(service))["State"]
        assert (now["Pid"], now["StartedAt"]) == (
            running[service]["Pid"],
            running[service]["StartedAt"],
        ), f"{service} was restarted"


#: runbook step 5 in the old primary's volume: emptied, then a copy of the promoted server
COPY_PROMOTED = (
    'rm -rf "$PGDATA"/* && PGPASSWORD="$POSTGRES_PASSWORD" '
    'pg_basebackup -h standby -U wiscat -D "$PGDATA" -R -X stream -c fast'
)


def test_the_old_primary_becomes_a_standby_of_the_promoted_one(ha: HaProject) -> None:
    """docs/scaling.md, runbook step 5 with compose: the old primary's data folder made a copy
    of the promoted server (``run`` with the service's volume), then started: it streams from
    the promoted server, and the services, which try it first, still write to the other."""
    started = time.monotonic()
    ha.compose(
        "run", "--rm", "--no-deps", "-T", "--user", "postgres", "--entrypoint", "bash",
        "primary", "-c", COPY_PROMOTED,
    )  # fmt: skip
    ha.compose("start", "primary")
    wait_healthy(ha.container("primary"))
    replication = "select client_addr, state from pg_stat_replication"
    wait_sql(ha, "standby", replication, [[ha.address("primary"), "streaming"]])
    FIGURES["old primary copied from the promoted one until it streams"] = (
        f"{time.monotonic() - started:.0f} s"
    )
    assert ha.sql("primary", "select pg_is_in_recovery()") == [["t"]]
    status, answer = put(ha, RECORDS + 2)
    assert status == 201, answer
    every = {identifier_for(n, CENTRE) for n in range(RECORDS + 3)}
    wait_listed(ha, every)
    count = f"select count(*) from records where identifier like '%::{CENTRE}.%'"
    wait_sql(ha, "primary", count, [[str(len(every))]])
