-- pfm's first PostgreSQL schema: the sled engine's rows as tables. Every primary key starts with
-- user_no, so the same schema distributes on Citus by user_no.
CREATE SEQUENCE user_nos;

-- One row per user: identity, the row every write locks, the version readers check, and the
-- encoded user record (role, password hash, root, lifetime ledger).
CREATE TABLE users (
    user_no bigint PRIMARY KEY,
    user_id text NOT NULL UNIQUE,
    version bigint NOT NULL,
    record bytea NOT NULL
);

CREATE TABLE accounts (
    user_no bigint NOT NULL,
    account uuid NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, account)
);

CREATE TABLE log_records (
    user_no bigint NOT NULL,
    account uuid NOT NULL,
    seq bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, account, seq)
);

CREATE TABLE day_rows (
    user_no bigint NOT NULL,
    account uuid NOT NULL,
    day bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, account, day)
);

CREATE TABLE tracker_rows (
    user_no bigint NOT NULL,
    account uuid NOT NULL,
    day bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, account, day)
);

-- Transaction ids in each user's main-account log: the /deposit duplicate index. The primary
-- key is the unique constraint that refuses a second deposit with the same id from any node.
CREATE TABLE main_txids (
    user_no bigint NOT NULL,
    txid text NOT NULL,
    PRIMARY KEY (user_no, txid)
);

-- Service-wide settings shared by every node (the generated JWT secret).
CREATE TABLE settings (
    key text PRIMARY KEY,
    value text NOT NULL
);
