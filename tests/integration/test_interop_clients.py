"""Third-party OAI-PMH clients harvest the provider: Sickle, oaipmh-scythe and pyoai.

Each harvests 10,000 generated records with deletions through many resumption pages, over real
HTTP on loopback, and must get exactly the identifiers, datestamps and deleted flags the node holds.
The clients are synchronous, so they run in a worker thread while the server runs in the loop.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

import pytest
from lxml import etree

from tests.support import factories
from tests.support.pg import clone_template, drop_database
from tests.support.servers import RunningProvider, running_provider

OWN = "WIS-GISC-TEST"
RECORDS = 10_000


@pytest.fixture(scope="module")
async def catalogue_provider(
    template_ready: str,
) -> AsyncIterator[tuple[RunningProvider, dict[str, tuple[str, bool]]]]:
    from wiscat.shared.db.pool import create_pool

    url = await clone_template(template_ready)
    pool = await create_pool(url, max_size=4)
    try:
        ids = await factories.load_records(pool, OWN, range(RECORDS))
        await factories.delete(pool, OWN, ids[::97])  # 104 tombstones spread through the list
        expected = await factories.catalogue(pool)
        async with running_provider(url, page_size=250) as running:
            yield running, expected
    finally:
        await pool.close()
        await drop_database(template_ready, url)


Harvest = dict[str, tuple[str, bool]]


def harvest_with_sickle(url: str) -> Harvest:
    from sickle import Sickle

    out: Harvest = {}
    for record in Sickle(url).ListRecords(metadataPrefix="iso19139", ignore_deleted=False):
        header = record.header
        out[header.identifier] = (header.datestamp, header.deleted)
    return out


def harvest_with_scythe(url: str) -> Harvest:
    from oaipmh_scythe import Scythe

    out: Harvest = {}
    with Scythe(url) as scythe:
        for header in scythe.list_identifiers(metadata_prefix="iso19139", ignore_deleted=False):
            out[header.identifier] = (header.datestamp, header.deleted)
    return out


class _EvaluatorWithEvaluate:
    """lxml's XPathEvaluator plus the ``evaluate`` alias that lxml 5 removed and pyoai 2.5.0 (its
    last release) still calls. Only this alias is restored; the rest of pyoai is its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._evaluator = etree.XPathEvaluator(*args, **kwargs)

    def __call__(self, path: str, **variables: Any) -> Any:
        return self._evaluator(path, **variables)

    evaluate = __call__


def _pyoai_compatible_etree() -> types.ModuleType:
    shim = types.ModuleType("lxml.etree")
    shim.__dict__.update(etree.__dict__)
    shim.XPathEvaluator = _EvaluatorWithEvaluate  # type: ignore[attr-defined]
    return shim


def harvest_with_pyoai(url: str) -> Harvest:
    import oaipmh.client
    import oaipmh.metadata
    from oaipmh.client import Client
    from oaipmh.metadata import MetadataRegistry, oai_dc_reader

    oaipmh.client.etree = _pyoai_compatible_etree()  # type: ignore[attr-defined]
    oaipmh.metadata.etree = _pyoai_compatible_etree()  # type: ignore[attr-defined]

    registry = MetadataRegistry()
    registry.registerReader("oai_dc", oai_dc_reader)
    client = Client(url, registry)
    out: Harvest = {}
    for header, metadata, _about in client.listRecords(metadataPrefix="oai_dc"):
        stamp = header.datestamp().replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out[header.identifier()] = (stamp, header.isDeleted())
        assert header.isDeleted() or metadata.getField("identifier") == [header.identifier()]
    return out


@pytest.mark.parametrize(
    "harvest",
    [harvest_with_sickle, harvest_with_scythe, harvest_with_pyoai],
    ids=["sickle", "oaipmh-scythe", "pyoai"],
)
async def test_third_party_client_gets_the_exact_catalogue(
    catalogue_provider: tuple[RunningProvider, Harvest], harvest: object
) -> None:
    provider, expected = catalogue_provider
    got = await asyncio.to_thread(harvest, provider.oai)  # type: ignore[arg-type]
    assert len(expected) == RECORDS
    assert sum(deleted for _, deleted in expected.values()) == len(range(0, RECORDS, 97))
    assert got == expected
