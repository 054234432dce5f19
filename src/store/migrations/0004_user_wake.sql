-- When each user next needs the service's attention: a scheduled occurrence, a webhook delivery
-- or a Bill's notice. Seconds since the epoch; the table held the day of the next occurrence.
ALTER TABLE schedule_due RENAME TO user_wake;
ALTER TABLE user_wake RENAME COLUMN day TO at_secs;
UPDATE user_wake SET at_secs = at_secs * 86400;
ALTER INDEX schedule_due_day RENAME TO user_wake_at;
