-- The stamping trigger (0008, 0010) is not called for a row that already carries the
-- transaction's write stamp: the harvester's and the admin API's writes take the stamp once a
-- statement (wiscat_write_stamp() in a scalar subquery) instead of once a row in the trigger, a
-- PL/pgSQL call a row (about 2.5 µs of the server's CPU a row inserted). What a row ends with
-- is unchanged: for such a row the trigger would have set the same stamp (or left it, the same),
-- and every other row, whatever SQL wrote it, still goes through the trigger: one written with
-- another datestamp or none (NULL, left for the trigger to fill), and every row of a
-- transaction that has no stamp yet.
drop trigger records_write_stamp on records;
drop trigger set_members_write_stamp on set_members;

create trigger records_write_stamp
before insert or update on records
for each row
when (not coalesce(new.datestamp = nullif(current_setting('wiscat.write_stamp', true), '')::timestamptz, false))
execute function wiscat_stamp_write();

create trigger set_members_write_stamp
before insert or update on set_members
for each row
when (not coalesce(new.datestamp = nullif(current_setting('wiscat.write_stamp', true), '')::timestamptz, false))
execute function wiscat_stamp_write();
