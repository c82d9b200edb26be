-- The distributed registry of OAI-PMH base URLs: blocks (every branch received), the
-- main chain, the pool of accepted transactions not yet in the main chain, this node's peers, and
-- the members a tracker has heard from.

create table registry_blocks (
    hash              text primary key,
    previous_hash     text not null,
    -- the genesis block is height 0; a block is its parent's height + 1
    height            integer not null check (height >= 0),
    transactions_hash text not null,
    nonce             text not null,
    signer            text not null,
    signature         text not null,
    -- the block in the seed's XML shape, served to peers as it is
    xml               bytea not null,
    received_at       timestamptz not null default now()
);

create index registry_blocks_previous on registry_blocks (previous_hash);

create table registry_transactions (
    block_hash  text not null references registry_blocks (hash) on delete cascade,
    position    integer not null,
    tx_hash     text not null,
    created_at  text not null,
    base_url    text not null,
    primary key (block_hash, position)
);

create index registry_transactions_tx on registry_transactions (tx_hash);

-- The main chain, one block per height: the branch the fork-choice rule picked (most work, then
-- the lowest tip hash).
create table registry_chain (
    height      integer primary key,
    block_hash  text not null unique references registry_blocks (hash)
);

-- Accepted transactions waiting for a block: submitted here, or returned from a losing branch.
create table registry_pool (
    tx_hash     text primary key,
    created_at  text not null,
    base_url    text not null,
    added_at    timestamptz not null default now()
);

-- The other nodes of this node's network: from the key file, the tracker, or the operator.
create table registry_peers (
    url         text primary key,
    source      text not null check (source in ('keyfile', 'tracker', 'manual')),
    added_at    timestamptz not null default now(),
    last_ok_at  timestamptz,
    last_error  text,
    failures    integer not null default 0
);

-- Tracker side: the nodes that announced themselves, per network name.
create table registry_members (
    network       text not null,
    url           text not null,
    public_key    text,
    first_seen    timestamptz not null default now(),
    last_announce timestamptz not null default now(),
    primary key (network, url)
);

create index registry_members_recent on registry_members (network, last_announce desc);
