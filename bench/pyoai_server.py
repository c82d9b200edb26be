"""The reference provider: pyoai's OAI-PMH server over the same records, kept in sqlite.

``python -m bench.pyoai_server SQLITE_FILE PORT PAGE_SIZE``. The repository object implements
what pyoai's ``BatchingServer`` asks for; the iso19139 writer appends each stored record, parsed
with lxml, to the element pyoai gives it. Served by wsgiref, one request at a time, as pyoai's
own examples do.
"""

from __future__ import annotations

import cgi
import sqlite3
import sys
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, parse_qsl
from wsgiref.simple_server import WSGIRequestHandler, make_server

from lxml import etree
from oaipmh import common, metadata, server  # type: ignore[import-untyped]


class Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class Repository:
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path)

    def identify(self) -> Any:
        return common.Identify(
            repositoryName="pyoai reference",
            baseURL="http://127.0.0.1/oai",
            protocolVersion="2.0",
            adminEmails=["bench@example.org"],
            earliestDatestamp=datetime(2000, 1, 1),
            deletedRecord="transient",
            granularity="YYYY-MM-DDThh:mm:ssZ",
            compression=["identity"],
        )

    def listMetadataFormats(self, identifier: str | None = None) -> Any:
        return [
            (
                "iso19139",
                "http://www.isotc211.org/2005/gmd/gmd.xsd",
                "http://www.isotc211.org/2005/gmd",
            )
        ]

    def listSets(self, cursor: int = 0, batch_size: int = 10) -> Any:
        return []

    def _rows(self, cursor: int, batch_size: int) -> Any:
        # pyoai's server continues a list by cursor (an offset). The export writes rowids 1..N
        # in list order, so "rowid > cursor" is that offset found through the index: an OFFSET
        # would step over every earlier row, and a million-record list would take hours.
        return self.db.execute(
            "select identifier, datestamp, deleted, xml from records where rowid > ? "
            "order by rowid limit ?",
            (cursor, batch_size),
        )

    def listRecords(
        self,
        metadataPrefix: str,
        set: Any = None,
        from_: Any = None,
        until: Any = None,
        cursor: int = 0,
        batch_size: int = 10,
    ) -> Any:
        out = []
        for identifier, stamp, deleted, xml in self._rows(cursor, batch_size):
            header = common.Header(
                None, identifier, datetime.fromisoformat(stamp), [], bool(deleted)
            )
            out.append((header, None if deleted else common.Metadata(None, {"xml": xml}), None))
        return out

    def listIdentifiers(
        self,
        metadataPrefix: str,
        set: Any = None,
        from_: Any = None,
        until: Any = None,
        cursor: int = 0,
        batch_size: int = 10,
    ) -> Any:
        return [
            h for h, _, _ in self.listRecords(metadataPrefix, set, from_, until, cursor, batch_size)
        ]

    def getRecord(self, metadataPrefix: str, identifier: str) -> Any:
        row = self.db.execute(
            "select identifier, datestamp, deleted, xml from records where identifier = ?",
            (identifier,),
        ).fetchone()
        header = common.Header(None, row[0], datetime.fromisoformat(row[1]), [], bool(row[2]))
        return header, common.Metadata(None, {"xml": row[3]}), None


def iso19139_writer(element: Any, record: Any) -> None:
    element.append(etree.fromstring(record.getMap()["xml"]))


def main() -> None:
    # pyoai 2.5.0, its last release, decodes resumptionTokens with cgi.parse_qs, which Python
    # removed (3.8); the same function lives on in urllib.parse. Only that alias is restored.
    cgi.parse_qs = parse_qs  # type: ignore[attr-defined]
    path, port, page_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    registry = metadata.MetadataRegistry()
    registry.registerWriter("iso19139", iso19139_writer)
    provider = server.BatchingServer(
        Repository(path), metadata_registry=registry, resumption_batch_size=page_size
    )

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        arguments = dict(parse_qsl(environ.get("QUERY_STRING", "")))
        body = provider.handleRequest(arguments)
        if isinstance(body, str):
            body = body.encode("utf-8")
        start_response("200 OK", [("Content-Type", "text/xml; charset=utf-8")])
        return [body]

    make_server("127.0.0.1", port, app, handler_class=Quiet).serve_forever()


if __name__ == "__main__":
    main()
