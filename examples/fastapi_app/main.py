"""A FastAPI service on pgqueue's asyncio API: a signup row and its welcome task commit in
one transaction; endpoints read runs and wait for results without blocking the loop.

    export PGQUEUE_DSN=postgresql://postgres@localhost/signups
    pgqueue migrate
    uvicorn main:api                                  # the API
    pgqueue worker --app main:tasks                   # the worker
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import pgqueue

tasks = pgqueue.App()  # DSN from $PGQUEUE_DSN

SCHEMA = """
CREATE TABLE IF NOT EXISTS signups (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL UNIQUE,
    welcomed boolean NOT NULL DEFAULT false
)"""


@tasks.task(name="welcome", queue="emails")
async def welcome(signup_id: int) -> str:
    """An async task: runs on the worker's event loop."""
    async with await psycopg.AsyncConnection.connect(tasks.dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "UPDATE signups SET welcomed = true WHERE id = %s RETURNING email", (signup_id,)
        )
        row = await cur.fetchone()
    return f"welcomed {row[0]}" if row else "no such signup"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with tasks.async_connection() as conn:
        await conn.execute(SCHEMA)
    yield
    await tasks.aclose()  # the App's async pool belongs to this event loop


api = FastAPI(lifespan=lifespan)


class Signup(BaseModel):
    email: str


@api.post("/signups", status_code=201)
async def create_signup(body: Signup, wait: float = 0) -> dict[str, Any]:
    """Insert the signup and enqueue its welcome in one transaction; with ?wait=SECONDS,
    also wait for the task's result."""
    async with tasks.async_connection() as conn:
        try:
            async with conn.transaction():
                cur = await conn.execute(
                    "INSERT INTO signups (email) VALUES (%s) RETURNING id", (body.email,)
                )
                row = await cur.fetchone()
                assert row is not None
                run = await welcome.options(conn=conn).enqueue_async(row[0])
        except psycopg.errors.UniqueViolation:
            raise HTTPException(409, f"{body.email} already signed up") from None
    out: dict[str, Any] = {"signup": row[0], "run": run.id}
    if wait:
        out["result"] = await run.wait_async(timeout=wait)
    return out


@api.get("/runs/{run_id}")
async def get_run(run_id: int) -> dict[str, Any]:
    try:
        run = await tasks.get_run_async(run_id)
    except pgqueue.RunNotFound:
        raise HTTPException(404, f"no run {run_id}") from None
    return {"id": run.id, "task": run.task, "state": run.state, "result": run.result}
