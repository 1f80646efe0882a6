"""The change log: every operator change with who made it and when (``change_log`` table).

The admin API's operations (:mod:`gateway.admin.api`: canary, promotion, rollback, keys,
replica drains) write here whether the console or the JSON API called them; a routing policy
also gets its ``policy_version`` row (``canary``, ``live``, ``retired``, ``rolled_back``).
A change is applied first and recorded next: a store that cannot be written must not block a
rollback; the failure is logged and the answer says the change went unrecorded.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

from gateway.recording.handle import RecorderHandle
from traffic.store import PolicyVersionRecord, StoreError
from traffic.store.console_queries import record_change, release, upsert_release
from traffic.store.records import ChangeRecord, ReleaseRecord, utc_now

log = logging.getLogger(__name__)

API_ACTOR = "admin-api"  # changes made through the JSON admin API (one shared credential)
SIGHUP_ACTOR = "sighup"  # a reload by signal
_ACTOR = re.compile(r"[a-z][a-z0-9-]{0,31}")


def api_actor(named: str | None) -> str:
    """Who made an admin API change: the name an automatic caller gave itself (the flywheel's
    refit, a weight swap: ``X-Switchyard-Actor``, lower case letters, digits and dashes, at most
    32; the admin credential is required either way), else ``admin-api``."""
    return named if named is not None and _ACTOR.fullmatch(named) else API_ACTOR


async def record(
    handle: RecorderHandle | None,
    actor: str,
    action: str,
    subject: str | None,
    detail: dict[str, Any],
    *,
    policy: tuple[dict[str, Any], str] | None = None,
) -> bool:
    """Append the change (and upsert the policy version ``subject`` with ``policy``'s config
    and status); False when it could not be recorded."""
    if handle is None:
        log.warning("change not recorded (store off): %s %s by %s", action, subject, actor)
        return False
    try:
        await record_change(
            handle.backend,
            ChangeRecord(actor=actor, action=action, subject=subject, detail=detail),
        )
        if policy is not None and subject is not None:
            config, status = policy
            await handle.backend.upsert_policy_version(
                PolicyVersionRecord(id=subject, config=config, status=status)
            )
    except StoreError as exc:
        log.error("change not recorded: %s %s by %s: %s", action, subject, actor, exc)
        return False
    return True


async def record_reload(
    handle: RecorderHandle | None, actor: str, previous: str, version: str
) -> bool:
    """A reload (admin API, SIGHUP): the policy version it served before and serves now."""
    detail = {"previous": previous, "changed": previous != version}
    return await record(handle, actor, "routing.reload", version, detail)


async def start_release(handle: RecorderHandle | None, started: ReleaseRecord) -> bool:
    """Write a release as it starts; False when it could not be recorded (a store off or
    failing never blocks the change itself, as for the change log)."""
    if handle is None:
        return False
    try:
        await upsert_release(handle.backend, started)
    except StoreError as exc:
        log.error("release %s not recorded: %s", started.id, exc)
        return False
    return True


async def end_release(
    handle: RecorderHandle | None,
    release_id: str,
    status: str,
    actor: str,
    decision: dict[str, Any],
) -> bool:
    """End the recorded release ``release_id`` (a release the store never saw start is left
    alone); False when it could not be recorded."""
    return await update_release(
        handle, release_id, status=status, decided_by=actor, decision=decision
    )


async def update_release(handle: RecorderHandle | None, release_id: str, **fields: Any) -> bool:
    """Change the recorded release ``release_id`` (its status, share, decision: a stage, a
    pause, its end); False when it could not be recorded or was never recorded."""
    if handle is None:
        return False
    try:
        found = await release(handle.backend, release_id)
        if found is None:
            return False
        await upsert_release(handle.backend, replace(found, updated_at=utc_now(), **fields))
    except StoreError as exc:
        log.error("release %s not recorded: %s", release_id, exc)
        return False
    return True
