-- name: wis2_item --
-- The current form of WCMP2 record $1: its revision, content (null when deleted) and whether it
-- is deleted.
select revision, content, deleted
from wis2_records
where wcmp2_id = $1

-- name: wis2_revision --
-- The content of revision $2 of WCMP2 record $1.
select content
from wis2_revisions
where wcmp2_id = $1 and revision = $2

-- name: wis2_items_page --
-- One page of the records not deleted, by id: $1 of them from the $2nd on, and how many there
-- are in all; one statement, so that the count and the page are of one snapshot.
select
    (select count(*) from wis2_records where not deleted) as matched,
    coalesce(
        (
            select array_agg(p.content order by p.wcmp2_id)
            from (
                select wcmp2_id, content
                from wis2_records
                where not deleted
                order by wcmp2_id
                limit $1 offset $2
            ) as p
        ),
        '{}'
    ) as contents

-- name: wis2_counts --
-- The dashboard's WIS 2.0 counts: records served, records that cannot be made valid, outbox
-- messages not yet sent (pending), and those of them a send has failed at least once.
select
    (select count(*) from wis2_records where not deleted) as served,
    (select count(*) from wis2_invalid) as invalid,
    (select count(*) from wis2_outbox where sent_at is null) as pending,
    (select count(*) from wis2_outbox where sent_at is null and attempts > 0) as failed

-- name: wis2_invalid --
-- The records that cannot be made valid, and why, newest first; $1 at most.
select identifier, reasons, report, source_datestamp, noted_at
from wis2_invalid
order by noted_at desc, identifier
limit $1
