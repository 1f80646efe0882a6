"""What the traffic store writes and reads back: immutable records, one per table row.

Every record is a frozen, slotted, keyword-only dataclass whose field names are exactly the column
names of its table in :mod:`traffic.store.schema` (a test holds the two together). Datetimes are
timezone-aware and normalised to UTC at construction; a naive datetime is a ``ValueError``, as is
an unknown feedback kind. "Frozen-ish": the containers inside (``request``, ``tags`` ...) are plain
dicts and lists, so do not mutate them after handing a record to the writer.

Ids of inference, feedback and shadow rows are UUIDv7 (:func:`traffic.store.ids.new_id`), created
when the record is; API keys, model versions and policy versions take any string id.

Read side: :class:`InferenceFilter` selects inferences (all given conditions must hold) and
:class:`InferenceRow` is one inference with its feedback (and, when asked, shadow answers). The
exporters (:mod:`traffic.export`) read these rows as they are: there is no second row shape.

Vocabulary, defined here once: :data:`FeedbackKind` (checked when a feedback record is made) and
:data:`WireFormat`, the formats the gateway records. ``InferenceRecord.endpoint`` and
``wire_format`` stay plain strings: a row is read back whatever it holds, and the exporters count
a format they do not know instead of failing (the endpoint names are ``router.features.Endpoint``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, Literal, NamedTuple, get_args

import orjson
from pydantic import ConfigDict

from traffic.store.ids import new_id

FeedbackKind = Literal["accepted", "rejected", "edited", "score", "comment", "demonstration"]
FEEDBACK_KINDS: Final[tuple[str, ...]] = get_args(FeedbackKind)

# The client's wire format, one per door: chat and legacy completions (both internal already),
# OpenAI Responses and Anthropic Messages (translated into chat by their doors).
WireFormat = Literal["openai.chat", "openai.completions", "openai.responses", "anthropic.messages"]

# Consent to train on an exchange, per key (else its team's, else the gateway's default), stamped
# on each inference when it is recorded: allow (as recorded), redact (only scrubbed by
# traffic.scrub), deny (never in a dataset). What the exporters do: traffic.export.consent.
TrainingUse = Literal["allow", "redact", "deny"]
TRAINING_USES: Final[tuple[str, ...]] = get_args(TrainingUse)

GroupKey = Literal["route_target", "served_model", "api_key_id", "endpoint", "day"]
GROUP_KEYS: Final[tuple[str, ...]] = get_args(GroupKey)


def utc_now() -> datetime:
    return datetime.now(UTC)


class JsonText(NamedTuple):
    """A JSON document already encoded (strict JSON, UTF-8), written to its column as it is.

    Why: the gateway's record writer process (:mod:`gateway.recording.process`) gets a client's
    body as the bytes it came in, not as the parsed object, which would cost both processes far
    more (pickle, unpickle, encode, free; docs/recording.md, "Figures behind traffic/'s
    choices"). Only records built in that process hold one; every record read back from the
    store holds parsed objects (:func:`json_object` reads either)."""

    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode()

    def parsed(self) -> Any:
        """The document as objects."""
        return orjson.loads(self.data)


JsonField = dict[str, Any] | JsonText


def json_object(value: JsonField | None) -> dict[str, Any] | None:
    """A JSON field as its object (a :class:`JsonText` parsed; None when it is not one)."""
    if isinstance(value, JsonText):
        parsed = value.parsed()
        return parsed if isinstance(parsed, dict) else None
    return value


def as_utc(value: datetime, name: str) -> datetime:
    """Return ``value`` in UTC; reject naive datetimes, whose zone would be a guess."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value!r}")
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def _normalise_times(record: object, *names: str) -> None:
    for name in names:
        value = getattr(record, name)
        if value is not None:
            # Frozen dataclass: normalising in __post_init__ is the documented escape hatch.
            object.__setattr__(record, name, as_utc(value, name))


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceRecord:
    """One request the gateway answered (or failed to answer), as the client saw it.

    ``request`` and ``response`` are the client's body and the answer in the client's wire
    format. ``canonical_request`` and ``canonical_response`` are the same exchange in the internal
    format (OpenAI chat completions), as the served model saw it, and are stored only where they
    differ from the client's (nothing is stored twice):

    - ``canonical_request``: the chat body the door's translation produced, before any
      provider-specific change (model renamed, fields a provider does not take); what training
      reads. Set by the translating doors (Responses, Messages); ``None`` for the OpenAI doors,
      whose ``request`` already is that body, and for a request refused before translation.
      A Messages request passed natively to an Anthropic provider still records its translation:
      it is what the local model is sent, and the local model is what training targets.
    - ``canonical_response``: the answer as an OpenAI ``chat.completion`` (or ``text_completion``):
      the completion the door rendered, the chunks its stream encoder consumed assembled, or a
      native answer converted. ``None`` for the OpenAI doors (identical to ``response``) and
      where there is no answer.

    Rows written before migration 3 read both as ``None``: the exporter translates them again
    only with the gateway's live translators, handed to it (``traffic.export.wire_formats``).
    """

    id: str = field(default_factory=new_id)
    ts: datetime = field(default_factory=utc_now)
    api_key_id: str | None = None
    episode_id: str | None = None
    endpoint: str  # "chat.completions", "completions", "responses", "messages"
    wire_format: str  # a WireFormat
    request: JsonField  # the original request body
    canonical_request: JsonField | None = None  # the internal chat body (see above)
    response: dict[str, Any] | None = None  # the final assembled response, in its wire format
    canonical_response: dict[str, Any] | None = None  # the answer as a chat completion
    route_target: str
    served_model: str
    weights_version: str | None = None
    replica: str | None = None
    policy_version: str | None = None
    policy_reason: str | None = None
    status: int  # HTTP status given to the client
    error: str | None = None
    stream: bool = False
    latency_ms: float
    ttft_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens read from the provider's cache
    cache_creation_tokens: int | None = None  # prompt tokens written to it (None: unknown)
    cost_usd: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # Provider calls made to serve this request: {"target", "status", "error", "latency_ms", ...}.
    attempts: list[dict[str, Any]] = field(default_factory=list)
    # The routing decision (router.decision.RouteDecision's fields; None: not decided, or
    # written before migration 6). ``decision_propensity``: the probability that the deciding
    # policy sent it local, exploration included.
    decision_kind: str | None = None
    decision_target: str | None = None  # the target the policy chose, before an episode fallback
    decision_p_local: float | None = None
    decision_threshold: float | None = None
    decision_propensity: float | None = None
    decision_state_version: str | None = None  # the learned state's version
    release_id: str | None = None  # the canary running when it was decided
    release_arm: str | None = None  # "candidate" or "live"
    release_p: float | None = None  # the probability of being assigned that arm
    release_other_target: str | None = None  # what the other arm decided (migration 7)
    shadow_p: float | None = None  # the probability it was shadowed (None: no shadow configured)
    shadow_skipped: bool | None = None  # sampled, but skipped for want of room
    # The caller's consent when it was recorded (a TrainingUse; None: recorded before
    # migration 9). A plain string, as endpoint: read back whatever it holds.
    training_use: str | None = None

    def __post_init__(self) -> None:
        _normalise_times(self, "ts")

    @property
    def ok(self) -> bool:
        """Successful for the client: a status below 400 and no error."""
        return self.status < 400 and self.error is None


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackRecord:
    """A reaction to an inference; many per inference."""

    id: str = field(default_factory=new_id)
    inference_id: str
    ts: datetime = field(default_factory=utc_now)
    kind: FeedbackKind
    value: float | None = None
    payload: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in FEEDBACK_KINDS:
            raise ValueError(f"feedback kind must be one of {FEEDBACK_KINDS}, got {self.kind!r}")
        _normalise_times(self, "ts")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowRecord:
    """A local answer computed for a frontier-served request (never shown) and its comparison."""

    id: str = field(default_factory=new_id)
    inference_id: str
    ts: datetime = field(default_factory=utc_now)
    target: str
    response: dict[str, Any]
    comparison: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _normalise_times(self, "ts")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelVersionRecord:
    """A checkpoint of the served model, its lineage and evaluation."""

    id: str
    parent: str | None = None
    created_at: datetime = field(default_factory=utc_now)
    path: str
    metadata: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    status: str = "candidate"

    def __post_init__(self) -> None:
        _normalise_times(self, "created_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetRecord:
    """A dataset a checkpoint was trained on (``id``: its SHA-256): its kind, how many recorded
    rows it was built from and their bounds, its ``lineage`` (``traffic.export.lineage``: those
    rows' ids, compact, and its hashes) and how it was built (``config``)."""

    id: str
    created_at: datetime = field(default_factory=utc_now)
    kind: str
    row_count: int
    first_id: str | None = None
    last_id: str | None = None
    lineage: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _normalise_times(self, "created_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelDatasetRecord:
    """Checkpoint ``model_version_id`` was trained on dataset ``dataset_id``, whose files are at
    ``location`` (None: it was built in memory)."""

    model_version_id: str
    dataset_id: str
    location: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyVersionRecord:
    """A routing policy configuration and where it is in its rollout."""

    id: str
    created_at: datetime = field(default_factory=utc_now)
    config: dict[str, Any]
    status: str = "candidate"

    def __post_init__(self) -> None:
        _normalise_times(self, "created_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKeyRecord:
    """A client credential (only its hash is stored), its limits and its spend."""

    id: str = field(default_factory=new_id)
    name: str
    key_hash: str
    prefix: str  # the first characters of the key, to recognise it in listings
    created_at: datetime = field(default_factory=utc_now)
    revoked_at: datetime | None = None
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    budget_usd: float | None = None
    spent_usd: float = 0.0
    team_id: str | None = None  # the team or tenant it belongs to (migration 9)
    training_use: str | None = None  # its own consent (a TrainingUse); None: its team's

    def __post_init__(self) -> None:
        _normalise_times(self, "created_at", "revoked_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamRecord:
    """A team or tenant that API keys belong to (``id``: its name) and its settings:
    ``training_use`` is the consent of its keys that have none of their own (None: the
    gateway's default)."""

    id: str
    created_at: datetime = field(default_factory=utc_now)
    training_use: str | None = None

    def __post_init__(self) -> None:
        _normalise_times(self, "created_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeRecord:
    """One operator change (a canary started, a policy promoted, a key revoked ...): who
    (``actor``), when, what (``action`` on ``subject``) and its details."""

    id: str = field(default_factory=new_id)
    ts: datetime = field(default_factory=utc_now)
    actor: str
    action: str
    subject: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _normalise_times(self, "ts")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRecord:
    """One release of a routing candidate (``id``: its policy version) against the live one:
    ``status`` ``running`` / ``promoted`` / ``rolled_back``; ``share`` the candidate arm's,
    ``schedule`` the shares it goes through; ``*_weights`` the local weights each arm serves
    (None: the same, a routing-only release); ``decision``: what ended it (who, why, the
    sequential test's bounds and counts)."""

    id: str
    created_at: datetime = field(default_factory=utc_now)
    updated_at: datetime = field(default_factory=utc_now)
    status: str = "running"
    live_version: str
    live_weights: str | None = None
    candidate_weights: str | None = None
    routing: dict[str, Any]
    share: float
    schedule: list[float] = field(default_factory=list)
    decided_by: str | None = None
    decision: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _normalise_times(self, "created_at", "updated_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceFilter:
    """Which inferences to read; every condition given must hold, ``None`` means "any".

    ``since``/``until`` select by the creation time carried in the id (millisecond precision):
    ``since <= time < until``, answered from the primary key. ``tags`` must all match exactly.
    ``has_feedback`` keeps inferences with at least one feedback of that kind, or of any kind
    for ``"any"``. ``ok_only`` keeps status < 400 without error.

    The one definition of the traffic filter: the CLI, the exports and the RL loop build it
    directly; the admin API validates JSON into it with pydantic (``traffic.export.TRAFFIC_QUERY``:
    ISO 8601 times parsed, types checked, unknown keys rejected per ``__pydantic_config__``).
    """

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    since: datetime | None = None
    until: datetime | None = None
    route_target: str | None = None
    served_model: str | None = None
    api_key_id: str | None = None
    endpoint: str | None = None
    episode_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    has_feedback: FeedbackKind | Literal["any"] | None = None
    ok_only: bool = False

    def __post_init__(self) -> None:
        _normalise_times(self, "since", "until")
        texts = [self.route_target, self.served_model, self.api_key_id, self.endpoint]
        texts += [self.episode_id, *self.tags.keys(), *self.tags.values()]
        if any(isinstance(t, str) and "\x00" in t for t in texts):
            # No stored value holds one on PostgreSQL (its text cannot), so nothing could
            # match there; refused on every backend alike.
            raise ValueError("a filter value cannot contain a NUL character")
        if self.has_feedback is not None and self.has_feedback not in (*FEEDBACK_KINDS, "any"):
            raise ValueError(f"has_feedback must be a feedback kind or 'any': {self.has_feedback}")


@dataclass(frozen=True, slots=True)
class InferenceOwner:
    """Who made an inference: its API key's id (None: made anonymously, auth not required)."""

    api_key_id: str | None


@dataclass(frozen=True, slots=True)
class InferenceRow:
    """One inference read back, with its feedback (oldest first) and shadow answers."""

    inference: InferenceRecord
    feedback: list[FeedbackRecord]
    shadows: list[ShadowRecord] = field(default_factory=list)
