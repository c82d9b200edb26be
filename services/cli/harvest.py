"""``wiscat harvest NAME``: one run of a link now, in this process."""

from __future__ import annotations

import argparse
import functools
import sys
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from wiscat.cli.arguments import command
from wiscat.cli.database import migrated_database
from wiscat.cli.output import said, when
from wiscat.shared.db import links as link_store
from wiscat.shared.db.errors import DatabaseError, DatabaseUnavailable
from wiscat.shared.db.leases import LeaseSession
from wiscat.shared.model import Link
from wiscat.shared.settings import Settings


def add_parsers(sub: Any) -> None:
    p = command(
        sub,
        "harvest",
        help="run one link once now; exit 0 on success",
        handler=cmd_harvest,
        examples=[
            "wiscat harvest dwd",
            "wiscat harvest dwd --full",
            "wiscat harvest tokyo-backup --backup-sync",
        ],
        exits={
            0: "the run succeeded",
            1: "the run failed (its reason is printed and in `wiscat link runs NAME`), or the "
            "link is being harvested by another worker",
            2: "no such link, or the database could not be used",
        },
    )
    p.add_argument("name", help="the link's name (see `wiscat link list`)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="a full harvest (no from)")
    mode.add_argument(
        "--backup-sync",
        action="store_true",
        help="backup synchronisation of a shared set: take only records missing "
        "here or newer by gmd:dateStamp, keeping the peer's datestamps; lists what it took",
    )
    p.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="apply deletions even past the mass-deletion circuit breaker",
    )


async def cmd_harvest(settings: Settings, args: argparse.Namespace) -> int:
    """``wiscat harvest``: run one link once now; exit 0 on success."""
    try:
        return await _harvest_once(settings, args)
    except DatabaseUnavailable as exc:
        # the database went away during the run (a crash, a restart, a network cut): said as
        # such, where the system's words alone ('[Errno 2] No such file or directory', the
        # server's socket) named no database; the run is closed as abandoned by the next run
        # (the lease's session went with the database: the link is free at once), which
        # starts from the high-water mark
        raise DatabaseError(
            f"the database could not be reached during the harvest of {args.name}: "
            f"{said(exc)}; its pages committed before are kept, and the next run starts "
            "from the link's high-water mark"
        ) from exc


def _taken(link: Link) -> str:
    """Who runs ``link`` now, and where its run shows: an operator who asked for a run sees why
    not (the node's own scheduler may have started the run a moment before)."""
    who = "another worker"
    if link.lease_owner is not None:  # None: the run ended between the two reads
        who += f" ({link.lease_owner}, its lease until {when(link.lease_expires)})"
    return (
        f"link {link.name} is being harvested by {who}; "
        f"its run shows in `wiscat link runs {link.name}`"
    )


async def _harvest_once(settings: Settings, args: argparse.Namespace) -> int:
    from wiscat.harvester.context import run_end_unlogged
    from wiscat.harvester.harvest import harvest_link, run_list
    from wiscat.harvester.scheduler import give_back, renewed
    from wiscat.harvester.service import harvest_context

    async with migrated_database(settings) as url, harvest_context(settings, url) as ctx:
        owner = ctx.worker
        lease = timedelta(seconds=settings.harvest_lease_seconds)
        # the lease is held on a session of its own: killed, this command frees the link at once
        session = await LeaseSession.open(ctx.database_url)
        try:
            link = await session.take(args.name, owner, lease, due=False)
            if link is not None:
                # an operator's run goes at once: it counts against its peer host's limit
                # where a slot is free, and runs without one where none is
                host = urlsplit(link.base_url).netloc
                await session.take_host_slot(host, settings.harvest_per_host)
        except BaseException:
            await session.close()
            raise
        if link is None:
            await session.close()
            taken = await link_store.get_link(ctx.pool, args.name)
            if taken is None:
                print(f"wiscat: no link named {args.name!r}", file=sys.stderr)
                return 2
            print(f"wiscat: {_taken(taken)}", file=sys.stderr)
            return 1
        try:
            # renewed while the run lasts: a long run must not be taken over by a harvester;
            # the run's summary is this command's result: printed below, once, not logged too
            with run_end_unlogged():
                async with renewed(
                    functools.partial(session.renew, link.name, owner, lease), link.name, lease
                ):
                    if args.backup_sync:
                        report = await run_list(ctx, link, mode="backup", from_=None, until=None)
                    else:
                        report = await harvest_link(
                            ctx,
                            link,
                            full=args.full,
                            allow_mass_delete=args.allow_mass_delete,
                            window=False,
                        )
        finally:
            await give_back(ctx.pool, session, link, owner, link.next_run_at)
    print(report.summary())
    for identifier in report.taken:
        print(f"took: {identifier}")
    return 0 if report.status == "ok" else 1
