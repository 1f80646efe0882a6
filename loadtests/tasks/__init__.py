"""IDE task families with verifiable outcomes: the traffic stand-in for the flywheel.

See ``README.md`` here for the families, answer formats and verifier rules.
"""

from loadtests.tasks.families import FAMILIES, Family, get_family, task_from_id, verify_reply
from loadtests.tasks.mix import MIX, sample_tasks
from loadtests.tasks.task import Task, TaskIdError, Verdict, find_task_marker

__all__ = [
    "FAMILIES",
    "MIX",
    "Family",
    "Task",
    "TaskIdError",
    "Verdict",
    "find_task_marker",
    "get_family",
    "sample_tasks",
    "task_from_id",
    "verify_reply",
]
