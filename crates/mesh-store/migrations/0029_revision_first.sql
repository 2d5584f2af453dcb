-- PostgreSQL only (SQLite has one writer at a time): every statement that
-- moves the records' revision takes the revision's row before it touches
-- any row of its own. Moved after its rows, two writers could each hold a
-- row the other wanted — a key inserted by one, the revision by the other —
-- and one was aborted as a deadlock (seen as `mesh up --ha` enrolled its
-- node while the controller recorded the token's hash). The revision
-- before every kind's row, too: its trigger's name sorts first.
{{revision_first}}
