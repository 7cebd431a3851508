"""Alembic environment for pgqueue: the version table lives in schema pgqueue, so it never
collides with the application's own alembic history."""

import sqlalchemy
from alembic import context
from sqlalchemy.pool import NullPool

from pgqueue.db import connect as db
from pgqueue.db.migrate import MIGRATION_LOCK

SCHEMA = "pgqueue"

config = context.config


def run_offline() -> None:
    context.configure(
        dialect_name="postgresql",
        literal_binds=True,
        version_table_schema=SCHEMA,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        context.run_migrations()


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
        context.configure(
            connection=connection, version_table_schema=SCHEMA, transactional_ddl=True
        )
        with context.begin_transaction():
            # Serialise concurrent `pgqueue migrate` runs (several workers starting at once),
            # waiting at most lock_timeout seconds: any role that can connect can take an
            # advisory lock, and must not hold a migration back forever (pgqueue.migrate
            # names the holder). The timeout is local to this wait.
            timeout = float(config.attributes.get("lock_timeout", 60.0))
            connection.execute(
                sqlalchemy.text("SELECT set_config('lock_timeout', :ms, true)"),
                {"ms": f"{max(1, round(timeout * 1000))}ms"},
            )
            connection.execute(sqlalchemy.text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
            connection.execute(
                sqlalchemy.text(
                    "SELECT set_config('lock_timeout', reset_val, true) FROM pg_settings"
                    " WHERE name = 'lock_timeout'"
                )
            )
            # CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema
            # exists: a role that owns the schema (`pgqueue grants R --as owner`) but not
            # the database must still be able to migrate. Under the lock, so no race.
            exists = connection.execute(
                sqlalchemy.text("SELECT 1 FROM pg_namespace WHERE nspname = :name"),
                {"name": SCHEMA},
            ).first()
            if exists is None:
                connection.execute(sqlalchemy.text(f"CREATE SCHEMA {SCHEMA}"))
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
