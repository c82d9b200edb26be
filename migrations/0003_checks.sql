-- Consistency checks (docs/checks.md), run on a schedule by the harvester, and their reports.

create table checks (
    name          text primary key check (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'),
    set_spec      text not null,
    source_url    text not null,
    peer_urls     text[] not null check (cardinality(peer_urls) > 0),
    sample        integer not null default 0 check (sample >= 0),
    every         interval not null default '1 day',
    enabled       boolean not null default true,
    created_at    timestamptz not null default now(),
    next_run_at   timestamptz not null default now(),
    lease_owner   text,
    lease_expires timestamptz
);

create index checks_due on checks (next_run_at) where enabled;

create table check_reports (
    id           bigserial primary key,
    check_name   text references checks (name) on delete set null,
    set_spec     text not null,
    source_url   text not null,
    started_at   timestamptz not null,
    finished_at  timestamptz not null default now(),
    -- 'consistent', 'inconsistent' or 'unchecked' (exit codes 0, 1 and 2 of `wiscat check`)
    outcome      text not null check (outcome in ('consistent', 'inconsistent', 'unchecked')),
    -- per peer: {"url", "status", "reason", "counts": {category: n}, "items": {category: [...]}}
    report       jsonb not null
);

create index check_reports_name on check_reports (check_name, finished_at desc);
create index check_reports_finished on check_reports (finished_at desc);
