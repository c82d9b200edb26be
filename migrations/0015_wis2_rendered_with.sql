-- The WIS 2.0 renderer remembers what it rendered with: the own set, its centre rules
-- (WISCAT_WIS2_CENTRES, as written back by CentreRule) and the node's /oai URL. When the
-- configuration differs from the one it last rendered with (or none is remembered), it reads
-- every record again from the start: a record that moved out of a centre this node speaks for
-- gets a deletion, one that moved in is announced, and one whose WCMP2 bytes are unchanged
-- queues nothing.
alter table wis2_cursor add column rendered_with text;
