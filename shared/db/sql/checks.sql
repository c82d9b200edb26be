-- name: upsert_check --
-- Create or replace a scheduled consistency check; it falls due at once.
insert into checks (name, set_spec, source_url, peer_urls, sample, every, enabled)
values ($1, $2, $3, $4, $5, $6, $7)
on conflict (name) do update
set set_spec = excluded.set_spec, source_url = excluded.source_url,
    peer_urls = excluded.peer_urls, sample = excluded.sample, every = excluded.every,
    enabled = excluded.enabled, next_run_at = now()
returning *

-- name: all_checks --
-- Every scheduled check with its latest report's outcome and time.
select c.*, r.id as last_report_id, r.outcome as last_outcome, r.finished_at as last_run_at
from checks c
left join lateral (
    select id, outcome, finished_at from check_reports
    where check_name = c.name order by finished_at desc limit 1
) r on true
order by c.name

-- name: remove_check --
-- Delete a scheduled check (its reports stay, without a name).
delete from checks where name = $1 returning name

-- name: lease_due_check --
-- Lease one due check for $2; several harvester processes never run the same check at once.
update checks c
set lease_owner = $1, lease_expires = now() + $2::interval
where c.name = (
    select name from checks
    where enabled and next_run_at <= now() and (lease_expires is null or lease_expires < now())
    order by next_run_at
    limit 1
    for update skip locked
)
returning c.*

-- name: release_check --
-- Done with a check: its next run is due $3.
update checks set lease_owner = null, lease_expires = null, next_run_at = $3
where name = $1 and lease_owner = $2

-- name: insert_report --
-- Store a check's report while worker $8 holds the check's lease (no row otherwise: the check
-- was removed, or is another worker's now).
insert into check_reports (check_name, set_spec, source_url, started_at, finished_at, outcome,
                           report)
select $1, $2, $3, $4, $5, $6, $7::jsonb
where exists (select 1 from checks where name = $1 and lease_owner = $8)
returning id

-- name: renew_check_lease --
-- Keep a check's lease alive while it runs.
update checks set lease_expires = now() + $3::interval
where name = $1 and lease_owner = $2
returning name

-- name: recent_reports --
-- The newest reports, of one check ($1) or of all (null), without their item lists.
select id, check_name, set_spec, source_url, started_at, finished_at, outcome,
       (report - 'peers') || jsonb_build_object('peers', (
           select coalesce(jsonb_agg(p - 'items'), '[]'::jsonb)
           from jsonb_array_elements(report -> 'peers') p
       )) as report
from check_reports
where $1::text is null or check_name = $1
order by finished_at desc
limit $2

-- name: get_report --
-- One whole report.
select id, check_name, set_spec, source_url, started_at, finished_at, outcome, report
from check_reports where id = $1

-- name: latest_per_check --
-- The latest report of every scheduled check (for the metrics).
select distinct on (check_name) check_name, outcome, finished_at, report
from check_reports
where check_name is not null
order by check_name, finished_at desc

-- name: request_check --
-- Run a check at the harvester's next poll, if it is enabled: whether it is (no row: no such check).
with asked as (update checks set next_run_at = now() where name = $1 and enabled)
select enabled from checks where name = $1

-- name: purge_reports --
-- Drop reports that finished before $1 ago, but the latest of each check (its metrics).
with gone as (
    delete from check_reports r
    where r.finished_at < now() - $1::interval
      and r.id <> coalesce((
          select latest.id from check_reports latest
          where latest.check_name = r.check_name
          order by latest.finished_at desc, latest.id desc
          limit 1
      ), 0)
    returning 1
)
select count(*) from gone
