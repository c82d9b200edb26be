"""A GISC mesh that converges: the scenarios of seeds 000 and 002 on real nodes.

Node names follow the seeds: G, H, I are GISCs, W and X are centres (DCPCs or NCs) of G's area,
which G harvests into its own set through area links. Every assertion is on exact catalogues.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

from tests.e2e.mesh import TOMBSTONE, Mesh, Writers, expected
from tests.support.pg import clone_template, drop_database

MONDAY = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
TUESDAY = MONDAY + timedelta(days=1)


def own(name: str) -> str:
    return f"WIS-GISC-{name}"


async def centres_and_gisc(mesh: Mesh, harvesters: tuple[str, ...] = ("H",)) -> None:
    """W and X report to G (area links into G's own set); H (and any other of ``harvesters``)
    harvests G's own set."""
    for name in ("W", "X", "G", *harvesters):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("G", "area-w", "W", own("W"), into=own("G"))
    await mesh.link("G", "area-x", "X", own("X"), into=own("G"))
    for name in harvesters:
        await mesh.link(name, "g", "G", own("G"))


async def test_late_submission_reaches_g_and_every_node_harvesting_g(mesh: Mesh) -> None:
    """Seed 000 §1.1: a record written on Monday but submitted after Tuesday's record."""
    await centres_and_gisc(mesh, harvesters=("H", "I"))
    await mesh.put("W", 2, "w", md=TUESDAY)
    await mesh.round([("G", "area-w"), ("H", "g"), ("I", "g")])
    await mesh.put("W", 1, "w", md=MONDAY)  # arrives at W after Tuesday's record
    runs = await mesh.round([("G", "area-w"), ("H", "g"), ("I", "g")])
    assert [(run["mode"], run["added"]) for run in runs] == [("incremental", 1)] * 3
    catalogue = await mesh.assert_converged("G", "H", "I")
    assert catalogue == dict(
        [expected(2, "w", own("G"), md=TUESDAY), expected(1, "w", own("G"), md=MONDAY)]
    )


async def test_records_with_older_md_datestamps_are_not_missed(mesh: Mesh) -> None:
    """Seed 000 §1.2: G harvests X, then W, whose records carry older gmd:dateStamps."""
    await centres_and_gisc(mesh)
    await mesh.put("X", 1, "x", md=TUESDAY)
    await mesh.round([("G", "area-x")])
    await mesh.put("W", 1, "w", md=MONDAY)
    await mesh.round([("G", "area-w"), ("H", "g")])
    # the next day: both centres submit again, W still with older dateStamps than X
    await mesh.put("W", 2, "w", md=MONDAY - timedelta(days=3))
    await mesh.put("X", 2, "x", md=TUESDAY + timedelta(days=1))
    runs = await mesh.round([("G", "area-x"), ("G", "area-w"), ("H", "g")])
    assert [(run["mode"], run["added"]) for run in runs] == [
        ("incremental", 1),
        ("incremental", 1),
        ("incremental", 2),
    ]
    catalogue = await mesh.assert_converged("G", "H")
    assert catalogue == dict(
        [
            expected(1, "x", own("G"), md=TUESDAY),
            expected(1, "w", own("G"), md=MONDAY),
            expected(2, "w", own("G"), md=MONDAY - timedelta(days=3)),
            expected(2, "x", own("G"), md=TUESDAY + timedelta(days=1)),
        ]
    )


async def test_a_second_gisc_receives_what_reached_g_after_its_last_run(mesh: Mesh) -> None:
    """Seed 000 §1.3: H harvesting G receives W's record that reached G after H's last run."""
    await centres_and_gisc(mesh)
    await mesh.put("W", 1, "w")
    await mesh.round([("G", "area-w"), ("H", "g")])
    await mesh.put("W", 2, "w", md=MONDAY)
    await mesh.round([("G", "area-w")])  # reaches G after H's last run
    [run] = await mesh.round([("H", "g")])
    assert (run["added"], run["updated"]) == (1, 0)
    assert await mesh.assert_converged("G", "H") == dict(
        [expected(1, "w", own("G")), expected(2, "w", own("G"), md=MONDAY)]
    )


async def full_mesh(mesh: Mesh, names: list[str], per_node: int) -> dict[str, list[str]]:
    for name in names:
        await mesh.add_node(name)
    await mesh.start()
    for name in names:
        for other in names:
            if other != name:
                await mesh.link(name, other.lower(), other, own(other))
    made: dict[str, list[str]] = {}
    for name in names:
        made[name] = [await mesh.put(name, n, name.lower()) for n in range(per_node)]
    return made


TRANSFERRED = ("added", "updated", "unchanged", "deleted", "refused", "quarantined")


async def assert_quiet_round(mesh: Mesh) -> list[dict[str, object]]:
    """A round that changes no datestamp anywhere and stores nothing; returns its runs."""
    before = {name: await mesh.datestamps(name) for name in mesh.nodes}
    runs = await mesh.round(concurrent=True)
    for run in runs:
        assert (run["added"], run["updated"], run["deleted"]) == (0, 0, 0), run
    after = {name: await mesh.datestamps(name) for name in mesh.nodes}
    assert after == before
    return runs


def assert_nothing_transferred(runs: list[dict[str, object]]) -> None:
    """Each run asked for what is new since its last one and received not one record."""
    for run in runs:
        assert run["mode"] == "incremental", run
        assert all(run[count] == 0 for count in TRANSFERRED), run


async def test_full_mesh_of_four_gisc_has_no_loop(settled_mesh: Mesh) -> None:
    """Seed 000 §2: four GISCs harvest each other's own sets for ten rounds. The nodes list a
    second only once it is whole (a settle window), as in production, so a quiet round
    transfers nothing at all."""
    mesh = settled_mesh
    names = ["A", "B", "C", "D"]
    made = await full_mesh(mesh, names, per_node=5)
    for _ in range(10):
        await mesh.round(concurrent=True)
    catalogue = await mesh.assert_converged()
    # every record exactly once, in its origin's set
    assert catalogue == dict(
        expected(n, name.lower(), own(name)) for name in names for n in range(5)
    )
    assert_nothing_transferred(await assert_quiet_round(mesh))

    # D files A's own set into its own set by mistake: A refuses its own records back (and says
    # so), the others see them in D's set too, and the mesh settles without a loop
    await mesh.link("D", "mistake", "A", own("A"), into=own("D"))
    refused = []
    for _ in range(4):
        runs = await mesh.round(concurrent=True)
        refused += [run for run in runs if run["link"] == "d" and run["refused"]]
    assert [(run["refused"], run["added"], run["updated"]) for run in refused] == [(5, 0, 0)]
    assert_nothing_transferred(await assert_quiet_round(mesh))
    assert await mesh.catalogue("A") == catalogue  # nothing of the mistake reached A
    in_a_and_d = frozenset({own("A"), own("D")})
    assert await mesh.assert_converged("B", "C", "D") == {
        identifier: (content, in_a_and_d if identifier in made["A"] else sets, deleted)
        for identifier, (content, sets, deleted) in catalogue.items()
    }


async def test_relay_through_g_and_moving_the_link_back(mesh: Mesh) -> None:
    """Seed 002: with the H-I link down, H harvests I's set from G; then the link moves back."""
    for name in ("G", "H", "I"):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("G", "i", "I", own("I"))
    await mesh.link("H", "g", "G", own("G"))
    await mesh.link("H", "i", "G", own("I"))  # relay: I's set, from G
    for n in range(6):
        await mesh.put("I", n, "i")
    for n in range(3):
        await mesh.put("G", n, "g")
    await mesh.round([("G", "i"), ("H", "g"), ("H", "i")])
    converged = await mesh.assert_converged("G", "H")
    wanted = dict(
        [
            *(expected(n, "i", own("I")) for n in range(6)),
            *(expected(n, "g", own("G")) for n in range(3)),
        ]
    )
    assert converged == wanted

    # the direct link is back: H points its link at I again; the full harvest this causes
    # finds everything unchanged, and a record added meanwhile arrives once
    stamps = await mesh.datestamps("H")
    fresh = await mesh.put("I", 6, "i")
    run = await mesh.move_link("H", "i", "I", own("I"))
    assert (run["mode"], run["added"], run["updated"], run["unchanged"]) == ("full", 1, 0, 6)
    after = await mesh.datestamps("H")
    assert {k: v for k, v in after.items() if k[1] != fresh} == stamps
    await mesh.round([("G", "i")])
    converged = await mesh.assert_converged("G", "H")
    assert converged == dict([*wanted.items(), expected(6, "i", own("I"))])


async def test_shared_set_without_loop_and_a_manual_backup_sync(mesh: Mesh) -> None:
    """Seed 000 §5: centres S and T are served jointly by G and I in set shared01; H harvests it
    from both; no regular harvesting between G and I; backup synchronisation only by hand."""
    for name in ("S", "T", "G", "I", "H"):
        await mesh.add_node(name)
    await mesh.start()
    for gisc in ("G", "I"):
        for centre in ("S", "T"):
            await mesh.link(gisc, centre.lower(), centre, own(centre), into="shared01")
    await mesh.link("H", "g-shared", "G", "shared01")
    await mesh.link("H", "i-shared", "I", "shared01")
    for centre in ("s", "t"):
        for n in range(2):
            await mesh.put(centre.upper(), n, centre)
    await mesh.round([("G", "s"), ("G", "t"), ("I", "s"), ("I", "t")])
    await mesh.round([("H", "g-shared"), ("H", "i-shared")])
    catalogue = await mesh.assert_converged("G", "I", "H")
    assert catalogue == dict(expected(n, c, "shared01") for c in ("s", "t") for n in range(2))
    await assert_quiet_round(mesh)

    # S and T revise a record each; I harvests S but misses T, G harvests T but misses S (each
    # was down at the time, say); H takes each revision from whichever GISC has it
    s0, s0_revised = expected(0, "s", "shared01", version=1)
    t0, t0_revised = expected(0, "t", "shared01", version=1)
    await mesh.put("S", 0, "s", version=1)
    await mesh.put("T", 0, "t", version=1)
    await mesh.round([("I", "s"), ("G", "t")])
    await mesh.round([("H", "g-shared"), ("H", "i-shared")])
    newest = {**catalogue, s0: s0_revised, t0: t0_revised}
    assert await mesh.catalogue("G") == {**newest, s0: catalogue[s0]}
    assert await mesh.catalogue("I") == {**newest, t0: catalogue[t0]}
    assert await mesh.catalogue("H") == newest

    # G's operator sees the difference and runs a backup sync from I, by hand: it takes S's
    # record (newer at I) and leaves T's alone (older at I)
    await mesh.link("G", "i-backup", "I", "shared01", enabled=False)
    code, out, err = await mesh.nodes["G"].wiscat("harvest", "i-backup", "--backup-sync")
    assert code == 0, err
    assert [line for line in out.splitlines() if line.startswith("took:")] == [f"took: {s0}"]
    assert await mesh.catalogue("G") == newest
    g_stamp = (await mesh.datestamps("G"))[("shared01", s0)]
    i_stamp = (await mesh.datestamps("I"))[("shared01", s0)]
    assert g_stamp == i_stamp.replace(microsecond=0)  # the source's datestamp is kept
    # and I's operator the same from G, which takes T's record only
    await mesh.link("I", "g-backup", "G", "shared01", enabled=False)
    code, out, err = await mesh.nodes["I"].wiscat("harvest", "g-backup", "--backup-sync")
    assert code == 0, err
    assert [line for line in out.splitlines() if line.startswith("took:")] == [f"took: {t0}"]
    assert await mesh.assert_converged("G", "I", "H") == newest
    # the synchronised copies are not news to H, nor the revisions G and I missed to
    # themselves: nothing moves, nothing loops
    await assert_quiet_round(mesh)
    assert await mesh.assert_converged("G", "I", "H") == newest


async def test_a_node_restores_its_own_set_through_a_recovery_link(mesh: Mesh) -> None:
    """Seed 002: G lost its own-area records; it restores them from H, into its own set."""
    for name in ("G", "H"):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("H", "g", "G", own("G"))
    for n in range(5):
        await mesh.put("G", n, "g")
    await mesh.round()
    before = await mesh.assert_converged("G", "H")
    assert before == dict(expected(n, "g", own("G")) for n in range(5))

    # G's database is lost and rebuilt empty
    g = mesh.nodes["G"]
    await mesh.stop("G")
    await drop_database(mesh.template_url, g.database_url)
    g.database_url = await clone_template(mesh.template_url)
    await mesh.start("G")
    assert await mesh.catalogue("G") == {}

    run = await mesh.link("G", "recover", "H", own("G"), into=own("G"), recovery=True)
    assert run is not None and run["added"] == 5
    assert await mesh.catalogue("G") == before  # every record back, in the own set
    # H sees its own copies come back unchanged: no churn
    [run] = await mesh.round([("H", "g")])
    assert (run["added"], run["updated"]) == (0, 0)


async def test_concurrent_writes_at_every_node_during_rounds(settled_mesh: Mesh) -> None:
    """Writes at every node while rounds run in random order: the final state is equal
    everywhere, and it is what the writers wrote. The nodes have a settle window, which is what
    keeps a write still in progress while a list is served from being missed (invariant 2)."""
    mesh = settled_mesh
    names = ["A", "B", "C"]
    await full_mesh(mesh, names, per_node=3)
    rng = random.Random(2026)
    writers = Writers(mesh, rng)
    tasks = [asyncio.create_task(writers.write(name)) for name in names]
    for _ in range(4):
        await mesh.round(concurrent=True, shuffle=rng)
    writers.stop.set()
    await asyncio.gather(*tasks)
    for _ in range(2):
        await mesh.round(concurrent=True, shuffle=rng)
    wanted = dict(expected(n, name.lower(), own(name)) for name in names for n in range(3))
    for name in names:
        wanted.update(writers.wanted(name, own(name)))
    assert sum(entry is TOMBSTONE for entry in wanted.values()) > 0  # deletions were made
    assert await mesh.assert_converged() == wanted


RETENTION_SECONDS = 30.0


async def test_deletions_travel_through_relays_survive_restarts_and_are_purged_in_time(
    mesh: Mesh,
) -> None:
    """Seed 002: a deletion at the origin reaches every node within two rounds, through a relay
    too; it survives a restart of every node; tombstones go after the retention period, and
    only then."""
    retention = {"WISCAT_DELETED_RETENTION_DAYS": str(RETENTION_SECONDS / 86400)}
    for name in ("A", "B", "C"):
        await mesh.add_node(name, **retention)
    await mesh.start()
    await mesh.link("B", "a", "A", own("A"))
    await mesh.link("C", "a-via-b", "B", own("A"))  # C reaches A only through B
    made = dict(expected(n, "a", own("A")) for n in range(4))
    for n in range(4):
        await mesh.put("A", n, "a")
    worst_order = [("C", "a-via-b"), ("B", "a")]  # the relay runs before its source
    await mesh.round(worst_order)
    await mesh.round(worst_order)
    assert await mesh.assert_converged() == made

    gone = next(iter(made))
    await mesh.delete("A", gone)
    deleted_at = asyncio.get_running_loop().time()
    await mesh.round(worst_order)
    assert not (await mesh.catalogue("C"))[gone][2]  # not yet: the relay ran first
    await mesh.round(worst_order)
    catalogue = await mesh.assert_converged()
    assert catalogue == {**made, gone: TOMBSTONE}

    await mesh.stop()
    await mesh.start()
    assert await mesh.assert_converged() == catalogue  # tombstones survive restarts
    assert asyncio.get_running_loop().time() - deleted_at < RETENTION_SECONDS

    stamps = {name: (await mesh.datestamps(name))[(own("A"), gone)] for name in mesh.nodes}
    remaining = set(mesh.nodes)
    for _ in range(400):
        for name in sorted(remaining):
            if gone not in await mesh.catalogue(name):
                age = (datetime.now(UTC) - stamps[name]).total_seconds()
                assert age >= RETENTION_SECONDS, f"{name} purged a tombstone {age:.1f} s old"
                remaining.discard(name)
        if not remaining:
            break
        await asyncio.sleep(0.25)
    assert not remaining, f"tombstones never purged at {sorted(remaining)}"
    del made[gone]
    assert await mesh.assert_converged() == made
