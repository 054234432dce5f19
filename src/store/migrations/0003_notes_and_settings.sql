-- Notes of log records (payee, memo and import id of a statement line) and a user's settings
-- (import rules, saved CSV mappings), each written in the transaction of the write they belong
-- to. Primary keys start with user_no (Citus).
CREATE TABLE log_notes (
    user_no bigint NOT NULL,
    account uuid NOT NULL,
    seq bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, account, seq)
);

CREATE TABLE user_settings (
    user_no bigint NOT NULL,
    key text NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (user_no, key)
);

-- The day each user's next scheduled occurrence falls due: what every node's poster reads to find
-- the users with something to post.
CREATE TABLE schedule_due (
    user_no bigint PRIMARY KEY,
    user_id text NOT NULL,
    day bigint NOT NULL
);
CREATE INDEX schedule_due_day ON schedule_due (day);
