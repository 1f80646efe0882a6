"""tiktoken's encodings, loaded offline from the files litellm ships, on a worker thread.

litellm bundles tiktoken's cache in ``litellm/litellm_core_utils/tokenizers/``: each encoding's
``.tiktoken`` file, named by the sha1 of its URL, which is how tiktoken's own cache names it.
With ``TIKTOKEN_CACHE_DIR`` pointing there (the value litellm itself sets the first time it
counts), ``tiktoken.get_encoding`` reads the file instead of downloading it.

Nothing is ever fetched: an encoding is loaded only when its file is there and its sha256 is the
one tiktoken expects (:data:`BUNDLED`; a file that did not match would make tiktoken download it
again). Any other encoding stays unavailable, and counts that would use it are estimates
(:mod:`gateway.backends.prompt_count`). Bundled: o200k_base (GPT-4o, 4.1, 5, the o-series),
cl100k_base (GPT-4, GPT-3.5), p50k_base (older completion models); not r50k_base nor gpt2.

Loading one encoding costs 0.15-0.35 s of CPU, and importing tiktoken about 20 ms: both happen on
a daemon thread (:meth:`Encodings.load_in_background`, started when the gateway starts), never on
the event loop nor on a request, and the gateway does not import tiktoken before that.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tiktoken import Encoding

log = logging.getLogger(__name__)

_URL: Final = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
# The sha256 tiktoken 0.14 expects of each encoding's file (tiktoken_ext/openai_public.py).
BUNDLED: Final = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
}


def bundled_folder() -> Path | None:
    """litellm's folder of tiktoken files (found, not imported); None without litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


def cached_file(folder: Path, name: str) -> Path:
    """Where tiktoken's cache keeps encoding ``name``'s file: the sha1 of its URL."""
    return folder / hashlib.sha1(_URL.format(name).encode()).hexdigest()


class Encodings:
    """tiktoken encodings by name, and OpenAI models' encoding names, once a worker thread has
    loaded them; until then (and for what cannot be loaded offline) :meth:`get` and
    :meth:`for_model` answer None, and the caller estimates."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else bundled_folder()
        self.errors: dict[str, str] = {}  # encoding or model -> why it is unavailable
        self._loaded: dict[str, Encoding] = {}
        self._models: dict[str, str | None] = {}  # model -> its encoding (None: not OpenAI's)
        self._asked: set[str] = set()  # encodings and models handed to a loader already
        self._lock = threading.Lock()
        self._loaders: list[threading.Thread] = []

    def get(self, name: str) -> Encoding | None:
        return self._loaded.get(name)

    def for_model(self, model: str) -> str | None:
        """The encoding tiktoken names for ``model`` (a bare OpenAI name such as ``gpt-4o``);
        None while unresolved, or when tiktoken does not know the model."""
        return self._models.get(model)

    def resolved(self, model: str) -> bool:
        return model in self._models

    def load_in_background(self, names: Iterable[str] = (), models: Iterable[str] = ()) -> None:
        """Resolve ``models``' encodings and load them and ``names`` on a daemon thread; what was
        asked before is not asked again. Returns at once."""
        with self._lock:
            todo_models = [m for m in dict.fromkeys(models) if "model:" + m not in self._asked]
            todo_names = [n for n in dict.fromkeys(names) if n not in self._asked]
            if not todo_models and not todo_names:
                return
            self._asked.update(todo_names)
            self._asked.update("model:" + m for m in todo_models)
            loader = threading.Thread(
                target=self._load, args=(todo_names, todo_models), name="tiktoken-load", daemon=True
            )
            self._loaders.append(loader)
        loader.start()

    def wait(self, timeout_s: float) -> bool:
        """Block until every loader started so far has finished (tests and benchmarks)."""
        deadline = time.monotonic() + timeout_s
        for loader in list(self._loaders):
            loader.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._loaders)

    def _load(self, names: list[str], models: list[str]) -> None:
        try:
            self._load_all(names, models)
        except Exception as exc:  # a broken tiktoken install: every count stays an estimate
            log.exception("tiktoken: loading %s failed", names + models)
            for what in names + models:
                self.errors[what] = f"{type(exc).__name__}: {exc}"

    def _load_all(self, names: list[str], models: list[str]) -> None:
        if self.folder is None:
            for what in names + models:
                self.errors[what] = "litellm (and its tiktoken files) is not installed"
            return
        import tiktoken

        for model in models:
            try:
                self._models[model] = tiktoken.encoding_name_for_model(model)
            except KeyError:
                self._models[model] = None
        wanted = [*names, *(e for m in models if (e := self._models.get(m)) is not None)]
        for name in dict.fromkeys(wanted):
            if name in self._loaded:
                continue
            why = self._unavailable(name)
            if why is not None:
                self.errors[name] = why
                log.warning("tiktoken: %s is not available offline (%s); estimated", name, why)
                continue
            # Read by tiktoken's cache as it loads: litellm's folder, the value litellm sets.
            os.environ["TIKTOKEN_CACHE_DIR"] = str(self.folder)
            started = time.perf_counter()
            self._loaded[name] = tiktoken.get_encoding(name)
            log.info("tiktoken: %s loaded in %.3f s", name, time.perf_counter() - started)

    def _unavailable(self, name: str) -> str | None:
        """Why encoding ``name`` cannot be loaded without a download; None when it can."""
        expected = BUNDLED.get(name)
        if expected is None or self.folder is None:
            return "not among the files litellm ships"
        path = cached_file(self.folder, name)
        try:
            data = path.read_bytes()
        except OSError as exc:
            return f"cannot read {path}: {exc}"
        if hashlib.sha256(data).hexdigest() != expected:
            return f"{path} does not match its sha256"
        return None
