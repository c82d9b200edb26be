-- Harvest on a hint (docs/links.md, "Harvest on a hint"). A peer that advertises a stream of
-- change hints in its Identify is subscribed to; a hint asks the links of that peer for their
-- normal incremental run now, and never moves a high-water mark or a link's regular time.
--
-- links.hints: the operator's per-link switch (wiscat link add/update --no-hints).
-- links.hint_pending: a hint arrived that no run has started to serve yet; the link is due while
-- it is set, and the run that takes the link clears it. A hint during a run sets it again: one
-- more run after it, however many hints came (at most one run in flight, one pending).
-- links.hint_until: the earliest change a pending hint announced (its datestamp bound), for the
-- hint latency the run that serves it measures.
alter table links add column hints boolean not null default true;
alter table links add column hint_pending boolean not null default false;
alter table links add column hint_until timestamptz;

-- Each peer's stream of hints, as its holder (one harvester worker at a time, by a session
-- advisory lock of key (29403, hashtext(peer))) last saw it: for wiscat link show, the dashboard
-- and the metrics. url null: the peer's Identify advertises no stream.
create table hint_streams (
    peer             text primary key,
    url              text,
    holder           text,
    connected_since  timestamptz,
    last_hint_at     timestamptz,
    last_event_id    text,
    last_error       text,
    last_error_at    timestamptz,
    updated_at       timestamptz not null default now()
);
