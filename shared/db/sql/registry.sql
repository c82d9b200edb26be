-- name: lock_chain --
-- Serialise changes of the chain (every replica and process of the node shares the database).
select pg_advisory_xact_lock(7213902)

-- name: chain_tip --
-- The main chain's last block.
select height, block_hash from registry_chain order by height desc limit 1

-- name: genesis_hash --
-- The block at height 0.
select block_hash from registry_chain where height = 0

-- name: block_info --
-- A stored block's height and whether it is on the main chain.
select b.height,
       exists (select 1 from registry_chain c where c.block_hash = b.hash) as on_main
from registry_blocks b
where b.hash = $1

-- name: insert_block --
-- Store a block (of any branch); nothing if it is known.
insert into registry_blocks
    (hash, previous_hash, height, transactions_hash, nonce, signer, signature, xml)
values ($1, $2, $3, $4, $5, $6, $7, $8)
on conflict (hash) do nothing
returning hash

-- name: insert_transactions --
-- The transactions of a stored block, in block order, in one statement.
insert into registry_transactions (block_hash, position, tx_hash, created_at, base_url)
select $1, t.position, t.tx_hash, t.created_at, t.base_url
from unnest($2::int[], $3::text[], $4::text[], $5::text[])
    as t (position, tx_hash, created_at, base_url)

-- name: branch_off_main --
-- From a block back to the main chain: the blocks off it (newest first) and the block on it.
with recursive branch (hash, previous_hash, height, on_main) as (
    select b.hash, b.previous_hash, b.height,
           exists (select 1 from registry_chain c where c.block_hash = b.hash)
    from registry_blocks b
    where b.hash = $1
    union all
    select b.hash, b.previous_hash, b.height,
           exists (select 1 from registry_chain c where c.block_hash = b.hash)
    from registry_blocks b
    join branch on b.hash = branch.previous_hash
    where not branch.on_main
)
select hash, height, on_main from branch order by height desc

-- name: main_transactions_among --
-- Which of these tx-hashes the main chain holds up to a height.
select t.tx_hash
from registry_transactions t
join registry_chain c on c.block_hash = t.block_hash
where c.height <= $2 and t.tx_hash = any($1::text[])

-- name: blocks_transactions_among --
-- Which of these tx-hashes the given blocks hold.
select tx_hash from registry_transactions
where block_hash = any($1::text[]) and tx_hash = any($2::text[])

-- name: blocks_transactions --
-- Every transaction of the given blocks.
select tx_hash, created_at, base_url from registry_transactions
where block_hash = any($1::text[])

-- name: truncate_chain --
-- Take the main chain back to a height; the blocks stay stored.
delete from registry_chain where height > $1 returning block_hash

-- name: extend_chain --
-- Put blocks on the main chain at the given heights.
insert into registry_chain (height, block_hash)
select * from unnest($1::int[], $2::text[])

-- name: pool_add --
-- A newly accepted transaction; nothing if its URL waits already.
insert into registry_pool (tx_hash, created_at, base_url)
values ($1, $2, $3)
on conflict (tx_hash) do nothing
returning tx_hash

-- name: pool_restore --
-- Transactions of a losing branch go back to the pool.
insert into registry_pool (tx_hash, created_at, base_url)
select * from unnest($1::text[], $2::text[], $3::text[])
on conflict (tx_hash) do nothing

-- name: pool_remove --
-- Transactions now in the main chain leave the pool.
delete from registry_pool where tx_hash = any($1::text[])

-- name: pool_take --
-- The oldest waiting transactions, for the next block.
select tx_hash, created_at, base_url from registry_pool
order by added_at, tx_hash
limit $1

-- name: pool_size --
-- How many transactions wait.
select count(*) from registry_pool

-- name: url_status --
-- Whether a tx-hash is in the main chain, or waits in the pool.
select exists (
           select 1 from registry_transactions t
           join registry_chain c on c.block_hash = t.block_hash
           where t.tx_hash = $1
       ) as in_chain,
       exists (select 1 from registry_pool where tx_hash = $1) as in_pool

-- name: accepted_urls --
-- Every URL of the main chain in order of appearance.
select t.tx_hash, t.created_at, t.base_url
from registry_chain c
join registry_transactions t on t.block_hash = c.block_hash
where c.height > 0
order by c.height, t.position

-- name: highest_known --
-- The highest of these hashes on the main chain (a peer's locator).
select height from registry_chain where block_hash = any($1::text[]) order by height desc limit 1

-- name: main_blocks_after --
-- The main chain's blocks after a height, in order, as XML.
select b.xml
from registry_chain c
join registry_blocks b on b.hash = c.block_hash
where c.height > $1
order by c.height
limit $2

-- name: main_hashes_at --
-- The main chain's hashes at the given heights (a locator), highest first.
select block_hash from registry_chain where height = any($1::int[]) order by height desc

-- name: upsert_peer --
-- A peer learnt from the key file, the tracker or the operator.
insert into registry_peers (url, source) values ($1, $2)
on conflict (url) do nothing
returning url

-- name: all_peers --
-- Every known peer.
select url, source, added_at, last_ok_at, last_error, failures from registry_peers order by url

-- name: remove_peer --
-- Forget a peer.
delete from registry_peers where url = $1 returning url

-- name: peer_ok --
-- A peer answered.
update registry_peers set last_ok_at = now(), last_error = null, failures = 0 where url = $1

-- name: peer_failed --
-- A peer did not answer, or answered nonsense.
update registry_peers set last_error = $2, failures = failures + 1 where url = $1

-- name: announce --
-- A node announces itself to this tracker for a network.
insert into registry_members (network, url, public_key) values ($1, $2, $3)
on conflict (network, url) do update
    set last_announce = now(), public_key = coalesce(excluded.public_key, registry_members.public_key)

-- name: forget_silent_members --
-- Tracker side: nodes not heard from for longer than the members' lifetime.
delete from registry_members where last_announce < now() - $1::interval

-- name: forget_member --
-- Tracker side: a node that said it left a network (event=stopped).
delete from registry_members where network = $1 and url = $2

-- name: network_members --
-- The nodes that announced themselves for a network recently, newest first.
select url from registry_members
where network = $1 and last_announce > now() - $2::interval
order by last_announce desc
limit $3
