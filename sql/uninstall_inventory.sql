-- What `pgqueue uninstall` is about to drop: the objects in schema pgqueue by kind, and
-- the runs they hold.
SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'pgqueue' AND c.relkind IN ('r', 'p')) AS tables,
       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'pgqueue' AND c.relkind IN ('v', 'm')) AS views,
       (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'pgqueue') AS functions,
       (SELECT count(*) FROM pgqueue.runs) AS runs
