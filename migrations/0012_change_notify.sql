-- Change hints (docs/links.md#change-hints): a write transaction in which a datestamp moved
-- sends one notification on channel wiscat_changes when it commits, whatever SQL wrote it.
--
-- AFTER row triggers, so that only rows actually written count: a BEFORE INSERT trigger also
-- fires for a row that ON CONFLICT then leaves alone (a content-hash no-op), and a hint for a
-- write that changed nothing would echo around a mesh of relays. Each row sends the same
-- payload, the transaction's write stamp (wiscat_write_stamp, one a transaction), and
-- PostgreSQL delivers identical notifications of one transaction once: a page of 500 records is
-- one notification. A backup synchronisation keeps its source's datestamps and has no stamp:
-- its payload is empty. The sets that changed are not in the payload (it would differ row by
-- row, and so no longer fold into one): a provider reads them from set_members and records,
-- between the bound it last checked and the bound lists stop at now.
create function wiscat_notify_change() returns trigger
language plpgsql as $$
begin
    perform pg_notify('wiscat_changes', coalesce(current_setting('wiscat.write_stamp', true), ''));
    return null;
end
$$;

create trigger records_notify_insert
after insert on records
for each row execute function wiscat_notify_change();

create trigger records_notify_update
after update on records
for each row when (new.datestamp is distinct from old.datestamp)
execute function wiscat_notify_change();

create trigger set_members_notify_insert
after insert on set_members
for each row execute function wiscat_notify_change();

create trigger set_members_notify_update
after update on set_members
for each row when (new.datestamp is distinct from old.datestamp)
execute function wiscat_notify_change();
