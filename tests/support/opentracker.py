"""A real BitTorrent tracker for the tests: Debian's opentracker on loopback, in its whitelist
mode (the Debian build's only mode: it serves the info_hashes of its access list, no other), and
a raw announce as any BitTorrent client would make it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
from yarl import URL

from tests.support.servers import loopback_socket
from wiscat.shared.registry.tracker import (
    Announce,
    TrackerError,
    TrackerReply,
    announce_url,
    new_peer_id,
    parse_reply,
)


@dataclass(frozen=True)
class Tracker:
    announce: str  # http://127.0.0.1:PORT/announce
    folder: Path


@contextlib.asynccontextmanager
async def running_opentracker(*info_hashes: bytes) -> AsyncIterator[Tracker]:
    """opentracker on a free loopback port (TCP only), serving ``info_hashes``."""
    tool = shutil.which("opentracker")
    assert tool, "opentracker is missing: `make test` installs Debian's opentracker package"
    # opentracker run as root chroots to this folder and becomes nobody: it must read it
    folder = Path(tempfile.mkdtemp(prefix="wiscat-opentracker-"))
    os.chmod(folder, 0o755)
    whitelist = folder / "whitelist.txt"
    whitelist.write_text("".join(f"{h.hex()}\n" for h in info_hashes))
    os.chmod(whitelist, 0o644)
    process = None
    try:
        for _ in range(5):  # the port is free when picked, and may be taken before it is bound
            with loopback_socket() as probe:
                port = probe.getsockname()[1]
            process = await asyncio.create_subprocess_exec(
                tool,
                *("-i", "127.0.0.1", "-p", str(port), "-w", whitelist.name),
                *("-d", str(folder), "-u", "nobody"),
                cwd=folder,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            if await _listening(port, process):
                break
            await process.wait()
        else:
            raise AssertionError("opentracker did not start on loopback")
        tracker = Tracker(f"http://127.0.0.1:{port}/announce", folder)
        if info_hashes:
            await _whitelist_loaded(tracker, info_hashes[0])
        yield tracker
    finally:
        if process is not None and process.returncode is None:
            process.terminate()
            await process.wait()
        shutil.rmtree(folder, ignore_errors=True)


async def _whitelist_loaded(tracker: Tracker, info_hash: bytes) -> None:
    """Wait until opentracker serves ``info_hash``: it reads its access list in a thread of its
    own, after it listens (an announce before that is refused as for a hash not listed)."""
    # event=started, as the tests announce: Debian's opentracker answers `stopped` for any
    # info_hash, listed or not, so only a `started` announce proves the list is loaded. The
    # throwaway peer is taken off again with `stopped` once it is answered.
    probe = Announce(info_hash, new_peer_id(), 1, "started")
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                await announce(session, tracker.announce, probe)
            except TrackerError:
                await asyncio.sleep(0.05)
            else:
                await announce(session, tracker.announce, replace(probe, event="stopped"))
                return
    raise AssertionError("opentracker did not load its whitelist")


async def _listening(port: int, process: asyncio.subprocess.Process) -> bool:
    for _ in range(100):
        if process.returncode is not None:
            return False
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return True
        await asyncio.sleep(0.05)
    return False


async def announce(session: aiohttp.ClientSession, tracker: str, request: Announce) -> TrackerReply:
    """One announce, as a BitTorrent client makes it; :class:`TrackerError` on a refusal."""
    async with session.get(URL(announce_url(tracker, request), encoded=True)) as response:
        assert response.status == 200, await response.text()
        return parse_reply(await response.read())
