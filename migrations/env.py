"""Alembic environment for pgqueue: the version table lives in schema pgqueue, so it never
collides with the application's own alembic history."""

import sqlalchemy
from alembic import context
from sqlalchemy.pool import NullPool

from pgqueue.db import connect as db
from pgqueue.db.migrate import MIGRATION_LOCK, needs_comment

SCHEMA = "pgqueue"

config = context.config


def run_offline() -> None:
    context.configure(
        dialect_name="postgresql",
        literal_binds=True,
        # the named paramstyle leaves a % alone: with the driver's (format) style, every %
        # of a function body came out doubled, and RAISE 'queue %%' fails to compile
        dialect_opts={"paramstyle": "named"},
        version_table_schema=SCHEMA,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        context.run_migrations()
        context.execute(comment_needs(str(context.get_head_revision())))


def run_online() -> None:
    dsn = config.attributes["dsn"]
    engine = sqlalchemy.create_engine(
        # search_path pinned (pgqueue.db.connect): the views and SQL functions a revision
        # creates resolve their names once, at creation, with it
        "postgresql+psycopg://",
        creator=lambda: db.connect(dsn, autocommit=False),
        poolclass=NullPool,
    )
    with engine.connect() as connection:
        # Serialise concurrent `pgqueue migrate` runs (several workers starting at once) with
        # a session advisory lock, waiting at most lock_timeout seconds: any role that can
        # connect can take an advisory lock, and must not hold a migration back forever
        # (pgqueue.db.migrate names the holder).
        timeout = float(config.attributes.get("lock_timeout", 60.0))
        set_lock_timeout(connection, timeout)
        connection.execute(sqlalchemy.text(f"SELECT pg_advisory_lock({MIGRATION_LOCK})"))
        config.attributes["holds_migration_lock"] = True
        # Each revision then runs in a transaction of its own, and each statement waits for
        # a table's lock at most ddl_lock_timeout seconds: a statement waiting for an
        # exclusive lock makes every claim and enqueue on that table queue behind it, so it
        # gives up early and pgqueue.db.migrate tries the revision again a little later.
        set_lock_timeout(connection, float(config.attributes.get("ddl_lock_timeout", 2.0)))
        # CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema
        # exists: a role that owns the schema (`pgqueue grants R --as owner`) but not the
        # database must still be able to migrate. Under the lock, so no race.
        exists = connection.execute(
            sqlalchemy.text("SELECT 1 FROM pg_namespace WHERE nspname = :name"),
            {"name": SCHEMA},
        ).first()
        if exists is None:
            connection.execute(sqlalchemy.text(f"CREATE SCHEMA {SCHEMA}"))
        # alembic leaves alone a connection already in a transaction (as an outer one)
        connection.commit()
        context.configure(
            connection=connection,
            version_table_schema=SCHEMA,
            transactional_ddl=True,
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        revision = context.get_context().get_current_revision()
        if revision is not None:
            connection.execute(sqlalchemy.text(comment_needs(revision)))
        # (closing the connection lets the advisory lock go too)
        connection.execute(sqlalchemy.text(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})"))
        connection.commit()


def comment_needs(revision: str) -> str:
    """The statement that writes on the version table which releases of pgqueue work with
    a schema at `revision` (pgqueue.db.migrate.NEEDS, read by migrate.check())."""
    comment = needs_comment(revision)
    assert "'" not in comment  # a version from pgqueue's own code
    return f"COMMENT ON TABLE {SCHEMA}.alembic_version IS '{comment}'"


def set_lock_timeout(connection: sqlalchemy.Connection, seconds: float) -> None:
    """For the rest of the session (it outlives the transactions of the revisions)."""
    connection.execute(
        sqlalchemy.text("SELECT set_config('lock_timeout', :ms, false)"),
        {"ms": f"{max(1, round(seconds * 1000))}ms"},
    )


if context.is_offline_mode():
    run_offline()
else:
    run_online()
