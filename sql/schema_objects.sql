-- Every object in schema pgqueue that a role may need a privilege on (pgqueue grants, and
-- the worker's start-up check), with its owner and the privileges the current role holds
-- on it. `linked`: a sequence that belongs to a table's column, whose owner follows the
-- table's. The schema itself is the row of kind 'schema'.
SELECT 'schema' AS kind, n.nspname AS name, '' AS args, false AS linked,
       pg_get_userbyid(n.nspowner) AS owner,
       ARRAY(SELECT p FROM unnest(ARRAY['USAGE', 'CREATE']) p
              WHERE has_schema_privilege(n.oid, p)) AS held
FROM pg_namespace n
WHERE n.nspname = 'pgqueue'
UNION ALL
SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view'
                      ELSE 'table' END,
       c.relname, '',
       EXISTS (SELECT 1 FROM pg_depend d
                WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                  AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')),
       pg_get_userbyid(c.relowner),
       CASE WHEN c.relkind = 'S'
            THEN ARRAY(SELECT p FROM unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) p
                        WHERE has_sequence_privilege(c.oid, p))
            ELSE ARRAY(SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p
                        WHERE has_table_privilege(c.oid, p)) END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgqueue' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
UNION ALL
SELECT 'function', p.proname, pg_get_function_identity_arguments(p.oid), false,
       pg_get_userbyid(p.proowner),
       CASE WHEN has_function_privilege(p.oid, 'EXECUTE') THEN ARRAY['EXECUTE']
            ELSE ARRAY[]::text[] END
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'pgqueue' AND p.prokind IN ('f', 'p')
ORDER BY 1, 2, 3
