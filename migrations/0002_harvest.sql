-- Harvest links, their state (committed with the data they describe), runs and quarantine.

create table links (
    name              text primary key check (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'),
    base_url          text not null,
    remote_set        text,                 -- null: the peer's whole catalogue
    local_set         text not null references sets (spec),
    metadata_prefix   text not null default 'iso19139',
    strategy          text not null default 'ListRecords'
                      check (strategy in ('ListRecords', 'ListIdentifiers')),
    every             interval not null default '1 hour',
    full_every        interval not null default '7 days',
    overlap           interval not null default '0',
    window_slices     integer not null default 24 check (window_slices >= 0),
    enabled           boolean not null default true,
    recovery          boolean not null default false,
    created_at        timestamptz not null default now(),
    -- state: changed only together with the records of a completed list (invariant 3)
    high_water_mark   timestamptz,
    last_full_at      timestamptz,
    window_index      integer not null default 0,
    next_run_at       timestamptz not null default now(),
    run_requested     text check (run_requested in ('incremental', 'full')),
    lease_owner       text,
    lease_expires     timestamptz,
    last_run_id       bigint,
    last_success_at   timestamptz,
    last_error        text
);

create index links_due on links (next_run_at) where enabled;

create table harvest_runs (
    id            bigserial primary key,
    link          text not null references links (name) on delete cascade,
    mode          text not null check (mode in ('incremental', 'full', 'window', 'backup')),
    worker        text,
    from_date     timestamptz,
    until_date    timestamptz,
    started_at    timestamptz not null default now(),
    finished_at   timestamptz,
    status        text not null default 'running'
                  check (status in ('running', 'ok', 'failed', 'stopped')),
    pages         integer not null default 0,
    bytes         bigint not null default 0,
    added         integer not null default 0,
    updated       integer not null default 0,
    unchanged     integer not null default 0,
    deleted       integer not null default 0,
    refused       integer not null default 0,
    quarantined   integer not null default 0,
    error_kind    text,
    error         text
);

create index harvest_runs_link on harvest_runs (link, started_at desc);

create table quarantine (
    id           bigserial primary key,
    link         text references links (name) on delete set null,
    run_id       bigint references harvest_runs (id) on delete set null,
    page         integer,
    identifier   text,
    reason       text not null,
    raw          bytea not null,
    received_at  timestamptz not null default now()
);

create index quarantine_received on quarantine (received_at desc);
