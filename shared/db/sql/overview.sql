-- name: sets_overview --
-- Each set with its live and deleted records and its last change.
select s.spec, s.kind,
       count(m.identifier) filter (where not m.deleted) as live,
       count(m.identifier) filter (where m.deleted) as deleted,
       max(m.datestamp) as last_change
from sets s
left join set_members m on m.set_spec = s.spec
group by s.spec, s.kind
order by s.kind = 'own' desc, s.spec

-- name: links_overview --
-- Each link with its last run and its peer's stream of change hints.
select l.name, l.base_url, l.remote_set, l.local_set, l.enabled, l.every, l.created_at,
       l.last_success_at, l.last_error, l.high_water_mark, l.run_requested,
       r.id as run_id, r.mode, r.status, r.started_at, r.finished_at, r.added, r.updated,
       r.unchanged, r.deleted, r.refused, r.refusals, r.quarantined, r.error,
       l.hints, s.peer is not null as hint_known, s.url as hint_url,
       s.connected_since as hint_connected_since, s.last_hint_at,
       s.last_error as hint_error, s.last_error_at as hint_error_at
from links l
left join harvest_runs r on r.id = l.last_run_id
left join hint_streams s on s.peer = l.base_url
order by l.name

-- name: arrivals_per_day --
-- Records (and deletions) whose current datestamp falls on each of the last $1 days.
select date_trunc('day', datestamp) as day, count(*) as records
from records
where datestamp >= date_trunc('day', now()) - make_interval(days => $1 - 1)
group by 1
order by 1

-- name: run_history --
-- Finished runs of the last $1 days, oldest first: when, how long, how they ended.
select link, mode, status, finished_at, extract(epoch from finished_at - started_at) as seconds
from harvest_runs
where finished_at >= now() - make_interval(days => $1)
order by finished_at
