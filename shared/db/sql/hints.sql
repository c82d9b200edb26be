-- Each peer's stream of change hints (docs/links.md, "Harvest on a hint"). One harvester worker
-- holds a peer's stream at a time: the one whose session holds the advisory lock of key
-- (29403, hashtext(peer)), on a connection of its own kept while it holds the stream, so that a
-- worker that dies frees it at once. hint_streams says what its holder last saw.

-- name: hold_peer --
-- Take peer $1's stream on this session if nobody holds it: whether this session holds it now.
select pg_try_advisory_lock(29403, hashtext($1))

-- name: advertised --
-- Peer $1's Identify advertises the stream $2 (null: none), seen by holder $3.
insert into hint_streams (peer, url, holder) values ($1, $2, $3)
on conflict (peer) do update
set url = excluded.url, holder = excluded.holder, updated_at = now(),
    connected_since = case when excluded.url is null then null
                           else hint_streams.connected_since end

-- name: connected --
-- The stream of peer $1 is connected (holder $2).
update hint_streams set connected_since = now(), holder = $2, updated_at = now()
where peer = $1

-- name: hinted --
-- A hint came on the stream of peer $1, with event id $2 (null: it had none).
update hint_streams
set last_hint_at = now(), last_event_id = coalesce($2, last_event_id), updated_at = now()
where peer = $1

-- name: disconnected --
-- The stream of peer $1 ended, or could not be opened, for reason $2.
update hint_streams
set connected_since = null, last_error = $2, last_error_at = now(), updated_at = now()
where peer = $1

-- name: let_go --
-- Holder $2 lets peer $1's stream go (its links were removed, it takes no hints any more, or the
-- harvester stops).
update hint_streams set connected_since = null, holder = null, updated_at = now()
where peer = $1 and holder = $2

-- name: last_event_id --
-- The id of the last hint received from peer $1, to resume from (any holder's).
select last_event_id from hint_streams where peer = $1

-- name: all_streams --
-- Every peer's stream, by peer.
select * from hint_streams order by peer

-- name: stream_of --
-- Peer $1's stream.
select * from hint_streams where peer = $1
