-- A person's one-time login (`mesh person add --role` without a key): the
-- public key of the login principal the token's seed is, and when it
-- expires. Spent by `mesh login`, which records the person's own key in
-- the same transaction; a change of either moves the records revision
-- (the persons table's triggers count any update), so the login
-- principal is composed and withdrawn at once.
ALTER TABLE persons ADD COLUMN login_key TEXT;
ALTER TABLE persons ADD COLUMN login_expires_at BIGINT;
