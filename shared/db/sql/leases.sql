-- A link's lease is two things: its row (lease_owner, lease_expires), which says who runs it and
-- until when, and a session-level advisory lock of key (29401, hashtext(name)) that the holder
-- takes first, on a connection of its own kept for the whole run. PostgreSQL releases that lock
-- when the holder's session ends, however it ends (a SIGKILL, a crash, a machine gone), so a lease
-- whose lock nobody holds is free at once; lease_expires stays as the backstop for a holder that is
-- alive but stuck. A peer host's slots are advisory locks of key (29402, hashtext(host || ' ' ||
-- slot)), taken on the same connection before the lease: WISCAT_HARVEST_PER_HOST holds across all
-- the harvester processes of one database. Takers lock the link's row first (skip locked), so the
-- lock and the row change together for everyone else.

-- name: free_due_links --
-- Enabled links due to run (their regular time has come, or a hint is pending) whose lease is
-- free (never taken or given back, run out, or its holder's session gone: no session holds its
-- lock), with their peer's URL: the $2 due first of
-- each peer host (the host and port of its URL), at most $1 in all, the oldest due first. A full
-- host's links then never crowd out the others. Takes nothing.
select name, base_url from (
    select name, base_url, due_at,
           row_number() over (
               partition by substring(base_url from '^[^:]*://([^/?#]*)') order by due_at
           ) as nth
    from (select *, case when hint_pending then least(next_run_at, now()) else next_run_at end
                    as due_at
          from links) l
    where enabled and (next_run_at <= now() or hint_pending)
      and (lease_expires is null or lease_expires < now()
           -- not correlated: the lock table is read once (a hashed subplan), not once a link
           or (hashtext(l.name)::bigint & 4294967295)::oid not in (
               select objid from pg_locks
               where locktype = 'advisory' and granted and objsubid = 2 and classid = 29401
                 and database = (select oid from pg_database where datname = current_database())))
) due
where nth <= $2
order by due_at
limit $1

-- name: take_lease --
-- Lease link $1 for worker $2 for $3 on this session, if it is free (with $4, only if it is
-- enabled and due): the session takes its lock, then the row; the row is taken without the lock
-- only once its lease is out (released, or run out: a holder alive but stuck). session_held: the
-- lock is this session's. A pending hint is served by this run: cleared (hinted: there was one;
-- hinted_until: the change it announced; hint_only: the link was due by the hint alone, so its
-- regular time stays). No row: no such link, or another worker holds it.
with link as (
    select name, lease_owner, lease_expires, next_run_at, hint_pending, hint_until from links
    where name = $1
      and (not $4::boolean or (enabled and (next_run_at <= now() or hint_pending)))
    for no key update skip locked
), held as (
    select pg_try_advisory_lock(29401, hashtext(name)) as session_held, lease_owner, lease_expires,
           next_run_at, hint_pending, hint_until
    from link
)
update links l
set lease_owner = $2, lease_expires = now() + $3::interval, hint_pending = false, hint_until = null
from held
where l.name = $1
  and (held.session_held or held.lease_expires is null or held.lease_expires < now())
returning l.*, held.session_held, held.hint_pending as hinted, held.hint_until as hinted_until,
          $4::boolean and held.next_run_at > now() as hint_only

-- name: hold_link_lock --
-- Take link $1's lock on this session if nobody holds it (a lease taken without it, or a session
-- opened again after its connection was lost): whether this session holds it now.
select pg_try_advisory_lock(29401, hashtext($1))

-- name: take_host_slot --
-- Take slot $2 of peer host $1 on this session if it is free: whether it was.
select pg_try_advisory_lock(29402, hashtext($1 || ' ' || ($2::integer)::text))

-- name: unlock_session --
-- Release every advisory lock of this session (its link's and its host slot), in the
-- transaction that gave the row back: a taker, which locks the row first, sees both free at once.
select pg_advisory_unlock_all()
