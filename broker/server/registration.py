"""This broker's presence in ZooKeeper: its ephemeral /brokers/ids/[id] registration, kept across
session expiries, and the controller's address when the broker must reach it (controlled shutdown).

Theory of operation
-------------------
Kafka's ``KafkaZkClient.registerBroker`` plus the session handling of ``KafkaServer``: the
registration is an ephemeral znode whose creation zxid is the **broker epoch** the controller fences
control requests with (SPEC S12.2). It is written once every listener answers, and again after each
session expiry, because the znode died with the old session:

- ``register`` retries for one session timeout (plus 2 s): a znode left by this broker's previous
  incarnation (kill -9, quick restart) goes away only when that session expires, and a ZooKeeper that
  does not answer is tried again for as long (giving up at once left a broker unregistered, issue 14).
- ``on_zk_state`` runs on kazoo's thread and only hands work to the event loop: on LOST every group
  lease may be another broker's (SPEC S11.4); on the first CONNECTED after a loss the broker registers
  again, tells the controller component, and re-reads the cached state that may have changed while it
  had no session (SPEC S14.1 b) - never giving up while the broker runs.

The kazoo types stay here and in the gateway (``zk``), so ``KafkaServer`` only wires.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import KazooException, SessionExpiredError
from kazoo.protocol.states import KazooState
from kazoo.retry import RetryFailedError

from zk.client import BrokerIdInUseError, KafkaZkClient
from zk.data import BrokerRegistration

log = logging.getLogger(__name__)

# Attempts of the re-registration and reload loops after an expiry: bounded, but far beyond any
# outage (each waits up to 5 s); a broker that stops or loses the new session leaves them at once.
_MAX_ATTEMPTS = 1_000_000


@dataclass(frozen=True)
class SessionListeners:
    """Who hears of ZooKeeper session changes (each called as described in the module docstring)."""

    on_zk_state: Callable[[KazooState], None]  # the controller component, on kazoo's thread
    on_session_lost: Callable[[], None]  # the group coordinator, on the event loop
    on_session_reestablished: Callable[[], None]  # the controller component, after re-registration
    reload_cached_state: Callable[[], Awaitable[None]]  # dynamic config, ACLs, credentials


class BrokerRegistrationManager:
    def __init__(self, zk: KafkaZkClient, broker_id: int, session_timeout_ms: int,
                 registration: Callable[[], BrokerRegistration], on_registered: Callable[[int], None],
                 listeners: SessionListeners, stopping: Callable[[], bool],
                 spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.session_timeout_ms = session_timeout_ms
        self._registration = registration
        self._on_registered = on_registered
        self._listeners = listeners
        self._stopping = stopping
        self._spawn = spawn
        self._session_lost = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    def watch_session(self, loop: asyncio.AbstractEventLoop) -> None:
        """From here on session changes are followed (after the first registration)."""
        self.loop = loop
        self.zk.add_state_listener(self.on_zk_state)

    async def register(self) -> int:
        """Write /brokers/ids/[id]; returns the broker epoch (also given to ``on_registered``)."""
        reg = self._registration()
        deadline = time.monotonic() + self.session_timeout_ms / 1000.0 + 2.0
        while True:
            try:
                broker_epoch: int = await asyncio.to_thread(self.zk.register_broker, reg)
                break
            except (BrokerIdInUseError, KazooException, RetryFailedError) as e:
                if time.monotonic() >= deadline or self._stopping() or isinstance(e, SessionExpiredError):
                    raise
                log.info("broker %d: registration not done yet (%s); retrying", self.broker_id, type(e).__name__)
                await asyncio.sleep(0.2)
        self._on_registered(broker_epoch)
        log.info("broker %d registered at /brokers/ids/%d (broker epoch %d)", self.broker_id, self.broker_id,
                 broker_epoch)
        return broker_epoch

    def on_zk_state(self, state: KazooState) -> None:
        """kazoo's thread: record session loss; re-register once a new session is up."""
        self._listeners.on_zk_state(state)
        loop = self.loop
        if loop is None:
            return
        if state == KazooState.LOST:
            log.warning("broker %d: ZooKeeper session expired", self.broker_id)
            self._session_lost.set()
            loop.call_soon_threadsafe(self._listeners.on_session_lost)
        elif state == KazooState.CONNECTED and self._session_lost.is_set() and not self._stopping():
            self._session_lost.clear()
            loop.call_soon_threadsafe(lambda: self._spawn(self._reregister()))

    async def _reregister(self) -> None:
        """A new session after an expiry: register again, until it works or that session is lost
        too (then the next CONNECTED starts over) - never give up while the broker runs."""
        for attempt in range(_MAX_ATTEMPTS):
            if self._stopping() or self._session_lost.is_set():
                return
            try:
                await self.register()
                break
            except Exception as e:
                log.error("broker %d: re-registration failed (attempt %d): %s", self.broker_id, attempt + 1, e)
                await asyncio.sleep(min(5.0, 0.5 * (attempt + 1)))
        else:
            return
        self._listeners.on_session_reestablished()
        # SPEC S14.1 (b): what changed while this broker had no session is read again.
        for attempt in range(_MAX_ATTEMPTS):
            if self._stopping() or self._session_lost.is_set():
                return
            try:
                await self._listeners.reload_cached_state()
                return
            except Exception as e:
                log.error("broker %d: reloading cached state failed (attempt %d): %s", self.broker_id, attempt + 1, e)
                await asyncio.sleep(min(5.0, 0.5 * (attempt + 1)))

    async def controller_registration(self) -> BrokerRegistration | None:
        """The controller's registration as ZooKeeper has it now (None: no controller)."""
        controller_id = await asyncio.to_thread(self.zk.get_controller_id)
        if controller_id is None:
            return None
        reg: BrokerRegistration | None = await asyncio.to_thread(self.zk.get_broker, controller_id)
        return reg
