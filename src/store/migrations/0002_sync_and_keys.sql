-- Delta sync and idempotency keys (docs/api.md): one change row per committed data write, and the
-- kept answers of keyed requests. Both are written in the transaction of the write they belong
-- to; primary keys start with user_no (Citus).
CREATE TABLE change_rows (
    user_no bigint NOT NULL,
    knowledge bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, knowledge)
);

CREATE TABLE idem_keys (
    user_no bigint NOT NULL,
    key text NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, key)
);
