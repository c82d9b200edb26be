-- name: insert_link --
-- Create a link.
insert into links (name, base_url, remote_set, local_set, metadata_prefix, strategy, every,
                   full_every, overlap, window_slices, enabled, recovery, hints)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
returning *

-- name: get_link --
-- One link by name.
select * from links where name = $1

-- name: all_links --
-- Every link, by name.
select * from links order by name

-- name: remove_link --
-- Delete a link (its runs go with it; its records stay).
delete from links where name = $1 returning name

-- name: update_link_source --
-- Point a link at another peer, remote set or metadataPrefix; its high-water mark is reset so the
-- next run is a full, idempotent harvest (WIS guidelines: a harvester that switches providers
-- must take precautions).
update links
set base_url = $2, remote_set = $3, metadata_prefix = coalesce($4, metadata_prefix),
    local_set = coalesce($5, local_set),
    high_water_mark = null, last_full_at = null, window_index = 0, next_run_at = now()
where name = $1
returning *

-- name: records_of_link_in_set --
-- Live records link $1 wrote that are filed under set $2 (a rare question: no index needed).
select count(*) from records where source = $1 and $2 = any(set_specs) and not deleted

-- name: set_link_schedule --
-- Change a link's intervals, overlap and window slices; its high-water mark stays. A shorter
-- interval takes effect at once: the next run is due no later than now plus the new one.
update links
set every = $2, full_every = $3, overlap = $4, window_slices = $5,
    next_run_at = least(next_run_at, now() + $2)
where name = $1
returning *

-- name: set_link_enabled --
-- Enable or disable a link.
update links set enabled = $2 where name = $1 returning *

-- name: set_link_hints --
-- Subscribe a link to its peer's hints, or not (a pending hint is dropped with them).
update links set hints = $2, hint_pending = hint_pending and $2,
    hint_until = case when $2 then hint_until end
where name = $1 returning *

-- name: hint_link --
-- A hint for link $1 (docs/links.md, "Harvest on a hint"): its normal run is due now, once,
-- however many hints come before that run starts; $2, the change's datestamp bound (null: a
-- catch-up), keeps the earliest one pending. Nothing else moves: not the high-water mark, not the
-- regular next run. Only an enabled link that takes hints: whether it was one.
update links set hint_pending = true, hint_until = least(hint_until, $2)
where name = $1 and enabled and hints
returning name

-- name: set_link_strategy --
-- Harvest a link by ListRecords or by ListIdentifiers + GetRecord; its source and records are
-- the same, so its high-water mark stays.
update links set strategy = $2 where name = $1 returning *

-- name: request_run --
-- Ask the harvester to run a link as soon as it can (the WIS emergency update), if it is enabled:
-- whether it is (no row: no such link).
with asked as (
    update links set run_requested = $2, next_run_at = now() where name = $1 and enabled
)
select enabled from links where name = $1

-- name: renew_lease --
-- Keep a lease alive while a long list is harvested.
update links set lease_expires = now() + $3::interval
where name = $1 and lease_owner = $2
returning name

-- name: release_lease --
-- Release a lease and schedule the next run at $3. A run asked for while this one ran ("harvest
-- now", a changed source: next_run_at is no longer $4, its value when the lease was taken) is
-- kept, and falls due at once. With $5 (a run a hint started before the link's regular time)
-- the regular time stays as it was: a hint never moves the schedule.
update links
set lease_owner = null, lease_expires = null,
    next_run_at = case when next_run_at is distinct from $4 or $5 then next_run_at else $3 end,
    run_requested = case when next_run_at is distinct from $4 then run_requested end
where name = $1 and lease_owner = $2

-- name: start_run --
-- Record the start of a harvest run.
insert into harvest_runs (link, mode, from_date, until_date, worker) values ($1, $2, $3, $4, $5)
returning id

-- name: set_run_from --
-- The from a run asked for, once it is known (after the peer's Identify).
update harvest_runs set from_date = $2 where id = $1

-- name: hold_run --
-- The run's status and the pages it has written, its row locked until the transaction ends:
-- each write of a run first checks that the run still runs, and no other worker can close it
-- (take the link over) meanwhile. No row when the run is gone (its link was removed).
select status, pages from harvest_runs where id = $1 for update

-- name: hold_link --
-- Lock the link's row until the transaction ends, before its run's (hold_run): a transaction
-- that changes both takes them in the order the link's removal does (the link, then its runs),
-- so the two never wait for each other.
select 1 from links where name = $1 for no key update

-- name: record_page --
-- Add one page's counts to its run (in the page's own transaction, after hold_run).
update harvest_runs
set pages = pages + 1, bytes = bytes + $2, added = added + $3, updated = updated + $4,
    unchanged = unchanged + $5, deleted = deleted + $6, refused = refused + $7,
    quarantined = quarantined + $8
where id = $1

-- name: finish_run --
-- Close a run with its status and reason.
update harvest_runs
set finished_at = now(), status = $2, error_kind = $3, error = $4,
    deleted = deleted + $5, refused = refused + $6
where id = $1
returning *

-- name: complete_list --
-- A whole list was committed: advance the high-water mark (invariant 3) and note the success;
-- only if the link still harvests the source this list came from ($6 to $8): a source changed
-- during the run keeps the reset high-water mark. No row when it did not.
update links
set high_water_mark = coalesce($2, high_water_mark),
    last_full_at = case when $3 then now() else last_full_at end,
    window_index = $4,
    last_run_id = $5, last_success_at = now(), last_error = null
where name = $1 and base_url = $6 and remote_set is not distinct from $7 and metadata_prefix = $8
returning name

-- name: fail_link --
-- A run failed: keep the high-water mark, store the reason.
update links set last_run_id = $2, last_error = $3 where name = $1

-- name: quarantine_records --
-- Keep records that could not be used, with their raw bytes and the reason; one row per bad
-- record and link: a record quarantined before (same identifier and bytes) gets this run's
-- page, reason and time instead of a second row.
insert into quarantine (link, run_id, page, identifier, reason, raw)
select distinct on (md5(coalesce(identifier, '')), sha256(raw))
    $1, $2, $3, identifier, reason, raw
from unnest($4::text[], $5::text[], $6::bytea[]) as t (identifier, reason, raw)
on conflict (link, md5(coalesce(identifier, '')), sha256(raw)) do update
set run_id = excluded.run_id, page = excluded.page, reason = excluded.reason,
    received_at = now()

-- name: live_in_set --
-- How many of these identifiers are live in a set (for the mass-deletion circuit breaker).
select count(*) from set_members
where set_spec = $1 and identifier = any ($2::text[]) and not deleted

-- name: live_count --
-- Live records in a set.
select count(*) from set_members where set_spec = $1 and not deleted

-- name: recent_runs --
-- The latest runs, newest first (optionally of one link).
select * from harvest_runs
where $1::text is null or link = $1
order by id desc
limit $2

-- name: recent_quarantine --
-- The latest quarantined records, newest first (optionally of one link), without their raw bytes.
select id, link, run_id, page, identifier, reason, length(raw) as size, received_at
from quarantine
where $1::text is null or link = $1
order by received_at desc, id desc
limit $2

-- name: quarantined_record --
-- One quarantined record: what is known of it, and its stored bytes.
select id, link, run_id, page, identifier, reason, received_at, raw
from quarantine
where id = $1

-- name: close_abandoned_runs --
-- Runs of this link still marked running belong to a worker that died (we hold the lease now).
update harvest_runs
set status = 'failed', finished_at = now(), error_kind = 'abandoned',
    error = 'the worker stopped during the run (killed or crashed); the next run starts over from the high-water mark'
where link = $1 and status = 'running'
returning id

-- name: purge_runs --
-- Drop runs that finished before $1 ago, but each link's last run (its state on the dashboard).
with gone as (
    delete from harvest_runs r
    where r.finished_at < now() - $1::interval
      and not exists (select 1 from links l where l.last_run_id = r.id)
    returning 1
)
select count(*) from gone

-- name: purge_quarantine --
-- Drop quarantined records last received before $1 ago (a bad record a peer still sends is
-- received again at each full or window run, and stays).
with gone as (
    delete from quarantine where received_at < now() - $1::interval returning 1
)
select count(*) from gone
