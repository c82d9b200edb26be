-- name: primary_horizon --
-- The list horizon of list_horizon (records.sql), on the primary, with the end of its
-- write-ahead log once that horizon is known: every transaction committed before the horizon
-- was read has its commit record before this position. The position is in the aggregate's own
-- output, and so is taken after pg_stat_activity was read (a volatile function: never folded).
-- The insert position points past the header of a page no record has reached yet, where a
-- standby's replay position stops at the page's start (the end of the record before it): so a
-- position just past a page's header (24 bytes, 40 at a segment's start) is taken back to the
-- page's start, else an idle primary's standby would never reach it.
select horizon, hidden, oldest_pid,
       wal_position - case
           when wal_position % pg_size_bytes(current_setting('wal_segment_size')) = 40 then 40
           when wal_position % current_setting('wal_block_size')::bigint = 24 then 24
           else 0
       end as wal_position
from (
    select least(
               statement_timestamp(),
               min(a.xact_start) filter (where a.backend_xid is not null)
           ) as horizon,
           count(*) filter (where a.backend_xid is not null and a.xact_start is null) as hidden,
           (array_agg(a.pid order by a.xact_start) filter (
               where a.backend_xid is not null and a.xact_start is not null
           ))[1] as oldest_pid,
           (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint as wal_position
    from pg_stat_activity a
    where a.datname = current_database() and a.pid <> pg_backend_pid()
) as h

-- name: replayed_position --
-- How far a standby has replayed the primary's write-ahead log; null on a server that is not
-- in recovery (a primary, or a standby since promoted).
select case
           when pg_is_in_recovery() then (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint
       end as wal_position
