-- The quarantine keeps one row per bad record and link: a peer's bad record comes back at each
-- full and window run, and each time it was stored again, raw bytes and all. A record
-- quarantined again (same link, identifier and bytes) now replaces its row (identifiers and bytes
-- are indexed by hash: a quarantined identifier may be too long for an index); the copies stored
-- before are dropped here, the newest of each kept.
delete from quarantine
where id in (
    select id from (
        select id, row_number() over (
            partition by link, md5(coalesce(identifier, '')), sha256(raw) order by id desc
        ) as copy
        from quarantine
    ) copies
    where copy > 1
);

create unique index quarantine_once on quarantine (link, md5(coalesce(identifier, '')), sha256(raw));

-- The history purge drops finished runs older than the retention period.
create index harvest_runs_finished on harvest_runs (finished_at);
