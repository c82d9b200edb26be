-- The WIS 2.0 bridge: the WCMP2 records this node announces, their revisions, the records that
-- cannot be made valid, the durable outbox of notification messages, and the renderer's cursor.

-- The WCMP2 form of each record this node announces (own set, a centre it speaks for).
create table wis2_records (
    wcmp2_id     text primary key,            -- urn:wmo:md:{centre}:{local}
    identifier   text not null,               -- the record's OAI identifier / fileIdentifier
    centre_id    text not null,
    revision     text not null,               -- first 16 hex chars of sha512(content)
    content      bytea,                       -- Conversion.content(); null when deleted
    deleted      boolean not null default false,
    source_datestamp timestamptz not null,    -- the record's datestamp it was rendered from
    rendered_at  timestamptz not null default now()
);
create index on wis2_records (identifier);
-- Every revision ever announced, so a message's link names one instance for as long as kept.
create table wis2_revisions (
    wcmp2_id  text not null,
    revision  text not null,
    content   bytea not null,
    created_at timestamptz not null default now(),
    primary key (wcmp2_id, revision)
);
-- Records that cannot be made valid (never announced) and why; one row per identifier.
create table wis2_invalid (
    identifier text primary key,
    reasons    jsonb not null,
    report     jsonb not null,
    source_datestamp timestamptz not null,
    noted_at   timestamptz not null default now()
);
-- The durable outbox: one row per message; a retry keeps message_id.
create table wis2_outbox (
    message_id  uuid primary key,
    wcmp2_id    text not null,
    centre_id   text not null,
    relation    text not null check (relation in ('canonical', 'update', 'deletion')),
    revision    text,                          -- null for a deletion
    length      bigint,
    sha512      text,                          -- base64 of sha512(content), as WNM integrity
    created_at  timestamptz not null default now(),
    sent_at     timestamptz,
    attempts    integer not null default 0,
    last_error  text
);
create index on wis2_outbox (created_at) where sent_at is null;
-- Where the renderer has read up to (commit-safe datestamps, as OAI-PMH lists).
create table wis2_cursor (one boolean primary key default true check (one), datestamp timestamptz);

-- Added by the outbox beyond the shared tables:
-- the identifier of the last record read at wis2_cursor.datestamp, so that a page may end
-- between two records of one datestamp (the cursor is the keyset (datestamp, identifier));
alter table wis2_cursor add column identifier text not null default '';
-- when the record was last queued for announcement (the daily re-announcement's clock);
alter table wis2_records add column announced_at timestamptz not null default now();
create index on wis2_records (announced_at) where not deleted;
-- when an unsent message may be tried again (backoff after a refusal or a broker down).
alter table wis2_outbox add column retry_at timestamptz;
create index on wis2_outbox (wcmp2_id, created_at);
insert into wis2_cursor default values;
