-- name: catalogue_rows --
-- Records and links the database holds: 0 for a new node's, what a restore would overwrite otherwise.
select (select count(*) from records) + (select count(*) from links)

-- name: has_schema --
-- Whether the database holds wiscat's tables (none: a new, empty database).
select to_regclass('records') is not null and to_regclass('links') is not null
