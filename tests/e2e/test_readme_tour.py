"""The README's five-minute tour runs as written: its shell blocks, in order, in a folder that
holds a node started as ``make run`` starts it, with the ports the tour reads from the
environment (loopback, free ones). TOKYO, the second node, is started and stopped by the tour
itself. A README that drifts from the commands fails here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.nodes import WISCAT, free_port, stop_signals_by_default

README = Path(__file__).resolve().parents[2] / "README.md"
TOUR_SECONDS = 300


def tour_script(readme: str) -> str:
    """The shell blocks of the README's "A five-minute tour", in order, as one script."""
    tour = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", tour, re.S)
    assert len(blocks) >= 5, tour
    return "set -e\n" + "\n".join(blocks)


def test_the_tour_is_found_and_follows_the_ports() -> None:
    script = tour_script(README.read_text())
    # every address the tour uses follows the ports it was given: none is written out
    assert re.findall(r"127\.0\.0\.1:\d", script) == []
    assert "--centre jp" in script and "WISCAT_DATA_DIR=var/tokyo" in script


def _two_free_ports() -> int:
    """A port P with P + 1 free as well (TOKYO's provider and harvester)."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two free ports in a row")


def _stop_embedded(folder: Path) -> None:
    """Stop an embedded server a failed tour left running under ``folder``."""
    from pgserver._commands import pg_ctl

    for data in folder.glob("var/**/postgres"):
        if (data / "postmaster.pid").exists():
            user = {"user": "pgserver"} if os.geteuid() == 0 else {}
            with contextlib.suppress(subprocess.CalledProcessError):
                pg_ctl(["stop", "-m", "immediate"], pgdata=data, **user)


@contextlib.contextmanager
def checkout() -> Iterator[Path]:
    """A folder that looks like a checkout to the tour: ``.venv/bin/wiscat`` in it."""
    # outside pytest's basetemp, like the session's server (see tests/conftest.py)
    folder = Path(tempfile.mkdtemp(prefix="wiscat-test-tour-"))
    try:
        (folder / ".venv" / "bin").mkdir(parents=True)
        (folder / ".venv" / "bin" / "wiscat").symlink_to(WISCAT)
        yield folder
    finally:
        _stop_embedded(folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.asynccontextmanager
async def local_node(folder: Path, env: dict[str, str]) -> AsyncIterator[Path]:
    """The node of ``make run`` (``.venv/bin/wiscat run`` in the checkout); yields its output."""
    output = folder / "local.out"
    with output.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            ".venv/bin/wiscat",
            "run",
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=stop_signals_by_default,
        )
    try:
        ready = f"http://127.0.0.1:{env['WISCAT_PROVIDER_PORT']}/readyz"
        async with aiohttp.ClientSession() as http:
            for _ in range(1200):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(ready) as response:
                        if response.status == 200:
                            break
                assert process.returncode is None, output.read_text()
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the node did not become ready:\n{output.read_text()}")
        yield output
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


@pytest.mark.timeout(TOUR_SECONDS + 120)
async def test_the_readme_tour_runs_as_written() -> None:
    port, tokyo_port = free_port(), _two_free_ports()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WISCAT_")}
    env.update(WISCAT_PROVIDER_PORT=str(port), WISCAT_HARVESTER_PORT=str(free_port()))
    # the tour's outputs are the schedule's: a run on a hint would come in between
    env.update(WISCAT_HINTS="false")
    with checkout() as folder:
        (folder / "tour.sh").write_text(tour_script(README.read_text()))
        async with local_node(folder, env) as local_output:
            # the first line names where to look: the Identify URL and the dashboard
            site = f"http://127.0.0.1:{port}"
            assert (
                f"wiscat node LOCAL: open {site}/oai?verb=Identify, dashboard {site}/\n"
                in local_output.read_text()
            )
            # into files, not pipes: a tour that does not end still shows how far it came
            tour_out, tour_err = folder / "var" / "tour.out", folder / "var" / "tour.err"
            tour_out.parent.mkdir(exist_ok=True)
            with tour_out.open("wb") as stdout, tour_err.open("wb") as stderr:
                tour = await asyncio.create_subprocess_exec(
                    "bash",
                    "tour.sh",
                    cwd=folder,
                    env={**env, "TOKYO_PORT": str(tokyo_port)},
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    start_new_session=True,  # TOKYO is its job: stopped with it, whatever happens
                )
                try:
                    await asyncio.wait_for(tour.wait(), TOUR_SECONDS)
                except TimeoutError:
                    tokyo = folder / "var" / "tokyo.log"
                    raise AssertionError(
                        f"the tour did not end within {TOUR_SECONDS} s; its output:\n"
                        f"{tour_out.read_text()}\n{tour_err.read_text()}\n"
                        f"LOCAL's log:\n{local_output.read_text()}\n"
                        f"TOKYO's log:\n{tokyo.read_text() if tokyo.exists() else '(none)'}"
                    ) from None
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(tour.pid, signal.SIGINT)
            out, err = tour_out.read_text(), tour_err.read_text()
            tokyo_log = folder / "var" / "tokyo.log"
            assert tour.returncode == 0, f"{out}\n{err}\n{tokyo_log.read_text()}"
            # the tour's last line stopped TOKYO, as a node stops
            for _ in range(300):
                if "node stopped" in tokyo_log.read_text():
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(tokyo_log.read_text())
    assert "WIS-GISC-LOCAL: added 50, bad 0\n" in out
    assert "deleted: urn:x-wmo:md:int.wmo.wis::xx.synop.0\n" in out
    assert "WIS-GISC-TOKYO: added 50, bad 0\n" in out
    # the tombstone is listed once settled, with the other 49
    assert out.count("<header>") == 49 and out.count('<header status="deleted">') == 1
    assert "<setSpec>WIS-GISC-LOCAL</setSpec>" in out
    # the harvester ran the new link at once; the run asked for then found nothing new
    assert re.search(r"#1 \S+ tokyo full: ok \([\d.]+ s\); pages 1; added 50\n", out), out
    assert re.search(r"tokyo incremental run 2: ok; pages \d+; added 0", out), out
    assert out.endswith("outcome: consistent\n"), out
