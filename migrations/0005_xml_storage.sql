-- Where the server has no lz4 (0001 kept pglz), store records.xml uncompressed instead: pglz
-- costs more CPU than the disk it saves is worth here (bulk writes of 8 KB records measured about
-- 1.6 times faster without it, and list pages read without decompressing). Rows written before
-- keep their compression until they are rewritten.
do $$
begin
    if (select attcompression from pg_attribute
        where attrelid = 'records'::regclass and attname = 'xml') is distinct from 'l' then
        alter table records alter column xml set storage external;
    end if;
end
$$;
