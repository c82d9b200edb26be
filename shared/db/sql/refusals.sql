-- name: record_refusals --
-- One page's refusals by link $1 in run $2, in the page's transaction: keep each refused
-- identifier ($3) with its reason code ($4), the latest refusal per link and identifier; forget
-- the link's earlier refusals of the identifiers it stored on the page ($5); add the page's
-- counts by reason ($6, {"own_set": 50}) to the run.
with forgotten as (
    delete from refused_records
    where link = $1 and identifier = any ($5::text[])
),
counted as (
    update harvest_runs
    set refusals = refusals || coalesce((
        select jsonb_object_agg(e.key, coalesce((refusals ->> e.key)::integer, 0) + e.value::integer)
        from jsonb_each_text($6::jsonb) as e
    ), '{}'::jsonb)
    where id = $2
)
insert into refused_records as r (link, identifier, run_id, reason)
select $1, identifier, $2, reason
from unnest($3::text[], $4::text[]) as t (identifier, reason)
order by identifier  -- every writer locks rows in one order: no deadlock
on conflict (link, identifier) do update
set run_id = excluded.run_id, reason = excluded.reason, refused_at = now()

-- name: refused_of_link --
-- The latest refusals of one link, newest first.
select r.identifier, r.reason, r.run_id, r.refused_at
from refused_records r
where r.link = $1
order by r.refused_at desc, r.identifier
limit $2

-- name: refusals_of_identifiers --
-- The refusals of these identifiers ($1) by the links harvesting base URL $2 (any link: null).
select r.identifier, r.link, r.reason, r.run_id, r.refused_at
from refused_records r
join links l on l.name = r.link
where r.identifier = any ($1::text[]) and ($2::text is null or l.base_url = $2)
order by r.identifier, r.refused_at desc

-- name: purge_refusals --
-- Drop refusals older than $1 (a record a peer still sends is refused again at each full or
-- window run, and stays).
with gone as (
    delete from refused_records where refused_at < now() - $1::interval returning 1
)
select count(*) from gone
