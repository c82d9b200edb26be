-- The XML IDs each record holds (RELIABILITY P01), found once when wiscat writes it, where the
-- provider searched every record for them each time a list page served it: the largest part
-- of the provider's own CPU a record served (docs/benchmarks.md). The form is
-- wiscat.shared.oaipmh.xmlids.stored_form's: each ID followed by a double quote, which no ID
-- can hold; '' for a record without any.
--
-- NULL means "not known": the provider searches such a record as it serves it, as before. Every
-- row already stored starts so (nothing is read here: adding the column takes no time), and so
-- does every document any SQL but wiscat's own writers writes: only they know the IDs of what
-- they write, and they say so as they say their documents are checked (wiscat.xml_checked,
-- migration 0009), so the XML-mend trigger, which every other writer's document already goes
-- through, forgets the IDs of such a document.
alter table records add column xml_ids text;

create or replace function records_xml_mend() returns trigger
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
    if current_setting('wiscat.xml_checked', true) is distinct from 'on' then
        new.xml_ids := null;
    end if;
    return new;
end
$$;
