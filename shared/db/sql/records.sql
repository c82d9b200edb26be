-- name: ensure_set --
-- Create a set if it does not exist yet (its name and kind are kept if it does).
insert into sets (spec, name, kind) values ($1, $2, $3)
on conflict (spec) do nothing

-- name: upsert_records --
-- Write a batch of live records into set $1 in one statement; returns each identifier's outcome.
-- $6 is the protected set: a record that is (or was) a member of it is refused unless $1 = $6.
-- $8 is the link writing (null: a local write), kept as the copy's source; $9, whether a
-- deletion here holds against older copies (a harvest: see below). With $7, an incoming
-- copy that differs in content but not in gmd:dateStamp from a copy another link wrote (or, where
-- that link is not known, from a copy of other sets only) is refused: two peers that disagree on
-- it would otherwise replace each other's copy at each run. $10 holds the XML IDs of each
-- document (migration 0019).
with incoming as (
    -- the identifiers are distinct (the caller keeps a repeated one's last occurrence); the
    -- documents stay in $5 until they are written, so no step of the plan copies or sorts them
    select identifier, md_datestamp, content_hash, xml_ids, position
    from unnest($2::text[], $3::timestamptz[], $4::bytea[], $10::text[])
         with ordinality as t (identifier, md_datestamp, content_hash, xml_ids, position)
),
existing as (
    select r.identifier, r.deleted, r.content_hash, r.md_datestamp, r.set_specs, r.source
    from records r
    where r.identifier in (select identifier from incoming)
    order by r.identifier
    for update
),
classified as (
    select i.identifier, i.md_datestamp, i.content_hash, i.xml_ids, i.position,
        case
            when $6::text is not null and $6::text <> $1::text and exists (
                select 1 from set_members p where p.set_spec = $6::text and p.identifier = i.identifier
            ) then 'refused_protected'
            when e.identifier is null then 'added'
            -- with $9 (a harvest), a deletion is newer than the copy it deleted (invariant 5):
            -- a copy revives the record only with a newer gmd:dateStamp than the tombstone keeps
            -- (none kept, as for a deletion of a record never held here: any copy revives it)
            when e.deleted then
                case
                    when $9::boolean and e.md_datestamp is not null
                        and (i.md_datestamp <= e.md_datestamp or i.md_datestamp is null)
                        and e.md_datestamp <= now() + interval '1 day'
                        then 'refused_deleted'
                    else 'added'
                end
            when e.content_hash = i.content_hash then
                case when $1::text = any (e.set_specs) then 'unchanged' else 'joined' end
            -- a stored gmd:dateStamp far ahead (2102 for 2012, stored before such records were
            -- refused; "far" as shared.iso19139.FUTURE_TOLERANCE) blocks nothing: the copy with
            -- a true date replaces it
            -- a copy without gmd:dateStamp is not shown newer than a dated one: it is older
            when (i.md_datestamp < e.md_datestamp or i.md_datestamp is null)
                and e.md_datestamp <= now() + interval '1 day'
                then 'refused_older'
            when $7::boolean and i.md_datestamp is not distinct from e.md_datestamp
                and case
                    -- the link that wrote the copy may correct it, no other
                    when exists (select 1 from links l where l.name = e.source)
                        then e.source is distinct from $8::text
                    -- a local copy, an older one, or one whose link was removed: by its sets
                    else not ($1::text = any (e.set_specs))
                end
                then 'refused_conflict'
            else 'updated'
        end as outcome
    from incoming i
    left join existing e using (identifier)
),
written as (
    insert into records as r (identifier, datestamp, md_datestamp, content_hash, xml, xml_ids, deleted, set_specs, source)
    -- the transaction's write stamp, taken once (migration 0017: the stamping trigger then skips
    -- each row), not now(), which the trigger replaced a row at a time
    select identifier, (select wiscat_write_stamp()), md_datestamp, content_hash, ($5::text[])[position], xml_ids, false, array[$1::text], $8::text
    from (
        -- each document is taken from $5 after the sort, not sorted with its row: a page's
        -- documents (4.7 MB for 500 records) are more than work_mem, and the sort spilled
        -- them to a temporary file at every page. "offset 0" keeps the subquery whole, so
        -- the documents cannot be taken before it.
        select identifier, md_datestamp, content_hash, xml_ids, position
        from classified
        where outcome in ('added', 'updated', 'joined')
        order by identifier  -- every writer locks rows in one order: no deadlock
        offset 0
    ) as sorted
    on conflict (identifier) do update set
        datestamp = excluded.datestamp,
        md_datestamp = excluded.md_datestamp,
        content_hash = excluded.content_hash,
        xml = excluded.xml,
        xml_ids = excluded.xml_ids,
        -- joined (the same content, newly in this set): its copy is still the first writer's
        source = case
            when not r.deleted and r.content_hash = excluded.content_hash then r.source
            else excluded.source
        end,
        deleted = false,
        set_specs = case
            when r.deleted then excluded.set_specs
            else array(select distinct s from unnest(r.set_specs || excluded.set_specs) as s order by s)
        end
    returning r.identifier
),
membership as (
    -- from written's rows, not classified's: the record's row is then locked before its
    -- membership's, in every writer (a deletion locks them in that order too). Taken from
    -- classified, the memberships could be written first, and a writer that found a record
    -- another had just written (after its snapshot) held its membership while a deletion held
    -- the record: a deadlock.
    insert into set_members as m (set_spec, identifier, datestamp, deleted)
    select $1::text, w.identifier, (select wiscat_write_stamp()), false
    from written w
    order by w.identifier
    on conflict (set_spec, identifier) do update set datestamp = excluded.datestamp, deleted = false
    returning m.identifier
),
other_memberships as (
    -- a content change is news in every set the record is in
    update set_members m set datestamp = (select wiscat_write_stamp())
    from classified c
    where m.identifier = c.identifier and c.outcome = 'updated'
      and c.identifier in (select identifier from written)  -- after the record's row
      and m.set_spec <> $1::text and not m.deleted
    returning m.identifier
)
select identifier, outcome from classified

-- name: delete_records --
-- Take a batch of identifiers out of set $1 in one statement; a record that leaves its last set
-- becomes a tombstone. $3 is the protected set (as for upsert_records); with $4 an unknown
-- identifier is remembered as a tombstone, so the deletion still travels on to harvesters.
-- A tombstone keeps the sets it was deleted from, which its deleted header lists (invariant 4),
-- and the deleted copy's gmd:dateStamp, which a harvested copy must pass to revive it
-- (invariant 5: a deletion is newer than the copy it deleted).
with incoming as (
    select distinct identifier from unnest($2::text[]) as identifier
),
existing as (
    select r.identifier, r.deleted, r.set_specs
    from records r
    where r.identifier in (select identifier from incoming)
    order by r.identifier
    for update
),
classified as (
    select i.identifier,
        case
            -- a tombstone has nothing left to delete, the own set's included
            when e.deleted then 'unchanged'
            when $3::text is not null and $3::text <> $1::text and exists (
                select 1 from set_members p where p.set_spec = $3::text and p.identifier = i.identifier
            ) then 'refused_protected'
            when e.identifier is null then case when $4::boolean then 'remembered' else 'not_found' end
            when e.deleted or not ($1::text = any (e.set_specs)) then 'unchanged'
            when cardinality(array_remove(e.set_specs, $1::text)) = 0 then 'deleted'
            else 'left_set'
        end as outcome
    from incoming i
    left join existing e using (identifier)
),
tombstones as (
    insert into records as r (identifier, datestamp, md_datestamp, content_hash, xml, deleted, set_specs)
    select identifier, (select wiscat_write_stamp()), null, null, null, true, array[$1::text]  -- see upsert_records
    from classified
    where outcome in ('deleted', 'left_set', 'remembered')
    order by identifier  -- every writer locks rows in one order: no deadlock
    on conflict (identifier) do update set  -- md_datestamp is kept
        datestamp = excluded.datestamp,
        deleted = cardinality(array_remove(r.set_specs, $1::text)) = 0,
        xml = case when cardinality(array_remove(r.set_specs, $1::text)) = 0 then null else r.xml end,
        xml_ids = case when cardinality(array_remove(r.set_specs, $1::text)) = 0 then null else r.xml_ids end,
        content_hash = case
            when cardinality(array_remove(r.set_specs, $1::text)) = 0 then null else r.content_hash
        end,
        set_specs = case
            when cardinality(array_remove(r.set_specs, $1::text)) = 0 then r.set_specs
            else array_remove(r.set_specs, $1::text)
        end
    returning r.identifier
),
membership as (
    -- from tombstones' rows: the record's row locked before its membership's (see upsert_records)
    insert into set_members as m (set_spec, identifier, datestamp, deleted)
    select $1::text, t.identifier, (select wiscat_write_stamp()), true
    from tombstones t
    order by t.identifier
    on conflict (set_spec, identifier) do update set datestamp = excluded.datestamp, deleted = true
    returning m.identifier
)
select identifier, outcome from classified

-- name: list_all --
-- One keyset page of the whole catalogue, oldest datestamp first, up to the key ($8, $9)
-- included; the documents as UTF-8 bytes, ready to be sent. textsend gives a text's bytes in the
-- client encoding, which asyncpg always sets to UTF-8; unlike convert_to it does not check again
-- text the server checked when it was stored (a page's read about 10% quicker). xml_mend: the
-- document holds characters XML 1.0 does not allow (migration 0009), to mend as it is served;
-- xml_ids: its XML IDs, where known (migration 0019).
select identifier, datestamp, deleted, set_specs, case when $6::boolean then textsend(xml) end as xml,
       xml_mend, case when $6::boolean then xml_ids end as xml_ids
from records
where (datestamp, identifier) > ($1::timestamptz, $2::text)
  and (datestamp, identifier) <= ($8::timestamptz, $9::text)
  and datestamp >= $3::timestamptz and datestamp < $4::timestamptz and datestamp <= $5::timestamptz
order by datestamp, identifier
limit $7

-- name: list_keys_all --
-- The keys alone of list_all's page.
select datestamp, identifier
from records
where (datestamp, identifier) > ($1::timestamptz, $2::text)
  and datestamp >= $3::timestamptz and datestamp < $4::timestamptz and datestamp <= $5::timestamptz
order by datestamp, identifier
limit $6

-- name: count_all --
-- How many records list_all would list in all.
select count(*)
from records
where datestamp >= $1::timestamptz and datestamp < $2::timestamptz and datestamp <= $3::timestamptz

-- name: list_set --
-- One keyset page of one set, oldest datestamp first, up to the key ($9, $10) included; a record
-- that left the set is deleted here.
select m.identifier, m.datestamp, m.deleted, r.set_specs,
       case when $7::boolean and not m.deleted then textsend(r.xml) end as xml, r.xml_mend,
       case when $7::boolean and not m.deleted then r.xml_ids end as xml_ids
from set_members m
join records r using (identifier)
where m.set_spec = $1::text
  and (m.datestamp, m.identifier) > ($2::timestamptz, $3::text)
  and (m.datestamp, m.identifier) <= ($9::timestamptz, $10::text)
  and m.datestamp >= $4::timestamptz and m.datestamp < $5::timestamptz and m.datestamp <= $6::timestamptz
order by m.datestamp, m.identifier
limit $8

-- name: list_keys_set --
-- The keys alone of list_set's page.
select m.datestamp, m.identifier
from set_members m
where m.set_spec = $1::text
  and (m.datestamp, m.identifier) > ($2::timestamptz, $3::text)
  and m.datestamp >= $4::timestamptz and m.datestamp < $5::timestamptz and m.datestamp <= $6::timestamptz
order by m.datestamp, m.identifier
limit $7

-- name: count_set --
-- How many records list_set would list in all.
select count(*)
from set_members m
where m.set_spec = $1::text
  and m.datestamp >= $2::timestamptz and m.datestamp < $3::timestamptz and m.datestamp <= $4::timestamptz

-- name: get_record --
-- One record (or tombstone) by identifier; the document as UTF-8 bytes, xml_mend and xml_ids
-- (list_all).
select identifier, datestamp, deleted, set_specs, textsend(xml) as xml, xml_mend, xml_ids
from records
where identifier = $1

-- name: record_exists --
-- Whether an identifier is known (live or deleted).
select exists (select 1 from records where identifier = $1)

-- name: list_sets --
-- Every set the node has, with its name.
select spec, name, kind from sets order by spec

-- name: earliest_datestamp --
-- The oldest datestamp any list can serve, tombstones included, or null for an empty catalogue:
-- a set's list serves its memberships' datestamps, and a membership keeps its own when its
-- record joins another set (which restamps the record). One index probe per set.
select least(
    (select min(datestamp) from records),
    (select min(oldest.datestamp)
     from sets s
     cross join lateral (
         select m.datestamp from set_members m
         where m.set_spec = s.spec
         order by m.datestamp
         limit 1
     ) oldest)
)

-- name: purge_deleted_records --
-- Drop tombstones older than the retention period (their memberships go with them).
with gone as (
    delete from records where deleted and datestamp < now() - $1::interval returning 1
)
select count(*) from gone

-- name: purge_deleted_memberships --
-- Drop the deleted memberships of live records once older than the retention period.
with gone as (
    delete from set_members where deleted and datestamp < now() - $1::interval returning 1
)
select count(*) from gone

-- name: other_own_set --
-- The own set of this database if it is not $1 (another GISC name in the settings).
select spec from sets where kind = 'own' and spec <> $1 order by spec limit 1

-- name: set_counts --
-- Live and deleted records per set.
select set_spec, count(*) filter (where not deleted) as live, count(*) filter (where deleted) as deleted,
       max(datestamp) as last_change
from set_members
group by set_spec
order by set_spec

-- name: catalogue_counts --
-- Live and deleted records in the whole catalogue.
select count(*) filter (where not deleted) as live, count(*) filter (where deleted) as deleted,
       max(datestamp) as last_change
from records

-- name: get_secret --
-- A node-wide secret by name.
select value from node_secrets where name = $1

-- name: put_secret_if_absent --
-- Store a node-wide secret unless another replica stored one first; returns the value in force.
with inserted as (
    insert into node_secrets (name, value) values ($1, $2)
    on conflict (name) do nothing
    returning value
)
select value from inserted
union all
select value from node_secrets where name = $1
limit 1

-- name: backup_records --
-- Backup synchronisation between two GISCs serving one shared set, never scheduled.
-- A record is taken when there is no live local copy, or when the local copy is older by oai
-- datestamp (the ordinary condition) AND by gmd:dateStamp (an obvious difference of content);
-- a taken record keeps the source's oai:datestamp ($6), the seed's guard against loops.
-- $7 is the protected set, as for upsert_records; $8 the XML IDs of each document (0019).
-- The documents stay in $5 until they are written, as in upsert_records: no sort carries them.
with incoming as (
    select distinct on (identifier) identifier, md_datestamp, content_hash, xml_ids, datestamp, position
    from unnest($2::text[], $3::timestamptz[], $4::bytea[], $6::timestamptz[], $8::text[])
         with ordinality as t (identifier, md_datestamp, content_hash, datestamp, xml_ids, position)
    order by identifier, position desc
),
existing as (
    select r.identifier, r.deleted, r.datestamp, r.content_hash, r.md_datestamp
    from records r
    where r.identifier in (select identifier from incoming)
    order by r.identifier
    for update
),
classified as (
    select i.identifier, i.md_datestamp, i.content_hash, i.xml_ids, i.datestamp, i.position,
        case
            when $7::text is not null and $7::text <> $1::text and exists (
                select 1 from set_members p where p.set_spec = $7::text and p.identifier = i.identifier
            ) then 'refused_protected'
            when e.identifier is null then 'taken_new'
            -- a deletion is newer than the copy it deleted (invariant 5)
            when e.deleted and e.md_datestamp is not null
                and (i.md_datestamp <= e.md_datestamp or i.md_datestamp is null)
                then 'not_newer'
            when e.deleted then 'taken_new'
            when e.content_hash = i.content_hash then 'same'
            when e.datestamp >= i.datestamp then 'not_newer'
            when i.md_datestamp is null then 'not_newer'
            when e.md_datestamp is not null and i.md_datestamp <= e.md_datestamp then 'not_newer'
            else 'taken'
        end as outcome
    from incoming i
    left join existing e using (identifier)
),
written as (
    insert into records as r (identifier, datestamp, md_datestamp, content_hash, xml, xml_ids, deleted, set_specs)
    select identifier, datestamp, md_datestamp, content_hash, ($5::text[])[position], xml_ids, false, array[$1::text]
    from (
        select identifier, datestamp, md_datestamp, content_hash, xml_ids, position
        from classified
        where outcome in ('taken_new', 'taken')
        order by identifier  -- every writer locks rows in one order: no deadlock
        offset 0  -- the subquery whole: each document taken after the sort
    ) as sorted
    on conflict (identifier) do update set
        datestamp = excluded.datestamp,
        md_datestamp = excluded.md_datestamp,
        content_hash = excluded.content_hash,
        xml = excluded.xml,
        xml_ids = excluded.xml_ids,
        source = null,  -- newer by both dates: no link's copy to hold to
        deleted = false,
        set_specs = case
            when r.deleted then excluded.set_specs
            else array(select distinct s from unnest(r.set_specs || excluded.set_specs) as s order by s)
        end
    returning r.identifier
),
membership as (
    -- after written (see upsert_records): the record's row locked before its membership's
    insert into set_members as m (set_spec, identifier, datestamp, deleted)
    select $1::text, c.identifier, c.datestamp, false
    from classified c
    where c.outcome in ('taken_new', 'taken') and c.identifier in (select identifier from written)
    order by c.identifier
    on conflict (set_spec, identifier) do update set datestamp = excluded.datestamp, deleted = false
    returning m.identifier
)
select identifier, outcome from classified

-- name: keep_datestamps --
-- Whether the writes that follow in this transaction keep the datestamps they are given ($1 'on')
-- or are stamped as every write is ('off'): migration 0008's triggers read it.
select set_config('wiscat.keep_datestamps', $1, true)

-- name: changes_since --
-- The catalogue for WIS monitoring: live records, and the records inserted or modified and the
-- records deleted since $1 (00 UTC today).
select count(*) filter (where not deleted) as live,
       count(*) filter (where not deleted and datestamp >= $1) as inserted_modified,
       count(*) filter (where deleted and datestamp >= $1) as deleted
from records

-- name: list_horizon --
-- Where a list beginning now must stop (invariant 2): before this statement's start, and
-- before the start of every transaction of this database still in progress that has a
-- transaction id (it has written, or is writing: migration 0008 stamps its rows with a time
-- taken after it got its id: not before this statement's start, unless it was seen here).
-- Also how many such transactions this role may not see the start of (sessions of another
-- role, without pg_read_all_stats): none, in a node whose processes share one role.
select least(
           statement_timestamp(),
           min(a.xact_start) filter (where a.backend_xid is not null)
       ) as horizon,
       count(*) filter (where a.backend_xid is not null and a.xact_start is null) as hidden,
       (array_agg(a.pid order by a.xact_start) filter (
           where a.backend_xid is not null and a.xact_start is not null
       ))[1] as oldest_pid
from pg_stat_activity a
where a.datname = current_database() and a.pid <> pg_backend_pid()

-- name: set_has_subsets --
-- Whether some set lies below set $1 (OAI-PMH 2.0 §2.6: 'A:B' and 'A:B:C' lie below 'A'); a list
-- of $1 is then read by the _tree queries, which take their records too (§2.7.2), else by the
-- _set ones. starts_with, not like: a setSpec may hold '_', which like reads as any character.
select exists (select 1 from sets where starts_with(spec, $1::text || ':'))

-- name: list_keys_tree --
-- The keys alone of list_tree's page (the arguments of list_keys_set).
with subtree as (
    select array_agg(spec) as specs
    from sets
    where spec = $1::text or starts_with(spec, $1::text || ':')
)
select lead.datestamp, lead.identifier
from subtree
cross join unnest(subtree.specs) as s (spec)
cross join lateral (
    select m.datestamp, m.identifier
    from set_members m
    where m.set_spec = s.spec
      and (m.datestamp, m.identifier) > ($2::timestamptz, $3::text)
      and m.datestamp >= $4::timestamptz and m.datestamp < $5::timestamptz and m.datestamp <= $6::timestamptz
      and not exists (
          select 1 from set_members o
          where o.identifier = m.identifier and o.set_spec = any (subtree.specs)
            and (o.datestamp, o.set_spec) > (m.datestamp, m.set_spec)
      )
    order by m.datestamp, m.identifier
    limit $7
) lead
order by lead.datestamp, lead.identifier
limit $7

-- name: list_tree --
-- One keyset page of set $1 and every set below it (OAI-PMH 2.0 §2.7.2), with list_set's
-- arguments and columns. A record is listed once, keyed by its lead: the one of its memberships
-- there with the greatest (datestamp, set_spec). A record of A:B and A:C is thus listed at its
-- latest change in either (invariant 1: a membership change is news in A), at one key, the same
-- on every page; it is deleted here only once it has left all of them. Each set's memberships
-- are read in the order of set_members_keyset, a page's worth of leads at most, and merged.
with subtree as (
    select array_agg(spec) as specs
    from sets
    where spec = $1::text or starts_with(spec, $1::text || ':')
),
page as (
    select lead.identifier, lead.datestamp,
           lead.deleted and not exists (
               select 1 from set_members l
               where l.identifier = lead.identifier and not l.deleted
                 and l.set_spec = any (subtree.specs)
           ) as deleted
    from subtree
    cross join unnest(subtree.specs) as s (spec)
    cross join lateral (
        select m.identifier, m.datestamp, m.deleted
        from set_members m
        where m.set_spec = s.spec
          and (m.datestamp, m.identifier) > ($2::timestamptz, $3::text)
          and (m.datestamp, m.identifier) <= ($9::timestamptz, $10::text)
          and m.datestamp >= $4::timestamptz and m.datestamp < $5::timestamptz and m.datestamp <= $6::timestamptz
          and not exists (
              select 1 from set_members o
              where o.identifier = m.identifier and o.set_spec = any (subtree.specs)
                and (o.datestamp, o.set_spec) > (m.datestamp, m.set_spec)
          )
        order by m.datestamp, m.identifier
        limit $8
    ) lead
    order by lead.datestamp, lead.identifier
    limit $8
)
select p.identifier, p.datestamp, p.deleted, r.set_specs, r.xml, r.xml_mend, r.xml_ids
from page p
-- one lookup a record, in the page's order, so that the documents are never sorted (limit 1
-- keeps the planner from making this a hash join, which would)
cross join lateral (
    select set_specs, case when $7::boolean and not p.deleted then textsend(xml) end as xml,
           xml_mend, case when $7::boolean and not p.deleted then xml_ids end as xml_ids
    from records
    where identifier = p.identifier
    limit 1
) r
order by p.datestamp, p.identifier

-- name: count_tree --
-- How many records list_tree would list in all: one a record, at its lead's datestamp.
select count(*)
from (
    select max(m.datestamp) as datestamp
    from set_members m
    where m.set_spec = any (
        select spec from sets where spec = $1::text or starts_with(spec, $1::text || ':')
    )
    group by m.identifier
) lead
where lead.datestamp >= $2::timestamptz and lead.datestamp < $3::timestamptz
  and lead.datestamp <= $4::timestamptz

-- name: xml_checked --
-- Whether the documents the writes that follow in this transaction store were checked by their
-- writer ($1 'on': lxml wrote them, so they hold no character XML 1.0 does not allow) or are to
-- be checked as they are written ('off'): migration 0009's trigger reads it.
select set_config('wiscat.xml_checked', $1, true)

-- name: changed_sets --
-- The sets in which a datestamp lies after $1 and at or before $2 (a change hint's range), and
-- the union set $3 when a record's does: one index probe a set (set_members_keyset), one for
-- the records (records_keyset).
select s.spec
from sets s
where exists (
    select 1 from set_members m
    where m.set_spec = s.spec and m.datestamp > $1::timestamptz and m.datestamp <= $2::timestamptz
)
union all
select $3::text
where exists (
    select 1 from records r where r.datestamp > $1::timestamptz and r.datestamp <= $2::timestamptz
)
