"""A small Flask app: signing up creates a user and enqueues its welcome email in the same
transaction (Flask-SQLAlchemy on psycopg 3); a pgqueue worker sends it.

    export DATABASE_URL=postgresql+psycopg://postgres@localhost/signup
    flask --app signup pgqueue migrate      # pgqueue's schema
    flask --app signup init-db              # the app's tables
    flask --app signup run                  # the web app
    flask --app signup pgqueue worker       # the worker
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import click
from flask import Flask, abort, jsonify, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import DateTime, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import pgqueue
from pgqueue.contrib.flask import PgQueue


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
tasks = pgqueue.App()  # its DSN comes from SQLALCHEMY_DATABASE_URI
queue = PgQueue(pgqueue_app=tasks)


class User(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)
    welcomed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


@queue.task(queue="emails", max_attempts=5)
def send_welcome(user_id: int) -> str:
    """Runs on the worker, inside the Flask app's context (db.session works)."""
    user = db.session.get(User, user_id)
    if user is None:
        return "no such user"
    user.welcomed_at = datetime.now(UTC)
    db.session.commit()
    return f"welcomed {user.email}"


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ.get(
        "DATABASE_URL", "postgresql+psycopg://postgres@localhost/signup"
    )
    app.config.update(config or {})
    db.init_app(app)
    queue.init_app(app)

    @app.post("/signup")
    def signup() -> Any:
        user = User(email=request.form["email"])
        db.session.add(user)
        db.session.flush()  # the user's id, inside the open transaction
        run = send_welcome.enqueue(user.id)  # joins db.session's transaction
        if request.form.get("fail"):
            raise RuntimeError("something broke after the enqueue")  # neither commits
        db.session.commit()  # the user and the run, together
        return jsonify(user=user.id, run=run.id), 201

    @app.get("/users/<int:user_id>")
    def user_detail(user_id: int) -> Any:
        user = db.session.get(User, user_id) or abort(404)
        welcomed = user.welcomed_at.isoformat() if user.welcomed_at else None
        return jsonify(id=user.id, email=user.email, welcomed_at=welcomed)

    @app.cli.command("init-db")
    def init_db() -> None:
        """Create the app's tables."""
        db.create_all()
        click.echo("tables created")

    return app
