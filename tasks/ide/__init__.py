"""IDE task families with verifiable outcomes: the traffic stand-in for the flywheel.

See ``README.md`` here for the families, answer formats and verifier rules.
"""

from tasks.ide.clients import CLIENT_TYPES, ClientType, client_profile, prompt_hash
from tasks.ide.families import FAMILIES, Family, get_family, task_from_id, verify_reply
from tasks.ide.mix import MIX, sample_tasks
from tasks.ide.task import Task, TaskIdError, Verdict

__all__ = [
    "CLIENT_TYPES",
    "FAMILIES",
    "MIX",
    "ClientType",
    "Family",
    "Task",
    "TaskIdError",
    "Verdict",
    "client_profile",
    "get_family",
    "prompt_hash",
    "sample_tasks",
    "task_from_id",
    "verify_reply",
]
