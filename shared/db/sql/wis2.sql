-- name: cursor --
-- Where the renderer has read up to, locked until the page's transaction ends.
select datestamp, identifier, rendered_with from wis2_cursor where one for update

-- name: restart --
-- A configuration the renderer has not rendered with: read every record again from the start.
update wis2_cursor set datestamp = null, identifier = '', rendered_with = $1 where one

-- name: move_cursor --
update wis2_cursor set datestamp = $1, identifier = $2 where one

-- name: changed_records --
-- The next page of records changed after the cursor, up to the list bound, in datestamp order.
select identifier, datestamp, deleted, set_specs, xml
from records
where (datestamp, identifier) > ($1, $2) and datestamp <= $3
order by datestamp, identifier
limit $4

-- name: announced_of --
-- The WCMP2 records this node has announced for one identifier, and the one of the WCMP2 id
-- its record now converts to ($2; null: none), whichever record that was announced for.
select wcmp2_id, centre_id, revision, deleted from wis2_records
where identifier = $1 or wcmp2_id = $2

-- name: announced_of_page --
-- announced_of for the identifiers of a page ($1) and the WCMP2 ids they convert to ($2).
select identifier, wcmp2_id, centre_id, revision, deleted
from wis2_records where identifier = any($1::text[]) or wcmp2_id = any($2::text[])

-- name: put_revision --
insert into wis2_revisions (wcmp2_id, revision, content) values ($1, $2, $3)
on conflict do nothing

-- name: put_record --
insert into wis2_records as r
    (wcmp2_id, identifier, centre_id, revision, content, deleted, source_datestamp, announced_at)
values ($1, $2, $3, $4, $5, false, $6, now())
on conflict (wcmp2_id) do update
set identifier = excluded.identifier, centre_id = excluded.centre_id,
    revision = excluded.revision, content = excluded.content, deleted = false,
    source_datestamp = excluded.source_datestamp, rendered_at = now(),
    announced_at = case when $7 then now() else r.announced_at end

-- name: delete_record --
update wis2_records
set deleted = true, content = null, source_datestamp = $2, rendered_at = now(),
    announced_at = now()
where wcmp2_id = $1

-- name: queue --
insert into wis2_outbox (message_id, wcmp2_id, centre_id, relation, revision, length, sha512)
values ($1, $2, $3, $4, $5, $6, $7)

-- name: note_invalid --
insert into wis2_invalid (identifier, reasons, report, source_datestamp)
values ($1, $2, $3, $4)
on conflict (identifier) do update
set reasons = excluded.reasons, report = excluded.report,
    source_datestamp = excluded.source_datestamp, noted_at = now()

-- name: clear_invalid --
delete from wis2_invalid where identifier = $1

-- name: pending --
-- Unsent messages due now, oldest first, and none behind an earlier unsent one of its record.
select o.message_id::text, o.wcmp2_id, o.centre_id, o.relation, o.revision, o.length, o.sha512,
       v.content
from wis2_outbox o
left join wis2_revisions v on v.wcmp2_id = o.wcmp2_id and v.revision = o.revision
where o.sent_at is null and coalesce(o.retry_at, '-infinity') <= now()
  and not exists (
      select 1 from wis2_outbox e
      where e.wcmp2_id = o.wcmp2_id and e.sent_at is null
        and (e.created_at, e.queued) < (o.created_at, o.queued)
  )
order by o.created_at, o.queued
limit $1

-- name: mark_sent --
update wis2_outbox set sent_at = now(), attempts = attempts + 1, last_error = null, retry_at = null
where message_id = any($1::uuid[])

-- name: mark_failed --
-- A message not sent: its error, and when to try again (backoff doubling, at most 10 minutes).
update wis2_outbox
set attempts = attempts + 1, last_error = $2,
    retry_at = now() + least(interval '1 second' * power(2, least(attempts, 10)),
                             interval '10 minutes')
where message_id = $1::uuid

-- name: due_daily --
-- Records announced, not deleted, last queued over a day ago and with nothing unsent.
select wcmp2_id, centre_id, revision, octet_length(content) as length, content
from wis2_records r
where not deleted and announced_at < now() - interval '1 day'
  and not exists (select 1 from wis2_outbox o where o.wcmp2_id = r.wcmp2_id and o.sent_at is null)
order by announced_at
limit $1
for update skip locked

-- name: live_records --
-- Records announced and not deleted (all, or those of the given identifiers or wcmp2 ids).
select wcmp2_id, centre_id, revision, octet_length(content) as length, content
from wis2_records
where not deleted and ($1::text[] is null or identifier = any($1) or wcmp2_id = any($1))
order by wcmp2_id

-- name: touch --
update wis2_records set announced_at = now() where wcmp2_id = any($1)

-- name: status --
select (select count(*) from wis2_records where not deleted) as announced,
       (select count(*) from wis2_records where deleted) as deleted,
       (select count(*) from wis2_outbox where sent_at is null) as pending,
       (select count(*) from wis2_outbox where sent_at is null and last_error is not null)
           as failing,
       (select count(*) from wis2_invalid) as invalid,
       (select max(sent_at) from wis2_outbox) as last_sent,
       (select min(created_at) from wis2_outbox where sent_at is null) as oldest_pending,
       (select datestamp from wis2_cursor) as cursor

-- name: failing --
select message_id::text, wcmp2_id, relation, attempts, last_error, created_at
from wis2_outbox where sent_at is null and last_error is not null
order by created_at limit $1

-- name: invalid --
select identifier, reasons, noted_at from wis2_invalid order by identifier limit $1

-- name: backlog --
select count(*) as pending,
       extract(epoch from now() - min(created_at)) as oldest
from wis2_outbox where sent_at is null
