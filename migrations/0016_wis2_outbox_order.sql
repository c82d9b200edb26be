-- The messages of one WCMP2 id go out in the order they were queued. One transaction may queue
-- two for one id (a record leaves the id, another of the same render page takes it: a deletion,
-- then a canonical message), and created_at is the transaction's start time, the same for both;
-- ordered by it and the random message id, the deletion went out after the canonical message
-- half the time, and a Global Discovery Catalogue deleted the record it had just been given.
alter table wis2_outbox add column queued bigint generated always as identity;
drop index wis2_outbox_wcmp2_id_created_at_idx;
create index on wis2_outbox (wcmp2_id, created_at, queued);
