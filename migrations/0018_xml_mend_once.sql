-- The XML-mend trigger (0009) is not called for a row it would leave as it is: one a wiscat
-- writer wrote (wiscat.xml_checked = 'on', or no document) whose flag is already false. The
-- function sets the flag false for such a row; the PL/pgSQL call cost about 2.5 µs of the
-- server's CPU a row inserted. Every other row, whatever SQL wrote it, is still checked: a flag
-- left true, and any writer that did not say its documents are checked.
drop trigger records_xml_mend on records;

create trigger records_xml_mend
before insert or update on records
for each row
when (new.xml_mend or (new.xml is not null and current_setting('wiscat.xml_checked', true) is distinct from 'on'))
execute function records_xml_mend();
