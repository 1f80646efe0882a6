"""The admin API's wire types: what each ``/admin`` route takes and answers (pydantic).

Requests are strict (``extra="forbid"``: an unknown field is a 400). Answers name the fields the
admin API has always answered, with the same names; the CLI (``switchyard fleet``, ``keys``),
the load tests and the scripts read them. Where an answer is a document that another module owns
and may grow (an episode, an export manifest), its model names the known fields and lets the
others through (``extra="allow"``), so a field added there reaches clients without an edit here.
Types owned elsewhere are used as they are: :class:`~router.config.RoutingConfig` (the routing
that ``GET /admin/routing`` answers and a canary proposes), :class:`~traffic.store.InferenceFilter`
(the traffic filter), the export configs and :class:`EpisodeExportManifest`.

:class:`ErrorBody` documents the gateway's one error shape (:mod:`gateway.errors`), which every
refusal takes: 400 a malformed body or query, 401/403 the admin token, 404, 413, 429 throttled.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from router.config import RoutingConfig
from traffic.export.config import DatasetKind, ExportConfig
from traffic.export.episode_export import EpisodeExportConfig
from traffic.store import FeedbackKind, InferenceFilter


class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="OpenAI's error type, e.g. invalid_request_error.")
    param: str | None = Field(description="The field or parameter at fault, when one is.")
    code: str | None


class ErrorBody(BaseModel):
    """Every refusal of the gateway (``gateway.errors``); 429 adds ``Retry-After``."""

    error: ErrorDetail


# ---------------------------------------------------------------- requests


class ReplicaCommand(BaseModel):
    """``POST /admin/replicas/drain`` and ``/undrain``: which replica of which local target."""

    model_config = ConfigDict(extra="forbid")

    target: str
    replica: str
    timeout_s: float = Field(default=60.0, gt=0, description="Drain: how long to wait.")
    weights_version: str | None = Field(
        default=None, description="Undrain: the weights version the replica now serves."
    )


class ExportRequest(BaseModel):
    """``POST /admin/traffic/export``: the traffic to export and how."""

    model_config = ConfigDict(extra="forbid")

    query: InferenceFilter = Field(default_factory=InferenceFilter)
    export: ExportConfig


class EpisodeExportRequest(BaseModel):
    """``POST /admin/episodes/export``: every episode the filter touches, and how."""

    model_config = ConfigDict(extra="forbid")

    query: InferenceFilter = Field(default_factory=InferenceFilter)
    export: EpisodeExportConfig


class CanaryRequest(BaseModel):
    """``POST /admin/canary``: a candidate routing deciding ``share`` of the requests; with
    ``weights_version``, a release of weights and routing together (its arm's local answers
    come only from replicas already serving that version); ``schedule``: the later stages."""

    model_config = ConfigDict(extra="forbid")

    routing: RoutingConfig
    share: float = Field(ge=0, le=1)
    weights_version: str | None = Field(default=None, min_length=1, max_length=200)
    learned_state: dict[str, Any] | None = Field(
        default=None,
        description="The candidate's own fitted scorer state (as rl_loop.refit writes it), for "
        "a release whose routing was fitted for its weights; absent: the live state, or the "
        "state file its routing names.",
    )
    schedule: list[float] = Field(
        default_factory=list,
        max_length=10,
        description="Shares of the later stages, increasing, in (share, 1]; the test passing "
        "at one moves to the next; at 1 (or with none left) it promotes (`release.auto_promote`).",
    )

    shadow: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="A shadow stage first (needs weights_version): paused, the candidate's "
        "weights answer this share of all requests off the users' path; `POST "
        "/admin/canary/resume` (optionally with the arm's refitted learned_state) ends it.",
    )

    @field_validator("schedule")
    @classmethod
    def _stages(cls, value: list[float]) -> list[float]:
        if any(not 0 < v <= 1 for v in value):
            raise ValueError("every stage's share must be in (0, 1]")
        return value


class CanaryResume(BaseModel):
    """``POST /admin/canary/resume``'s optional body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    learned_state: dict[str, Any] | None = Field(
        default=None,
        description="Ends a shadow stage with the candidate arm's scorer refitted on its "
        "shadow answers (as rl_loop.refit writes it).",
    )


class TrafficSummaryQuery(BaseModel):
    """``GET /admin/traffic/summary``'s query string: the traffic filter with
    :class:`~traffic.store.InferenceFilter`'s field names (its ``tags`` as repeated
    ``tag=key=value``) and the columns to group by. An unknown parameter is refused; an empty
    value is no condition."""

    model_config = ConfigDict(extra="forbid")

    by: str = Field(
        default="",
        description="Columns to group by, comma-separated "
        "(route_target, served_model, api_key_id, endpoint, day).",
    )
    tag: list[str] = Field(default_factory=list, description="key=value; every one must match.")
    since: datetime | None = None
    until: datetime | None = None
    route_target: str | None = None
    served_model: str | None = None
    api_key_id: str | None = None
    endpoint: str | None = None
    episode_id: str | None = None
    has_feedback: FeedbackKind | Literal["any"] | None = None
    ok_only: bool = False

    @model_validator(mode="before")
    @classmethod
    def _empty_is_no_condition(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v != ""}
        return data

    @field_validator("tag")
    @classmethod
    def _key_value(cls, tags: list[str]) -> list[str]:
        malformed = [t for t in tags if "=" not in t]
        if malformed:
            raise ValueError(f"tag filters are key=value, got {malformed[0][:100]!r}")
        return tags

    @model_validator(mode="after")
    def _a_valid_filter(self) -> Self:
        self.traffic_filter()  # the filter's own checks too (no NUL in any value)
        return self

    def group_by(self) -> list[str]:
        return [column for column in self.by.split(",") if column]

    def traffic_filter(self) -> InferenceFilter:
        fields = self.model_dump(exclude={"by", "tag"})
        return InferenceFilter(**fields, tags=dict(t.split("=", 1) for t in self.tag))


# ---------------------------------------------------------------- answers


class KeyView(BaseModel):
    """An API key as the admin API shows it: everything but its hash."""

    id: str
    name: str
    prefix: str = Field(description="The key's first characters, to recognise it.")
    created_at: str = Field(description="ISO 8601.")
    revoked_at: str | None = Field(description="ISO 8601; null while the key is active.")
    rpm_limit: int | None
    tpm_limit: int | None
    budget_usd: float | None
    spent_usd: float
    team_id: str | None = Field(default=None, description="The team the key belongs to.")
    training_use: str | None = Field(
        default=None,
        description="The key's own consent (allow, redact, deny); null: its team's, else the "
        "gateway's auth.training_use.",
    )


class TeamView(BaseModel):
    """A team and the consent its keys inherit (null: the gateway's auth.training_use)."""

    id: str
    created_at: str = Field(description="ISO 8601.")
    training_use: str | None


class TeamList(BaseModel):
    object: Literal["list"] = "list"
    data: list[TeamView]


class CreatedKey(KeyView):
    key: str = Field(description="The plaintext key: in this answer and nowhere else, ever.")


class KeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[KeyView]


class RevokedKey(BaseModel):
    id: str
    revoked: bool


class CanaryStarted(BaseModel):
    canary: str = Field(description="The candidate policy's version.")
    share: float
    current: str = Field(description="The live policy's version.")


class CanaryStaged(BaseModel):
    canary: str
    share: float
    paused: bool
    schedule: list[float] = Field(description="The later stages' shares.")


class ReleaseView(BaseModel):
    """``GET /admin/releases/{id}``: one release as the release table keeps it."""

    id: str
    status: str = Field(description="shadow, running, paused, promoted or rolled_back.")
    created_at: datetime
    updated_at: datetime
    live_version: str
    live_weights: str | None
    candidate_weights: str | None
    share: float
    schedule: list[float]
    decided_by: str | None
    decision: dict[str, Any] = Field(description="Who ended it, why, the test's figures.")


class CanaryPromoted(BaseModel):
    promoted: str = Field(description="The policy version now deciding every request.")


class CanaryDropped(BaseModel):
    dropped: str | None = Field(description="The dropped canary's version; null: there was none.")
    current: str


class ReplicaDrained(BaseModel):
    replica: str
    drained: bool = Field(description="False: requests were still in flight at the timeout.")
    in_flight: int


class ReplicaUndrained(BaseModel):
    replica: str
    drained: bool
    weights_version: str | None


class Reloaded(BaseModel):
    reloaded: bool
    policy_version: str
    reloads: int


class ReplicaState(BaseModel):
    url: str
    healthy: bool
    in_flight: int
    weights_version: str | None


class BackendState(BaseModel):
    """A back-end of the running config; ``replicas`` only for a local (``kind: vllm``) one."""

    kind: str
    model: str
    breaker: str = Field(description="closed, half_open or open.")
    replicas: list[ReplicaState] | None = None


class TrafficSummary(BaseModel):
    object: Literal["list"] = "list"
    # A row's keys are the group-by columns asked for and the figures traffic.store.summary
    # defines (count, errors, cost, latency and TTFT percentiles, acceptance): they vary with
    # ``by``, so a row is a mapping rather than a model.
    data: list[dict[str, Any]]


class TrafficExportManifest(BaseModel):
    """What ``traffic.export.ExportManifest`` holds (and writes as ``manifest.json``). Named
    here rather than imported: its module imports the dataset pipeline, which the gateway's
    start path must not pay for; unknown fields pass through."""

    model_config = ConfigDict(extra="allow")

    schema_version: int
    kind: DatasetKind
    created_at: datetime
    config: ExportConfig
    filters: dict[str, Any]
    counts: dict[str, Any]
    pii: dict[str, int]
    files: dict[str, Any] = Field(description="Each file's path, rows and SHA-256.")
    versions: dict[str, str]
    lineage: dict[str, Any] | None = Field(
        default=None,
        description="The ids of the recorded rows the dataset was built from (compact id sets"
        " per split) and its hashes (traffic.export.lineage).",
    )


class EpisodeView(BaseModel):
    """An agent's whole trajectory (``traffic.export.episode_view``, which owns the shape: its
    steps, summary, messages and tools are documents of their own; fields it adds pass
    through)."""

    model_config = ConfigDict(extra="allow")

    object: Literal["episode"]
    episode_id: str
    verdict: str | None
    verdict_reason: str | None
    reward: float | None
    consistent: bool
    complete: bool
    problems: list[str]
    summary: dict[str, Any]
    steps: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


class FleetReplica(BaseModel):
    target: str
    replica: str
    drained: bool
    weights_version: str | None


class FleetStatus(BaseModel):
    """The fleet as this gateway sees it: its members and the state they all apply."""

    backend: str = Field(description="local or redis.")
    member: str
    members: list[str]
    revision: int
    epoch: str
    routing_version: int
    policy_version: str
    canary: str | None
    replicas: list[FleetReplica]
    stats: dict[str, float]
