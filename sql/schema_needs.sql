-- The oldest pgqueue release that works with this database's schema, as `pgqueue migrate`
-- wrote it on the version table (pgqueue.db.migrate.NEEDS): 'pgqueue >= X.Y.Z', or NULL
-- when a release before 0.3.0 migrated it.
SELECT pg_catalog.obj_description(c.oid, 'pg_class')
  FROM pg_catalog.pg_class c
 WHERE c.oid = pg_catalog.to_regclass('pgqueue.alembic_version')
