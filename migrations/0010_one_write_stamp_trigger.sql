-- 0008's two trigger functions, one for records and one for set_members, differed only in the
-- columns a harvester sees. One function now serves both tables; what it does is unchanged.
--
-- A row's datestamp moves when a writer gives it one, or when what a harvester sees of it
-- changes: its deletion, and for a record its content and its sets. Backup synchronisation
-- alone keeps the source's datestamps, saying so for its own transaction.
create function wiscat_stamp_write() returns trigger
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
    elsif tg_table_name = 'records' then
        -- A separate statement: set_members has neither column.
        if new.content_hash is distinct from old.content_hash
            or new.set_specs is distinct from old.set_specs
        then
            new.datestamp := wiscat_write_stamp();
        end if;
    end if;
    return new;
end
$$;

drop trigger records_write_stamp on records;
drop trigger set_members_write_stamp on set_members;
drop function records_write_stamp();
drop function set_members_write_stamp();

create trigger records_write_stamp
before insert or update on records
for each row execute function wiscat_stamp_write();

create trigger set_members_write_stamp
before insert or update on set_members
for each row execute function wiscat_stamp_write();
