"""A GISC mesh that converges: the scenarios of seeds 000 and 002 on real nodes.

Node names follow the seeds: G, H, I are GISCs, W and X are centres (DCPCs or NCs) of G's area,
which G harvests into its own set through area links. Every assertion is on exact catalogues.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

from tests.e2e.mesh import Mesh
from tests.pg import clone_template, drop_database

MONDAY = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
TUESDAY = MONDAY + timedelta(days=1)


def own(name: str) -> str:
    return f"WIS-GISC-{name}"


async def centres_and_gisc(mesh: Mesh) -> None:
    """W and X report to G (area links into G's own set); H harvests G's own set."""
    for name in ("W", "X", "G", "H"):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("G", "area-w", "W", own("W"), into=own("G"))
    await mesh.link("G", "area-x", "X", own("X"), into=own("G"))
    await mesh.link("H", "g", "G", own("G"))


def identifiers(catalogue: dict[str, object]) -> set[str]:
    return set(catalogue)


async def test_late_submission_reaches_g_and_every_node_harvesting_g(mesh: Mesh) -> None:
    """Seed 000 §1.1: a record written on Monday but submitted after Tuesday's record."""
    await centres_and_gisc(mesh)
    tuesday = await mesh.put("W", 2, "w", md=TUESDAY)
    await mesh.round([("G", "area-w"), ("H", "g")])
    monday = await mesh.put("W", 1, "w", md=MONDAY)  # arrives at W after Tuesday's record
    runs = await mesh.round([("G", "area-w"), ("H", "g")])
    assert runs[0]["added"] == 1 and runs[1]["added"] == 1
    catalogue = await mesh.assert_converged("G", "H")
    assert set(catalogue) == {tuesday, monday}
    assert all(sets == {own("G")} for _, sets, _ in catalogue.values())


async def test_records_with_older_md_datestamps_are_not_missed(mesh: Mesh) -> None:
    """Seed 000 §1.2: G harvests X, then W, whose records carry older gmd:dateStamps."""
    await centres_and_gisc(mesh)
    x1 = await mesh.put("X", 1, "x", md=TUESDAY)
    await mesh.round([("G", "area-x")])
    w1 = await mesh.put("W", 1, "w", md=MONDAY)
    await mesh.round([("G", "area-w"), ("H", "g")])
    # the next day: both centres submit again, W still with older dateStamps than X
    w2 = await mesh.put("W", 2, "w", md=MONDAY - timedelta(days=3))
    x2 = await mesh.put("X", 2, "x", md=TUESDAY + timedelta(days=1))
    await mesh.round([("G", "area-x"), ("G", "area-w"), ("H", "g")])
    catalogue = await mesh.assert_converged("G", "H")
    assert set(catalogue) == {x1, w1, w2, x2}


async def test_a_second_gisc_receives_what_reached_g_after_its_last_run(mesh: Mesh) -> None:
    """Seed 000 §1.3: H harvesting G receives W's record that reached G after H's last run."""
    await centres_and_gisc(mesh)
    first = await mesh.put("W", 1, "w")
    await mesh.round([("G", "area-w"), ("H", "g")])
    late = await mesh.put("W", 2, "w", md=MONDAY)
    await mesh.round([("G", "area-w")])  # reaches G after H's last run
    [run] = await mesh.round([("H", "g")])
    assert (run["added"], run["updated"]) == (1, 0)
    assert set(await mesh.assert_converged("G", "H")) == {first, late}


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


async def assert_quiet_round(mesh: Mesh) -> None:
    """A round that changes no datestamp anywhere and stores nothing."""
    before = {name: await mesh.datestamps(name) for name in mesh.nodes}
    runs = await mesh.round(concurrent=True)
    for run in runs:
        assert (run["added"], run["updated"], run["deleted"]) == (0, 0, 0), run
    after = {name: await mesh.datestamps(name) for name in mesh.nodes}
    assert after == before


async def test_full_mesh_of_four_gisc_has_no_loop(mesh: Mesh) -> None:
    """Seed 000 §2: four GISCs harvest each other's own sets for ten rounds."""
    names = ["A", "B", "C", "D"]
    made = await full_mesh(mesh, names, per_node=5)
    for _ in range(10):
        await mesh.round(concurrent=True)
    catalogue = await mesh.assert_converged()
    assert len(catalogue) == 20
    for origin, ids in made.items():
        for identifier in ids:
            _, sets, deleted = catalogue[identifier]
            assert sets == {own(origin)} and not deleted  # exactly once, in its origin's set
    await assert_quiet_round(mesh)

    # D files A's own set into its own set by mistake: A refuses its own records back (and says
    # so), the others see them in D's set too, and the mesh settles without a loop
    await mesh.link("D", "mistake", "A", own("A"), into=own("D"))
    runs = await mesh.round(concurrent=True)
    refused = [run for run in runs if run["link"] == "d" and run["refused"]]
    for _ in range(3):
        runs = await mesh.round(concurrent=True)
        refused += [run for run in runs if run["link"] == "d" and run["refused"]]
    assert refused, "A never reported refusing its own records from D"
    assert refused[-1]["refused"] == 5
    await assert_quiet_round(mesh)
    at_b = await mesh.catalogue("B")
    assert all(at_b[i][1] == {own("A"), own("D")} for i in made["A"])
    at_a = await mesh.catalogue("A")
    assert all(at_a[i][1] == {own("A")} for i in made["A"])


async def test_relay_through_g_and_moving_the_link_back(mesh: Mesh) -> None:
    """Seed 002: with the H-I link down, H harvests I's set from G; then the link moves back."""
    for name in ("G", "H", "I"):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("G", "i", "I", own("I"))
    await mesh.link("H", "g", "G", own("G"))
    await mesh.link("H", "i", "G", own("I"))  # relay: I's set, from G
    from_i = [await mesh.put("I", n, "i") for n in range(6)]
    from_g = [await mesh.put("G", n, "g") for n in range(3)]
    await mesh.round([("G", "i"), ("H", "g"), ("H", "i")])
    converged = await mesh.assert_converged("G", "H")
    assert set(converged) == set(from_i) | set(from_g)

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
    assert set(converged) == {*from_i, *from_g, fresh}


async def test_shared_set_without_loop_and_a_manual_backup_sync(mesh: Mesh) -> None:
    """Seed 000 §5: centre S is served jointly by G and I in set shared01; H harvests it from
    both; no regular harvesting between G and I; backup synchronisation only by hand."""
    for name in ("S", "G", "I", "H"):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("G", "s", "S", own("S"), into="shared01")
    await mesh.link("I", "s", "S", own("S"), into="shared01")
    await mesh.link("H", "g-shared", "G", "shared01")
    await mesh.link("H", "i-shared", "I", "shared01")
    made = [await mesh.put("S", n, "s") for n in range(4)]
    await mesh.round([("G", "s"), ("I", "s")])
    await mesh.round([("H", "g-shared"), ("H", "i-shared")])
    catalogue = await mesh.assert_converged("G", "I", "H")
    assert set(catalogue) == set(made)
    assert all(sets == {"shared01"} for _, sets, _ in catalogue.values())
    await assert_quiet_round(mesh)

    # S revises a record; I harvests it, G's harvest of S is missed (G was down, say)
    revised = await mesh.put("S", 0, "s", version=1)
    await mesh.round([("I", "s"), ("H", "i-shared"), ("H", "g-shared")])
    assert (await mesh.catalogue("G"))[revised] != (await mesh.catalogue("I"))[revised]
    # G's operator sees the difference and runs a backup sync from I, by hand
    await mesh.link("G", "i-backup", "I", "shared01", enabled=False)
    code, out, err = await mesh.nodes["G"].wiscat("harvest", "i-backup", "--backup-sync")
    assert code == 0, err
    assert f"took: {revised}" in out
    assert out.count("took:") == 1
    at_g, at_i = await mesh.catalogue("G"), await mesh.catalogue("I")
    assert at_g == at_i
    g_stamp = (await mesh.datestamps("G"))[("shared01", revised)]
    i_stamp = (await mesh.datestamps("I"))[("shared01", revised)]
    assert g_stamp == i_stamp.replace(microsecond=0)  # the source's datestamp is kept
    # G's copy is not news to H: nothing moves, nothing loops
    await assert_quiet_round(mesh)
    assert await mesh.catalogue("H") == at_i


async def test_a_node_restores_its_own_set_through_a_recovery_link(mesh: Mesh) -> None:
    """Seed 002: G lost its own-area records; it restores them from H, into its own set."""
    for name in ("G", "H"):
        await mesh.add_node(name)
    await mesh.start()
    await mesh.link("H", "g", "G", own("G"))
    made = [await mesh.put("G", n, "g") for n in range(5)]
    await mesh.round()
    before = await mesh.catalogue("G")

    # G's database is lost and rebuilt empty
    g = mesh.nodes["G"]
    await mesh.stop("G")
    await drop_database(mesh.template_url, g.database_url)
    g.database_url = await clone_template(mesh.template_url)
    await mesh.start("G")
    assert await mesh.catalogue("G") == {}

    run = await mesh.link("G", "recover", "H", own("G"), into=own("G"), recovery=True)
    assert run is not None and run["added"] == 5
    restored = await mesh.catalogue("G")
    assert restored == before
    assert all(restored[i][1] == {own("G")} for i in made)
    # H sees its own copies come back unchanged: no churn
    [run] = await mesh.round([("H", "g")])
    assert (run["added"], run["updated"]) == (0, 0)


async def test_concurrent_writes_at_every_node_during_rounds(mesh: Mesh) -> None:
    """Writes at every node while rounds run in random order: the final state is equal."""
    names = ["A", "B", "C"]
    await full_mesh(mesh, names, per_node=3)
    rng = random.Random(2026)
    stop = asyncio.Event()

    async def writer(name: str) -> None:
        versions: dict[int, int] = {}  # record number -> its latest version (only ever grows)
        live: list[str] = []
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.5 or not versions:
                n = 100 + len(versions)
                versions[n] = 0
                live.append(await mesh.put(name, n, name.lower()))
            elif choice < 0.8 or not live:
                n = rng.choice(list(versions))
                versions[n] += 1
                identifier = await mesh.put(name, n, name.lower(), version=versions[n])
                if identifier not in live:
                    live.append(identifier)  # a revision brings a deleted record back
            else:
                await mesh.delete(name, live.pop(rng.randrange(len(live))))
            await asyncio.sleep(rng.uniform(0, 0.05))

    writers = [asyncio.create_task(writer(name)) for name in names]
    for _ in range(4):
        await mesh.round(concurrent=True, shuffle=rng)
    stop.set()
    await asyncio.gather(*writers)
    for _ in range(2):
        await mesh.round(concurrent=True, shuffle=rng)
    catalogue = await mesh.assert_converged()
    assert len(catalogue) > 9
    for identifier, (_, sets, deleted) in catalogue.items():
        assert deleted or len(sets) == 1, identifier


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
    made = [await mesh.put("A", n, "a") for n in range(4)]
    worst_order = [("C", "a-via-b"), ("B", "a")]  # the relay runs before its source
    await mesh.round(worst_order)
    await mesh.round(worst_order)
    assert set(await mesh.assert_converged()) == set(made)

    gone = made[0]
    await mesh.delete("A", gone)
    deleted_at = asyncio.get_running_loop().time()
    await mesh.round(worst_order)
    assert not (await mesh.catalogue("C"))[gone][2]  # not yet: the relay ran first
    await mesh.round(worst_order)
    catalogue = await mesh.assert_converged()
    assert catalogue[gone] == (None, frozenset(), True)
    assert all(not catalogue[i][2] for i in made[1:])

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
    final = await mesh.assert_converged()
    assert set(final) == set(made[1:])
