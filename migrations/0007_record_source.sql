-- The link whose harvest wrote a record's stored copy; null for a local write (ingest, the admin
-- API) and for copies written before this column. Two links that disagree on a record with the
-- same gmd:dateStamp (two peers serving one shared set, say) replaced each other's copy at their
-- full and window runs when both file it under one set, each time with a new datestamp: churn
-- for every harvester downstream. A harvest now keeps the copy another link wrote (see
-- upsert_records). Nullable and without a default, so adding it rewrites no row.
alter table records add column source text;
