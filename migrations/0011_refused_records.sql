-- Refused records are kept, not only logged: the latest refusal of each identifier by each
-- link, with its run and reason code (wiscat.shared.refusals), and each run's refusals counted
-- by reason. Growth is bounded: one row per link and identifier, dropped when that link later
-- stores the identifier, when the link is removed, and with the run history's retention.
create table refused_records (
    link        text not null references links (name) on delete cascade,
    identifier  text not null,
    run_id      bigint references harvest_runs (id) on delete set null,
    reason      text not null check (reason in ('own_set', 'older', 'deleted', 'conflict')),
    refused_at  timestamptz not null default now(),
    primary key (link, identifier)
);

create index refused_records_identifier on refused_records (identifier);
create index refused_records_at on refused_records (refused_at);

-- {"own_set": 50, ...}: the run's refused records by reason code
alter table harvest_runs add column refusals jsonb not null default '{}'::jsonb;
