"""Names that separately started processes must agree on, each defined here once.

The parts of the system do not import each other (README, "Architecture"): they meet over HTTP,
a command line or the environment, where only a string ties them together. This module holds
those strings and imports nothing, so every package may import it (`tests/test_architecture.py`
lists it beside each package's own imports).
"""

from __future__ import annotations

from typing import Final

#: The local model's public name: what the vLLM replicas serve it as (`--served-model-name`),
#: and the alias clients ask the gateway for to be sent to it.
LOCAL_MODEL_NAME: Final = "switchyard-local"

#: The environment variable the gateway reads its admin credential from (the default of
#: `gateway.admin_token_env` in its config), and that the tools calling its admin API read.
ADMIN_TOKEN_ENV: Final = "SWITCHYARD_ADMIN_TOKEN"
