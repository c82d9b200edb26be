"""``wiscat link test NAME``: what the link's peer answers to the requests its harvests would
make (:mod:`services.harvester.probe`), before a run finds out."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from typing import Any

from shared.db import links as link_store
from shared.settings import Settings
from shared.urls import safe_url

MARKS = {"ok": "ok", "note": "note", "problem": "PROBLEM"}


def add_parsers(link: Any) -> None:
    """Add ``test`` to the subcommands of ``wiscat link``."""
    p = link.add_parser(
        "test",
        help="ask the link's peer what a harvest would (Identify, ListMetadataFormats, "
        "ListSets, a first ListIdentifiers page, one GetRecord) and store nothing; exit 1 on a "
        "problem",
    )
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="the findings as a JSON list")


async def cmd_link_test(settings: Settings, args: argparse.Namespace) -> int:
    from services.cli import migrated_pool
    from services.harvester.client import OAIClient
    from services.harvester.probe import probe_link
    from services.harvester.service import client_settings

    async with migrated_pool(settings) as pool:
        link = await link_store.get_link(pool, args.name)
    if link is None:
        print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
        return 1
    # one retry at most: an operator waits for the answer, and runs it again if need be
    config = client_settings(settings)
    config = replace(config, max_retries=min(config.max_retries, 1))
    async with OAIClient.session(config) as session:
        findings = await probe_link(OAIClient(session, config), settings, link)
    if args.json:
        print(json.dumps([asdict(finding) for finding in findings], indent=2))
    else:
        print(
            f"link {link.name}: {safe_url(link.base_url)} set={link.remote_set or '(all)'} "
            f"prefix={link.metadata_prefix}"
        )
        for finding in findings:
            print(f"  {finding.step:<15} {MARKS[finding.outcome]:<8} {finding.text}")
    return 1 if any(finding.outcome == "problem" for finding in findings) else 0


COMMANDS = {"link test": cmd_link_test}
