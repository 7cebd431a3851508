-- The session, other than this one, that has held a lock on a table of schema pgqueue
-- longest: what a migration's ALTER TABLE most likely waited for (pgqueue.db.migrate).
SELECT a.pid, a.usename, a.application_name, a.state, a.xact_start, c.relname
  FROM pg_catalog.pg_locks l
  JOIN pg_catalog.pg_class c ON c.oid = l.relation
  JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.granted
   AND l.pid <> pg_catalog.pg_backend_pid()
   AND c.relnamespace = pg_catalog.to_regnamespace('pgqueue')
   AND c.relkind IN ('r', 'p')
 ORDER BY a.xact_start NULLS LAST
 LIMIT 1
