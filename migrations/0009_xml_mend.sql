-- RELIABILITY P14: a stored document holding a character XML 1.0 does not allow (§2.2) would make
-- the whole page that lists it not well-formed; the provider serves such a record mended (the
-- characters replaced by U+FFFD, or its header alone). Every wiscat write path parses records
-- with lxml, which refuses them, so only a row written by SQL or by an older version can hold
-- one. Checking every record served cost the provider about 8 µs a record, a fifth of its CPU,
-- for rows that almost never exist: a row is now flagged as it is written, and the provider
-- checks the flagged rows alone.
--
-- A constant default: adding the column rewrites no row.
alter table records add column xml_mend boolean not null default false;

-- Whether a document holds a character XML 1.0 does not allow: the C0 controls but tab, LF and
-- CR, and U+FFFE and U+FFFF. PostgreSQL's text holds neither U+0000 nor a lone surrogate.
-- About 40 µs for a 9 KB record.
create function wiscat_xml_needs_mend(document text) returns boolean
language sql immutable strict parallel safe
as $$ select document ~ '[\u0001-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]' $$;

-- The rows stored before (set before the trigger exists; 0008's trigger moves no datestamp for
-- a change of this column alone). Reads every document once, holding the table's lock from the
-- column added: about a minute a million records.
update records set xml_mend = true where wiscat_xml_needs_mend(xml);

-- The flag follows the document, whatever SQL writes it: an update that changes neither leaves
-- the flag as it was; one that changes the flag alone has it computed again. wiscat's own
-- writers, whose documents lxml wrote, say so for the statement with wiscat.xml_checked = 'on'
-- (shared.db.records), sparing each row the check; any other writer's rows are checked.
create function records_xml_mend() returns trigger
language plpgsql as $$
begin
    if tg_op = 'UPDATE' and new.xml is not distinct from old.xml
        and new.xml_mend = old.xml_mend
    then
        return new;
    end if;
    if new.xml is null or current_setting('wiscat.xml_checked', true) = 'on' then
        new.xml_mend := false;
    else
        new.xml_mend := wiscat_xml_needs_mend(new.xml);
    end if;
    return new;
end
$$;

create trigger records_xml_mend
before insert or update on records
for each row execute function records_xml_mend();
