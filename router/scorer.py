"""Request scorer: P(the local model's answer is accepted), read from what the request says.

Definitions
- Example: ``(RequestText, accepted, arm, weight)``, one recorded verdict: live user feedback on
  an answer served by ``arm``, or a verified shadow answer (arm ``local``).
- Features: ``router/scorer_features.py`` (hashed unigrams and bigrams of the last user turn,
  its last line, code signals, request shape), a sparse vector ``x`` over ``2**18`` dims.
- Local model: ``p_local(x) = sigmoid(b + w . x)``, fitted on the ``local`` examples.
  ``logreg`` (the default): weighted log loss + ``l2/2 |w|^2`` (intercept unpenalized),
  minimized by mini-batch Adagrad, ``epochs`` passes in an order drawn from ``seed`` (the same
  examples, config and seed give the same weights, bit for bit). ``naive_bayes``: multinomial
  naive Bayes over the same vectors, additive smoothing ``nb_alpha``; its log-odds are also
  ``b + w . x``, so both serve through one code path and one file format.
- Frontier: one Beta-smoothed rate over the ``frontier`` examples,
  ``(frontier_prior * frontier_prior_weight + accepted) / (frontier_prior_weight + n)``.
  Frontier acceptance varies little (the record: ~0.97) and its rejections are few, so a
  per-request model would fit noise; the threshold (below) compares against the frontier's mean.
- Decision (the caller's): local iff ``p_local >= threshold``, the threshold from
  :mod:`router.calibration` (learn-then-test on lower bounds, on held-out verdicts re-weighted
  to the live mix).
- Shadow sampling: :func:`uncertainty` ``p (1 - p)`` is largest where the scorer is least sure.

Why logistic regression (the default): it ranks as well as the true rates and its probabilities
are calibrated, which the threshold, the shadow sampler and each decision's printed reason read;
naive Bayes counts a unigram and the bigrams holding it as independent evidence, so it is
overconfident. Measurements (AUC, log loss, fit and predict time, ablations): docs/routing.md,
"The scorer's model, measured".

Memory: the weights are a dense float32 vector, ``4 * 2**dim_bits`` bytes (1 MiB at 18 bits;
:attr:`Scorer.nbytes`); the JSON stores only weights that differ from the default.
Pure: fitting is a function of examples; the gateway loads the fitted scorer from JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from router.errors import PolicyConfigError
from router.request_text import RequestText
from router.scorer_features import Featurizer, FeaturizerConfig

Arm = Literal["local", "frontier"]
ModelKind = Literal["logreg", "naive_bayes"]
FORMAT = "switchyard.scorer/1"

FloatArray = npt.NDArray[np.float64]


class ScorerConfig(BaseModel):
    """How a scorer is fitted; the featurizer part is stored with the fitted scorer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelKind = Field(default="logreg", description="Local-accept model.")
    features: FeaturizerConfig = Field(default_factory=FeaturizerConfig)
    l2: float = Field(default=1e-3, ge=0, description="logreg: L2 penalty per example.")
    epochs: int = Field(default=10, ge=1, description="logreg: passes over the examples.")
    batch_size: int = Field(default=32, ge=1, description="logreg: examples per step.")
    learning_rate: float = Field(default=0.2, gt=0, description="logreg: Adagrad step size.")
    nb_alpha: float = Field(default=0.1, gt=0, description="naive_bayes: additive smoothing.")
    prune_below: float = Field(
        default=1e-3, ge=0, description="Weights closer than this to the default are dropped."
    )
    frontier_prior: float = Field(default=0.9, gt=0, lt=1, description="Frontier rate prior.")
    frontier_prior_weight: float = Field(
        default=2.0, ge=0, description="Pseudo-examples behind the frontier prior."
    )


@dataclass(frozen=True, slots=True)
class Example:
    """One verdict: the request, whether the answer was accepted, which arm answered."""

    text: RequestText
    accepted: bool
    arm: Arm = "local"
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class FrontierRate:
    """Weighted frontier verdicts and the Beta prior they are smoothed with."""

    accepted: float = 0.0
    rejected: float = 0.0
    prior: float = 0.9
    prior_weight: float = 2.0

    def mean(self) -> float:
        total = self.prior_weight + self.accepted + self.rejected
        return (self.prior * self.prior_weight + self.accepted) / total if total else self.prior


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class Scorer:
    """A fitted scorer: ``predict_local`` / ``predict_frontier`` for one request."""

    def __init__(
        self,
        version: str,
        model: ModelKind,
        features: FeaturizerConfig,
        weights: npt.NDArray[np.float32],
        bias: float,
        default_weight: float = 0.0,
        frontier: FrontierRate | None = None,
    ) -> None:
        """``weights``: dense, ``2**features.dim_bits`` entries; ``default_weight``: the value
        of every entry the JSON file does not list."""
        self.version = version
        self.model = model
        self.featurizer = Featurizer(features)
        if weights.shape != (self.featurizer.dim,):
            raise PolicyConfigError(f"scorer weights must have {self.featurizer.dim} entries")
        self.weights = weights.astype(np.float32, copy=False)
        self.bias = float(bias)
        self.default_weight = float(np.float32(default_weight))
        self.frontier = frontier or FrontierRate()
        self._p_frontier = self.frontier.mean()

    @property
    def nbytes(self) -> int:
        """Memory held by the model's arrays."""
        return int(self.weights.nbytes)

    def logit_local(self, text: RequestText) -> float:
        """``b + w . x``: the log-odds behind :meth:`predict_local`."""
        indices, values = self.featurizer.featurize(text)
        return self.bias + float(np.dot(self.weights[indices], values))

    def predict_local(self, text: RequestText) -> float:
        """P(the local model's answer to this request is accepted)."""
        return _sigmoid(self.logit_local(text))

    def predict_frontier(self, text: RequestText) -> float:
        """P(the frontier's answer is accepted): one smoothed rate (see the module docstring)."""
        return self._p_frontier

    def to_json(self) -> dict[str, Any]:
        default = np.float32(self.default_weight)
        nz = np.flatnonzero(self.weights != default)
        return {
            "format": FORMAT,
            "version": self.version,
            "model": self.model,
            "features": self.featurizer.config.model_dump(),
            "bias": self.bias,
            "default_weight": self.default_weight,
            # str(float32) is the shortest text that reads back as the same float32
            "weights": {str(i): float(str(self.weights[i])) for i in nz.tolist()},
            "frontier": asdict(self.frontier),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scorer:
        """Raises :class:`PolicyConfigError` naming what is wrong with ``data``."""
        if data.get("format") != FORMAT:
            raise PolicyConfigError(f"scorer format {data.get('format')!r}, expected {FORMAT!r}")
        try:
            features = FeaturizerConfig.model_validate(data["features"])
            dim = 1 << features.dim_bits
            default = float(data["default_weight"])
            weights = np.full(dim, default, dtype=np.float32)
            items = data["weights"].items()
            index = np.fromiter((int(k) for k, _ in items), dtype=np.int64, count=len(items))
            if len(index) and (index.min() < 0 or index.max() >= dim):
                raise PolicyConfigError(f"scorer weight index outside [0, {dim})")
            weights[index] = np.fromiter((float(v) for _, v in items), np.float32, len(items))
            bias = float(data["bias"])
            if not (math.isfinite(bias) and np.isfinite(weights).all()):
                raise PolicyConfigError("scorer weights and bias must be finite numbers")
            front = data["frontier"]
            frontier = FrontierRate(
                *(float(front[k]) for k in ("accepted", "rejected", "prior", "prior_weight"))
            )
            model = data["model"]
            if model not in ("logreg", "naive_bayes"):
                raise PolicyConfigError(f"unknown scorer model {model!r}")
            return cls(
                str(data["version"]),
                model,
                features,
                weights,
                bias,
                default,
                frontier,
            )
        except (KeyError, TypeError, ValueError, AttributeError, ValidationError) as exc:
            raise PolicyConfigError(f"invalid scorer file: {exc!r}") from exc


@dataclass(slots=True)
class _Rows:
    """Featurized examples as CSR arrays (``indptr``, ``indices``, ``values``)."""

    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int64]
    values: FloatArray

    @classmethod
    def build(cls, featurizer: Featurizer, texts: Sequence[RequestText]) -> _Rows:
        vectors = [featurizer.featurize(t) for t in texts]
        lengths = [len(i) for i, _ in vectors]
        indptr = np.zeros(len(vectors) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        if not vectors:
            return cls(indptr, np.zeros(0, np.int64), np.zeros(0))
        indices = np.concatenate([i for i, _ in vectors])
        values = np.concatenate([v for _, v in vectors]).astype(np.float64)
        return cls(indptr, indices, values)

    def row_ids(self) -> npt.NDArray[np.int64]:
        return np.repeat(np.arange(len(self.indptr) - 1), np.diff(self.indptr))

    def gather(
        self, rows: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], FloatArray, npt.NDArray[np.int64]]:
        """Indices, values and batch-row position of every entry of ``rows``."""
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
        pos = np.repeat(np.arange(len(rows)), ends - starts)
        return self.indices[take], self.values[take], pos


def _fit_logreg(
    rows: _Rows, y: FloatArray, w_ex: FloatArray, dim: int, cfg: ScorerConfig, seed: int
) -> tuple[FloatArray, float]:
    rng = np.random.default_rng(seed)
    n = len(y)
    w = np.zeros(dim)
    g2 = np.zeros(dim)
    total = float(w_ex.sum())
    bias = math.log((1 + float(w_ex @ y)) / (1 + total - float(w_ex @ y)))
    bias_g2 = 0.0
    for _ in range(cfg.epochs):
        order = rng.permutation(n)
        for start in range(0, n, cfg.batch_size):
            batch = order[start : start + cfg.batch_size]
            idx, val, pos = rows.gather(batch)
            z = bias + np.bincount(pos, weights=w[idx] * val, minlength=len(batch))
            p = 1.0 / (1.0 + np.exp(-z))
            r = (p - y[batch]) * w_ex[batch] / len(batch)
            uniq, inv = np.unique(idx, return_inverse=True)
            grad = np.bincount(inv, weights=r[pos] * val, minlength=len(uniq)) + cfg.l2 * w[uniq]
            g2[uniq] += grad * grad
            w[uniq] -= cfg.learning_rate * grad / (np.sqrt(g2[uniq]) + 1e-8)
            bias_grad = float(r.sum())
            bias_g2 += bias_grad * bias_grad
            bias -= cfg.learning_rate * bias_grad / (math.sqrt(bias_g2) + 1e-8)
    return w, bias


def _fit_naive_bayes(
    rows: _Rows, y: FloatArray, w_ex: FloatArray, dim: int, cfg: ScorerConfig
) -> tuple[FloatArray, float, float]:
    """Log-odds weights, intercept, and the weight of every feature never seen in training."""
    row_ids = rows.row_ids()
    mass = w_ex[row_ids] * rows.values
    labels = y[row_ids]
    mass_pos = np.bincount(rows.indices, weights=mass * labels, minlength=dim)
    mass_neg = np.bincount(rows.indices, weights=mass * (1 - labels), minlength=dim)
    a = cfg.nb_alpha
    norm_pos = math.log(a * dim + float(mass_pos.sum()))
    norm_neg = math.log(a * dim + float(mass_neg.sum()))
    weights = (np.log(a + mass_pos) - norm_pos) - (np.log(a + mass_neg) - norm_neg)
    pos = float(w_ex @ y)
    bias = math.log((1 + pos) / (1 + float(w_ex.sum()) - pos))
    return weights, bias, norm_neg - norm_pos


def fit(
    examples: Sequence[Example],
    version: str,
    seed: int = 0,
    config: ScorerConfig | None = None,
) -> Scorer:
    """A scorer fitted from scratch on ``examples``; deterministic for ``(examples, seed)``."""
    cfg = config or ScorerConfig()
    featurizer = Featurizer(cfg.features)
    local = [e for e in examples if e.arm == "local" and e.weight > 0]
    rows = _Rows.build(featurizer, [e.text for e in local])
    y = np.array([float(e.accepted) for e in local])
    w_ex = np.array([float(e.weight) for e in local])
    dim = featurizer.dim
    if cfg.model == "logreg":
        weights, bias = _fit_logreg(rows, y, w_ex, dim, cfg, seed)
        default = 0.0
    else:
        weights, bias, default = _fit_naive_bayes(rows, y, w_ex, dim, cfg)
    dense = weights.astype(np.float32)
    default32 = np.float32(default)
    dense[np.abs(dense - default32) < cfg.prune_below] = default32
    front = [e for e in examples if e.arm == "frontier" and e.weight > 0]
    accepted = sum(e.weight for e in front if e.accepted)
    rejected = sum(e.weight for e in front if not e.accepted)
    frontier = FrontierRate(accepted, rejected, cfg.frontier_prior, cfg.frontier_prior_weight)
    return Scorer(version, cfg.model, cfg.features, dense, bias, default, frontier)


def uncertainty(p: float) -> float:
    """``p (1 - p)``: largest (0.25) where the scorer is least sure; aim shadow samples there."""
    return p * (1.0 - p)


def shadow_share(share: float, p_local: float | None) -> float:
    """The chance a frontier-served request is shadowed: the full ``share`` where the scorer is
    least sure (``p_local`` = 0.5) or did not decide, a quarter of it where it is sure."""
    return share if p_local is None else share * (0.25 + 3 * uncertainty(p_local))


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve (ties count half); 0.5 when one class is missing."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.5
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    mid_rank = np.cumsum(counts) - (counts - 1) / 2.0  # average 1-based rank of each value
    rank_sum = float(mid_rank[inverse][pos].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def log_loss(probs: Sequence[float], labels: Sequence[bool]) -> float:
    """Mean negative log-likelihood of ``labels`` (probabilities clipped to [1e-6, 1 - 1e-6])."""
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-6, 1 - 1e-6)
    y = np.asarray(labels, dtype=np.float64)
    if len(y) == 0:
        return 0.0
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
