-- A key is looked up by its value wherever one is taken in: each spare
-- key a report announces is checked against every credential, and so is an
-- enrolment's. Without this index each check scanned the whole table: at
-- 10,000 nodes a fan-out's reports made 40,000 scans of 20,000 rows, and the
-- controller spent its time in SQLite instead of declaring.
CREATE INDEX credentials_nkey ON credentials (nkey);
