-- Records, their set memberships and tombstones.
--
-- records.datestamp is the oai:datestamp: the time (database clock) the record's content or set
-- membership last changed *here* (invariant 1). md_datestamp is gmd:dateStamp, used only by
-- the older-record guard (invariant 5). A deleted record keeps its row, without XML, as a
-- tombstone until the retention period has passed (invariant 4).

create table sets (
    spec        text primary key,
    name        text not null,
    kind        text not null check (kind in ('own', 'remote', 'shared', 'other')),
    created_at  timestamptz not null default now()
);

create table records (
    identifier    text primary key,
    datestamp     timestamptz not null,
    md_datestamp  timestamptz,
    content_hash  bytea,
    xml           text,
    deleted       boolean not null default false,
    -- live sets, kept in step with set_members so a list page needs no second query
    set_specs     text[] not null default '{}',
    constraint tombstone_has_no_content check (deleted = (xml is null))
);

create index records_keyset on records (datestamp, identifier);

-- One row per (set, record). A record that leaves a set keeps a deleted row there, so harvesters
-- of that set see a deleted header (OAI-PMH 2.0 §2.5.1).
create table set_members (
    set_spec    text not null references sets (spec),
    identifier  text not null references records (identifier) on delete cascade,
    datestamp   timestamptz not null,
    deleted     boolean not null default false,
    primary key (set_spec, identifier)
);

create index set_members_keyset on set_members (set_spec, datestamp, identifier);
create index set_members_identifier on set_members (identifier);

-- Records arrive in ~8 KB XML documents; lz4 writes them several times faster than pglz.
-- Servers built without lz4 keep the default compression.
do $$
begin
    alter table records alter column xml set compression lz4;
exception when feature_not_supported then
    raise notice 'lz4 is not available on this server: records.xml keeps the default compression';
end
$$;

-- Node-wide values every replica must agree on (for example the resumptionToken key when
-- WISCAT_TOKEN_SECRET is not set).
create table node_secrets (
    name        text primary key,
    value       bytea not null,
    created_at  timestamptz not null default now()
);
