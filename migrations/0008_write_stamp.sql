-- Invariant 2 (no lost update): the datestamp a write gives a record is taken once the writing
-- transaction has a transaction id, which every list can see while the transaction runs (a list
-- stops short of the oldest start among them: shared.db.records.list_horizon). A datestamp from
-- now(), the transaction's start, could be older than that: a transaction that waited on a lock,
-- a slow client or a paused process before its first write had no id while it waited, so a list
-- could pass its start unaware, and the row committed later, behind every harvester's
-- high-water mark, was never listed. The triggers below stamp every write of records and
-- set_members, whatever SQL wrote it, now and in future code: a writer cannot forget it.
--
-- One stamp a transaction, as now() was: the rows of one write (and the memberships it changes)
-- keep one datestamp.
create function wiscat_write_stamp() returns timestamptz
language plpgsql volatile as $$
declare
    stamp text := current_setting('wiscat.write_stamp', true);
begin
    if stamp is null or stamp = '' then
        perform pg_current_xact_id();  -- the transaction has an id from here on, seen by lists
        stamp := clock_timestamp()::text;
        perform set_config('wiscat.write_stamp', stamp, true);  -- until the transaction ends
    end if;
    return stamp::timestamptz;
end
$$;

-- A record's datestamp moves when a writer gives it one, or when what a harvester sees of it
-- (content, deletion, sets) changes; backup synchronisation alone keeps the
-- source's datestamps, saying so for its own transaction.
create function records_write_stamp() returns trigger
language plpgsql as $$
begin
    if current_setting('wiscat.keep_datestamps', true) = 'on' then
        return new;
    end if;
    if tg_op = 'INSERT'
        or new.datestamp is distinct from old.datestamp
        or new.deleted is distinct from old.deleted
        or new.content_hash is distinct from old.content_hash
        or new.set_specs is distinct from old.set_specs
    then
        new.datestamp := wiscat_write_stamp();
    end if;
    return new;
end
$$;

create function set_members_write_stamp() returns trigger
language plpgsql as $$
begin
    if current_setting('wiscat.keep_datestamps', true) = 'on' then
        return new;
    end if;
    if tg_op = 'INSERT'
        or new.datestamp is distinct from old.datestamp
        or new.deleted is distinct from old.deleted
    then
        new.datestamp := wiscat_write_stamp();
    end if;
    return new;
end
$$;

-- A deleted header lists the sets the record was deleted from (invariant 4): a tombstone
-- now keeps its sets. Tombstones written before kept none; their deleted memberships tell them
-- (set before the triggers exist: this moves no datestamp, the deletion being news to no one).
update records r
set set_specs = array(
    select m.set_spec from set_members m
    where m.identifier = r.identifier and m.deleted
    order by m.set_spec
)
where r.deleted and r.set_specs = '{}';

create trigger records_write_stamp
before insert or update on records
for each row execute function records_write_stamp();

create trigger set_members_write_stamp
before insert or update on set_members
for each row execute function set_members_write_stamp();
