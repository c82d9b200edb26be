"""``wiscat link show NAME``: one link, its state, and its subscription to its peer's change
hints (docs/links.md, "Harvest on a hint"), as ``GET /admin/links/NAME`` gives them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wiscat.cli.arguments import command
from wiscat.cli.database import migrated_pool
from wiscat.cli.output import when
from wiscat.shared.db import hints as hint_store
from wiscat.shared.db import links as link_store
from wiscat.shared.durations import format_duration
from wiscat.shared.model import Link
from wiscat.shared.settings import Settings
from wiscat.shared.urls import safe_url

NO_SUCH_LINK = 2


def add_parser(link: Any) -> None:
    p = command(
        link,
        "show",
        help="one link: its peer, schedule, state, and its subscription to the peer's change "
        "hints (connected since, last hint, last error)",
        handler=cmd_link_show,
        examples=["wiscat link show dwd", "wiscat link show dwd --json"],
        exits={0: "the link was shown", NO_SUCH_LINK: "no link of that name"},
    )
    p.add_argument("name", help="the link's name")
    p.add_argument("--json", action="store_true", help="as GET /admin/links/NAME gives it")


def hints_line(subscription: dict[str, Any]) -> str:
    """The subscription in a few words: its state, since when, its last hint and error."""
    text = str(subscription["state"])
    if subscription.get("connected_since"):
        text += f" since {subscription['connected_since']}"
    if subscription.get("last_hint_at"):
        text += f", last hint {subscription['last_hint_at']}"
    if subscription.get("last_error"):
        text += f"; last error {subscription['last_error_at']}: {subscription['last_error']}"
    return text


def _lines(link: Link, subscription: dict[str, Any]) -> list[str]:
    return [
        f"link {link.name}: {'enabled' if link.enabled else 'DISABLED'}",
        f"  peer        {safe_url(link.base_url)} set={link.remote_set or '(all)'} "
        f"prefix={link.metadata_prefix} into {link.local_set}",
        f"  schedule    every {format_duration(link.every)}, full every "
        f"{format_duration(link.full_every)}, next run {when(link.next_run_at)}",
        f"  state       HWM {when(link.high_water_mark)}, last ok {when(link.last_success_at)}"
        + (f", last error: {link.last_error}" if link.last_error else ""),
        f"  hints       {hints_line(subscription)}"
        + (" (a run is pending)" if link.hint_pending else ""),
    ] + ([f"  stream      {subscription['url']}"] if subscription.get("url") else [])


async def cmd_link_show(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat link show``: one link and its subscription to its peer's hints."""
    async with migrated_pool(settings) as pool:
        link = await link_store.get_link(pool, args.name)
        if link is None:
            print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
            return NO_SUCH_LINK
        stream = await hint_store.stream_of(pool, link.base_url)
    subscription = hint_store.subscription(link, stream, settings.hints)
    if args.json:
        print(json.dumps({**link.as_json(), "subscription": subscription}, indent=2))
    else:
        print("\n".join(_lines(link, subscription)))
    return 0
