"""A channel layer across processes without Redis: PostgreSQL's LISTEN/NOTIFY.

Each process keeps its sockets' channels and group memberships in memory (it is Channels'
InMemoryChannelLayer underneath); `group_send` is a NOTIFY on one PostgreSQL channel that
every web process LISTENs to once it has a member, and each delivers the message to its own
members of the group. So an answer generated in one web process reaches a page whose socket
landed in another, and `manage.py` or the worker can publish to every socket too.

Why not the `channels-postgres` package: it stores every message and every group membership in
tables (a membership left by a killed process stays until it expires), takes an advisory lock
per channel, and keeps one module-wide connection pool opened on the first event loop that
used it, which calls from another loop (async_to_sync outside the server, as in the worker or
a test) cannot use. Events here need no durability: a page that missed some reloads the
message from the database.

Messages are JSON (channel messages here are dicts of strings, numbers, lists). NOTIFY takes at
most 8,000 bytes: a longer message goes as numbered parts in one transaction, which PostgreSQL
delivers together and in order. Direct `send` to a channel stays within the process (nothing
here sends to another process's channel). If the listening connection drops (PostgreSQL
restarting), it reconnects within seconds; events sent in between are lost, as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
import weakref
from typing import Any

import psycopg
from channels.layers import InMemoryChannelLayer
from django.conf import settings

from notebook.database import database_url

logger = logging.getLogger(__name__)

PG_CHANNEL = "notebook_channel_layer"
PART_BYTES = 7000  # NOTIFY's payload limit is 8,000 bytes; leave room for the part header
RECONNECT_SECONDS = (0.5, 1, 2, 5)


class PostgresChannelLayer(InMemoryChannelLayer):  # type: ignore[misc]  # channels is untyped
    """InMemoryChannelLayer whose group sends reach every process through NOTIFY."""

    extensions = ["groups", "flush"]

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alias = alias
        self._prefix = uuid.uuid4().hex[:8]  # this process's part ids
        self._sequence = 0
        self._parts: dict[str, list[str]] = {}
        self._listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]]
        self._listeners = weakref.WeakKeyDictionary()
        self._ready: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event]
        self._ready = weakref.WeakKeyDictionary()
        self._senders: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, psycopg.AsyncConnection[Any]
        ] = weakref.WeakKeyDictionary()
        # One sender connection per loop, used by one send at a time: two tasks' transactions
        # on one connection would nest (psycopg makes the second a savepoint of the first).
        self._send_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]
        self._send_locks = weakref.WeakKeyDictionary()

    def _conninfo(self) -> str:
        return database_url(settings.DATABASES[self.alias])

    # --- sending ---------------------------------------------------------------------------

    def _payloads(self, group: str, message: dict[str, Any]) -> list[str]:
        body = json.dumps({"g": group, "m": message}, separators=(",", ":"))
        if len(body.encode()) <= PART_BYTES:
            return ["=" + body]
        self._sequence += 1
        key = f"{self._prefix}.{self._sequence}"
        # Split on characters, checking bytes: a part must not cut a UTF-8 sequence.
        parts: list[str] = []
        chunk: list[str] = []
        size = 0
        for char in body:
            n = len(char.encode())
            if size + n > PART_BYTES:
                parts.append("".join(chunk))
                chunk, size = [], 0
            chunk.append(char)
            size += n
        parts.append("".join(chunk))
        return [f"{key}:{i}:{len(parts)}:{part}" for i, part in enumerate(parts)]

    async def _sender(self) -> psycopg.AsyncConnection[Any]:
        loop = asyncio.get_running_loop()
        conn = self._senders.get(loop)
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(self._conninfo(), autocommit=True)
            self._senders[loop] = conn
        return conn

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        payloads = self._payloads(group, message)
        loop = asyncio.get_running_loop()
        lock = self._send_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            for attempt in range(2):  # a connection PostgreSQL closed is opened again once
                try:
                    conn = await self._sender()
                    if len(payloads) == 1:  # one statement: its own transaction
                        await conn.execute("SELECT pg_notify(%s, %s)", (PG_CHANNEL, payloads[0]))
                        return
                    async with conn.transaction():  # parts: delivered together, in order
                        for payload in payloads:
                            await conn.execute("SELECT pg_notify(%s, %s)", (PG_CHANNEL, payload))
                    return
                except psycopg.OperationalError:
                    self._senders.pop(loop, None)
                    if attempt:
                        raise

    # --- receiving -------------------------------------------------------------------------

    async def _ensure_listening(self) -> None:
        """Start this loop's listener (once) and wait until it LISTENs, so a group joined
        now misses nothing sent after."""
        loop = asyncio.get_running_loop()
        task = self._listeners.get(loop)
        if task is None or task.done():
            self._ready[loop] = asyncio.Event()
            self._listeners[loop] = loop.create_task(self._listen(self._ready[loop]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready[loop].wait(), 10)

    async def _listen(self, ready: asyncio.Event) -> None:
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo(), autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {PG_CHANNEL}")
                    ready.set()
                    failures = 0
                    async for note in conn.notifies():
                        await self._deliver(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                ready.clear()
                delay = RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)]
                failures += 1
                logger.warning("channel layer: listening failed; again in %ss", delay)
                await asyncio.sleep(delay)

    async def _deliver(self, payload: str) -> None:
        if payload.startswith("="):
            body = payload[1:]
        else:
            key, index, count, part = payload.split(":", 3)
            parts = self._parts.setdefault(key, [])
            if int(index) != len(parts):  # a part lost (reconnect): drop the message
                self._parts.pop(key, None)
                return
            parts.append(part)
            if len(parts) < int(count):
                return
            body = "".join(self._parts.pop(key))
        try:
            data = json.loads(body)
        except ValueError:
            logger.warning("channel layer: undecodable message dropped")
            return
        if data["g"] in self.groups:
            await super().group_send(data["g"], data["m"])

    async def group_add(self, group: str, channel: str) -> None:
        await self._ensure_listening()
        await super().group_add(group, channel)

    async def flush(self) -> None:
        await super().flush()
        self._parts.clear()

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._listeners.pop(loop, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        conn = self._senders.pop(loop, None)
        if conn is not None:
            await conn.close()
        await super().close()
