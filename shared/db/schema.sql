-- The schema the migrations in migrations/ build, written by `make schema`
-- (tools/schema.py) from pg_dump of a freshly migrated database. Do not edit: add a migration,
-- then regenerate.
-- tests/integration/test_schema.py checks that the two agree.

CREATE FUNCTION public.records_xml_mend() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    if tg_op = 'UPDATE' and new.xml is not distinct from old.xml
        and new.xml_mend = old.xml_mend
    then
        return new;
    end if;
    if new.xml is null or current_setting('wiscat.xml_checked', true) = 'on' then
        new.xml_mend := false;
    else
        new.xml_mend := wiscat_xml_needs_mend(new.xml);
    end if;
    if current_setting('wiscat.xml_checked', true) is distinct from 'on' then
        new.xml_ids := null;
    end if;
    return new;
end
$$;

CREATE FUNCTION public.wiscat_notify_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    perform pg_notify('wiscat_changes', coalesce(current_setting('wiscat.write_stamp', true), ''));
    return null;
end
$$;

CREATE FUNCTION public.wiscat_stamp_write() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    if current_setting('wiscat.keep_datestamps', true) = 'on' then
        return new;
    end if;
    if tg_op = 'INSERT'
        or new.datestamp is distinct from old.datestamp
        or new.deleted is distinct from old.deleted
    then
        new.datestamp := wiscat_write_stamp();
    elsif tg_table_name = 'records' then
        -- A separate statement: set_members has neither column.
        if new.content_hash is distinct from old.content_hash
            or new.set_specs is distinct from old.set_specs
        then
            new.datestamp := wiscat_write_stamp();
        end if;
    end if;
    return new;
end
$$;

CREATE FUNCTION public.wiscat_write_stamp() RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
declare
    stamp text := current_setting('wiscat.write_stamp', true);
begin
    if stamp is null or stamp = '' then
        perform pg_current_xact_id();  -- the transaction has an id from here on, seen by lists
        stamp := clock_timestamp()::text;
        perform set_config('wiscat.write_stamp', stamp, true);  -- until the transaction ends
    end if;
    return stamp::timestamptz;
end
$$;

CREATE FUNCTION public.wiscat_xml_needs_mend(document text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ select document ~ '[\u0001-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]' $$;

CREATE TABLE public.check_reports (
    id bigint NOT NULL,
    check_name text,
    set_spec text NOT NULL,
    source_url text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome text NOT NULL,
    report jsonb NOT NULL,
    CONSTRAINT check_reports_outcome_check CHECK ((outcome = ANY (ARRAY['consistent'::text, 'inconsistent'::text, 'unchecked'::text])))
);

CREATE SEQUENCE public.check_reports_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.check_reports_id_seq OWNED BY public.check_reports.id;

CREATE TABLE public.checks (
    name text NOT NULL,
    set_spec text NOT NULL,
    source_url text NOT NULL,
    peer_urls text[] NOT NULL,
    sample integer DEFAULT 0 NOT NULL,
    every interval DEFAULT '1 day'::interval NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    next_run_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_owner text,
    lease_expires timestamp with time zone,
    CONSTRAINT checks_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'::text)),
    CONSTRAINT checks_peer_urls_check CHECK ((cardinality(peer_urls) > 0)),
    CONSTRAINT checks_sample_check CHECK ((sample >= 0))
);

CREATE TABLE public.harvest_runs (
    id bigint NOT NULL,
    link text NOT NULL,
    mode text NOT NULL,
    worker text,
    from_date timestamp with time zone,
    until_date timestamp with time zone,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    status text DEFAULT 'running'::text NOT NULL,
    pages integer DEFAULT 0 NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    added integer DEFAULT 0 NOT NULL,
    updated integer DEFAULT 0 NOT NULL,
    unchanged integer DEFAULT 0 NOT NULL,
    deleted integer DEFAULT 0 NOT NULL,
    refused integer DEFAULT 0 NOT NULL,
    quarantined integer DEFAULT 0 NOT NULL,
    error_kind text,
    error text,
    refusals jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT harvest_runs_mode_check CHECK ((mode = ANY (ARRAY['incremental'::text, 'full'::text, 'window'::text, 'backup'::text]))),
    CONSTRAINT harvest_runs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'ok'::text, 'failed'::text, 'stopped'::text])))
);

CREATE SEQUENCE public.harvest_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.harvest_runs_id_seq OWNED BY public.harvest_runs.id;

CREATE TABLE public.hint_streams (
    peer text NOT NULL,
    url text,
    holder text,
    connected_since timestamp with time zone,
    last_hint_at timestamp with time zone,
    last_event_id text,
    last_error text,
    last_error_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.links (
    name text NOT NULL,
    base_url text NOT NULL,
    remote_set text,
    local_set text NOT NULL,
    metadata_prefix text DEFAULT 'iso19139'::text NOT NULL,
    strategy text DEFAULT 'ListRecords'::text NOT NULL,
    every interval DEFAULT '01:00:00'::interval NOT NULL,
    full_every interval DEFAULT '7 days'::interval NOT NULL,
    overlap interval DEFAULT '00:00:00'::interval NOT NULL,
    window_slices integer DEFAULT 24 NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    recovery boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    high_water_mark timestamp with time zone,
    last_full_at timestamp with time zone,
    window_index integer DEFAULT 0 NOT NULL,
    next_run_at timestamp with time zone DEFAULT now() NOT NULL,
    run_requested text,
    lease_owner text,
    lease_expires timestamp with time zone,
    last_run_id bigint,
    last_success_at timestamp with time zone,
    last_error text,
    hints boolean DEFAULT true NOT NULL,
    hint_pending boolean DEFAULT false NOT NULL,
    hint_until timestamp with time zone,
    CONSTRAINT links_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'::text)),
    CONSTRAINT links_run_requested_check CHECK ((run_requested = ANY (ARRAY['incremental'::text, 'full'::text]))),
    CONSTRAINT links_strategy_check CHECK ((strategy = ANY (ARRAY['ListRecords'::text, 'ListIdentifiers'::text]))),
    CONSTRAINT links_window_slices_check CHECK ((window_slices >= 0))
);

CREATE TABLE public.node_secrets (
    name text NOT NULL,
    value bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.quarantine (
    id bigint NOT NULL,
    link text,
    run_id bigint,
    page integer,
    identifier text,
    reason text NOT NULL,
    raw bytea NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE SEQUENCE public.quarantine_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.quarantine_id_seq OWNED BY public.quarantine.id;

CREATE TABLE public.records (
    identifier text NOT NULL,
    datestamp timestamp with time zone NOT NULL,
    md_datestamp timestamp with time zone,
    content_hash bytea,
    xml text,
    deleted boolean DEFAULT false NOT NULL,
    set_specs text[] DEFAULT '{}'::text[] NOT NULL,
    source text,
    xml_mend boolean DEFAULT false NOT NULL,
    xml_ids text,
    CONSTRAINT tombstone_has_no_content CHECK ((deleted = (xml IS NULL)))
);
ALTER TABLE ONLY public.records ALTER COLUMN xml SET STORAGE EXTERNAL;

CREATE TABLE public.refused_records (
    link text NOT NULL,
    identifier text NOT NULL,
    run_id bigint,
    reason text NOT NULL,
    refused_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT refused_records_reason_check CHECK ((reason = ANY (ARRAY['own_set'::text, 'older'::text, 'deleted'::text, 'conflict'::text])))
);

CREATE TABLE public.registry_blocks (
    hash text NOT NULL,
    previous_hash text NOT NULL,
    height integer NOT NULL,
    transactions_hash text NOT NULL,
    nonce text NOT NULL,
    signer text NOT NULL,
    signature text NOT NULL,
    xml bytea NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT registry_blocks_height_check CHECK ((height >= 0))
);

CREATE TABLE public.registry_chain (
    height integer NOT NULL,
    block_hash text NOT NULL
);

CREATE TABLE public.registry_members (
    network text NOT NULL,
    url text NOT NULL,
    public_key text,
    first_seen timestamp with time zone DEFAULT now() NOT NULL,
    last_announce timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.registry_peers (
    url text NOT NULL,
    source text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL,
    last_ok_at timestamp with time zone,
    last_error text,
    failures integer DEFAULT 0 NOT NULL,
    CONSTRAINT registry_peers_source_check CHECK ((source = ANY (ARRAY['keyfile'::text, 'tracker'::text, 'manual'::text])))
);

CREATE TABLE public.registry_pool (
    tx_hash text NOT NULL,
    created_at text NOT NULL,
    base_url text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.registry_transactions (
    block_hash text NOT NULL,
    "position" integer NOT NULL,
    tx_hash text NOT NULL,
    created_at text NOT NULL,
    base_url text NOT NULL
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.set_members (
    set_spec text NOT NULL,
    identifier text NOT NULL,
    datestamp timestamp with time zone NOT NULL,
    deleted boolean DEFAULT false NOT NULL
);

CREATE TABLE public.sets (
    spec text NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sets_kind_check CHECK ((kind = ANY (ARRAY['own'::text, 'remote'::text, 'shared'::text, 'other'::text])))
);

CREATE TABLE public.wis2_cursor (
    one boolean DEFAULT true NOT NULL,
    datestamp timestamp with time zone,
    identifier text DEFAULT ''::text NOT NULL,
    rendered_with text,
    CONSTRAINT wis2_cursor_one_check CHECK (one)
);

CREATE TABLE public.wis2_invalid (
    identifier text NOT NULL,
    reasons jsonb NOT NULL,
    report jsonb NOT NULL,
    source_datestamp timestamp with time zone NOT NULL,
    noted_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.wis2_outbox (
    message_id uuid NOT NULL,
    wcmp2_id text NOT NULL,
    centre_id text NOT NULL,
    relation text NOT NULL,
    revision text,
    length bigint,
    sha512 text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    retry_at timestamp with time zone,
    queued bigint NOT NULL,
    CONSTRAINT wis2_outbox_relation_check CHECK ((relation = ANY (ARRAY['canonical'::text, 'update'::text, 'deletion'::text])))
);

ALTER TABLE public.wis2_outbox ALTER COLUMN queued ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.wis2_outbox_queued_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.wis2_records (
    wcmp2_id text NOT NULL,
    identifier text NOT NULL,
    centre_id text NOT NULL,
    revision text NOT NULL,
    content bytea,
    deleted boolean DEFAULT false NOT NULL,
    source_datestamp timestamp with time zone NOT NULL,
    rendered_at timestamp with time zone DEFAULT now() NOT NULL,
    announced_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.wis2_revisions (
    wcmp2_id text NOT NULL,
    revision text NOT NULL,
    content bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY public.check_reports ALTER COLUMN id SET DEFAULT nextval('public.check_reports_id_seq'::regclass);

ALTER TABLE ONLY public.harvest_runs ALTER COLUMN id SET DEFAULT nextval('public.harvest_runs_id_seq'::regclass);

ALTER TABLE ONLY public.quarantine ALTER COLUMN id SET DEFAULT nextval('public.quarantine_id_seq'::regclass);

ALTER TABLE ONLY public.check_reports
    ADD CONSTRAINT check_reports_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.checks
    ADD CONSTRAINT checks_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.harvest_runs
    ADD CONSTRAINT harvest_runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.hint_streams
    ADD CONSTRAINT hint_streams_pkey PRIMARY KEY (peer);

ALTER TABLE ONLY public.links
    ADD CONSTRAINT links_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.node_secrets
    ADD CONSTRAINT node_secrets_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.quarantine
    ADD CONSTRAINT quarantine_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.records
    ADD CONSTRAINT records_pkey PRIMARY KEY (identifier);

ALTER TABLE ONLY public.refused_records
    ADD CONSTRAINT refused_records_pkey PRIMARY KEY (link, identifier);

ALTER TABLE ONLY public.registry_blocks
    ADD CONSTRAINT registry_blocks_pkey PRIMARY KEY (hash);

ALTER TABLE ONLY public.registry_chain
    ADD CONSTRAINT registry_chain_block_hash_key UNIQUE (block_hash);

ALTER TABLE ONLY public.registry_chain
    ADD CONSTRAINT registry_chain_pkey PRIMARY KEY (height);

ALTER TABLE ONLY public.registry_members
    ADD CONSTRAINT registry_members_pkey PRIMARY KEY (network, url);

ALTER TABLE ONLY public.registry_peers
    ADD CONSTRAINT registry_peers_pkey PRIMARY KEY (url);

ALTER TABLE ONLY public.registry_pool
    ADD CONSTRAINT registry_pool_pkey PRIMARY KEY (tx_hash);

ALTER TABLE ONLY public.registry_transactions
    ADD CONSTRAINT registry_transactions_pkey PRIMARY KEY (block_hash, "position");

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.set_members
    ADD CONSTRAINT set_members_pkey PRIMARY KEY (set_spec, identifier);

ALTER TABLE ONLY public.sets
    ADD CONSTRAINT sets_pkey PRIMARY KEY (spec);

ALTER TABLE ONLY public.wis2_cursor
    ADD CONSTRAINT wis2_cursor_pkey PRIMARY KEY (one);

ALTER TABLE ONLY public.wis2_invalid
    ADD CONSTRAINT wis2_invalid_pkey PRIMARY KEY (identifier);

ALTER TABLE ONLY public.wis2_outbox
    ADD CONSTRAINT wis2_outbox_pkey PRIMARY KEY (message_id);

ALTER TABLE ONLY public.wis2_records
    ADD CONSTRAINT wis2_records_pkey PRIMARY KEY (wcmp2_id);

ALTER TABLE ONLY public.wis2_revisions
    ADD CONSTRAINT wis2_revisions_pkey PRIMARY KEY (wcmp2_id, revision);

CREATE INDEX check_reports_finished ON public.check_reports USING btree (finished_at DESC);

CREATE INDEX check_reports_name ON public.check_reports USING btree (check_name, finished_at DESC);

CREATE INDEX checks_due ON public.checks USING btree (next_run_at) WHERE enabled;

CREATE INDEX harvest_runs_finished ON public.harvest_runs USING btree (finished_at);

CREATE INDEX harvest_runs_link ON public.harvest_runs USING btree (link, started_at DESC);

CREATE INDEX links_due ON public.links USING btree (next_run_at) WHERE enabled;

CREATE UNIQUE INDEX quarantine_once ON public.quarantine USING btree (link, md5(COALESCE(identifier, ''::text)), sha256(raw));

CREATE INDEX quarantine_received ON public.quarantine USING btree (received_at DESC);

CREATE INDEX records_keyset ON public.records USING btree (datestamp, identifier);

CREATE INDEX refused_records_at ON public.refused_records USING btree (refused_at);

CREATE INDEX refused_records_identifier ON public.refused_records USING btree (identifier);

CREATE INDEX registry_blocks_previous ON public.registry_blocks USING btree (previous_hash);

CREATE INDEX registry_members_recent ON public.registry_members USING btree (network, last_announce DESC);

CREATE INDEX registry_transactions_tx ON public.registry_transactions USING btree (tx_hash);

CREATE INDEX set_members_identifier ON public.set_members USING btree (identifier);

CREATE INDEX set_members_keyset ON public.set_members USING btree (set_spec, datestamp, identifier);

CREATE INDEX wis2_outbox_created_at_idx ON public.wis2_outbox USING btree (created_at) WHERE (sent_at IS NULL);

CREATE INDEX wis2_outbox_wcmp2_id_created_at_queued_idx ON public.wis2_outbox USING btree (wcmp2_id, created_at, queued);

CREATE INDEX wis2_records_announced_at_idx ON public.wis2_records USING btree (announced_at) WHERE (NOT deleted);

CREATE INDEX wis2_records_identifier_idx ON public.wis2_records USING btree (identifier);

CREATE TRIGGER records_notify_insert AFTER INSERT ON public.records FOR EACH ROW EXECUTE FUNCTION public.wiscat_notify_change();

CREATE TRIGGER records_notify_update AFTER UPDATE ON public.records FOR EACH ROW WHEN ((new.datestamp IS DISTINCT FROM old.datestamp)) EXECUTE FUNCTION public.wiscat_notify_change();

CREATE TRIGGER records_write_stamp BEFORE INSERT OR UPDATE ON public.records FOR EACH ROW WHEN ((NOT COALESCE((new.datestamp = (NULLIF(current_setting('wiscat.write_stamp'::text, true), ''::text))::timestamp with time zone), false))) EXECUTE FUNCTION public.wiscat_stamp_write();

CREATE TRIGGER records_xml_mend BEFORE INSERT OR UPDATE ON public.records FOR EACH ROW WHEN ((new.xml_mend OR ((new.xml IS NOT NULL) AND (current_setting('wiscat.xml_checked'::text, true) IS DISTINCT FROM 'on'::text)))) EXECUTE FUNCTION public.records_xml_mend();

CREATE TRIGGER set_members_notify_insert AFTER INSERT ON public.set_members FOR EACH ROW EXECUTE FUNCTION public.wiscat_notify_change();

CREATE TRIGGER set_members_notify_update AFTER UPDATE ON public.set_members FOR EACH ROW WHEN ((new.datestamp IS DISTINCT FROM old.datestamp)) EXECUTE FUNCTION public.wiscat_notify_change();

CREATE TRIGGER set_members_write_stamp BEFORE INSERT OR UPDATE ON public.set_members FOR EACH ROW WHEN ((NOT COALESCE((new.datestamp = (NULLIF(current_setting('wiscat.write_stamp'::text, true), ''::text))::timestamp with time zone), false))) EXECUTE FUNCTION public.wiscat_stamp_write();

ALTER TABLE ONLY public.check_reports
    ADD CONSTRAINT check_reports_check_name_fkey FOREIGN KEY (check_name) REFERENCES public.checks(name) ON DELETE SET NULL;

ALTER TABLE ONLY public.harvest_runs
    ADD CONSTRAINT harvest_runs_link_fkey FOREIGN KEY (link) REFERENCES public.links(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.links
    ADD CONSTRAINT links_local_set_fkey FOREIGN KEY (local_set) REFERENCES public.sets(spec);

ALTER TABLE ONLY public.quarantine
    ADD CONSTRAINT quarantine_link_fkey FOREIGN KEY (link) REFERENCES public.links(name) ON DELETE SET NULL;

ALTER TABLE ONLY public.quarantine
    ADD CONSTRAINT quarantine_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.harvest_runs(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.refused_records
    ADD CONSTRAINT refused_records_link_fkey FOREIGN KEY (link) REFERENCES public.links(name) ON DELETE CASCADE;

ALTER TABLE ONLY public.refused_records
    ADD CONSTRAINT refused_records_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.harvest_runs(id) ON DELETE SET NULL;

ALTER TABLE ONLY public.registry_chain
    ADD CONSTRAINT registry_chain_block_hash_fkey FOREIGN KEY (block_hash) REFERENCES public.registry_blocks(hash);

ALTER TABLE ONLY public.registry_transactions
    ADD CONSTRAINT registry_transactions_block_hash_fkey FOREIGN KEY (block_hash) REFERENCES public.registry_blocks(hash) ON DELETE CASCADE;

ALTER TABLE ONLY public.set_members
    ADD CONSTRAINT set_members_identifier_fkey FOREIGN KEY (identifier) REFERENCES public.records(identifier) ON DELETE CASCADE;

ALTER TABLE ONLY public.set_members
    ADD CONSTRAINT set_members_set_spec_fkey FOREIGN KEY (set_spec) REFERENCES public.sets(spec);
