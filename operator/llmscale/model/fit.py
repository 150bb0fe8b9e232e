"""Fit the roofline's efficiencies and a per-step overhead to measured step times.

The model (:meth:`~llmscale.model.ReplicaModel.step_time`) says one engine step takes

    ``t = o + s·d + a·A + max(u·m, v·f)``  (``+ q`` when the figure is a request's TTFT),

with ``m`` the step's bytes (weights + KV reads) over the accelerator's *peak* bandwidth and ``f``
its FLOPs (``2 × active parameters × tokens``) over the *peak* FLOP/s, both in seconds; ``u = 1 /
bandwidth efficiency`` and ``v = 1 / compute efficiency`` (each ≥ 1: no engine beats the
datasheet), ``o ≥ 0`` the per-step overhead and ``s ≥ 0`` what each of the ``d`` decoding
sequences adds (sampling, detokenising, streaming); ``A`` is the step's attention FLOPs over the
peak FLOP/s and ``a = 1 / attention efficiency`` (kept only when attention explains a visible share
of some step: small models, long prompts). ``q ≥ 0`` is what a request pays once on its way to
the first token beyond its prefill steps (HTTP, tokenising, queueing in the API server, streaming
the token back): a lone prompt's TTFT carries it, a decode step does not, so the two kinds of
measurement tell it from ``o``. Given measured steps (a decode batch's median ITL, a lone prompt's
TTFT), this finds ``(o, s, a, q, u, v)`` by weighted least squares on the *relative* error
(an error of 1 ms matters at a 2 ms step, not at a 2 s prefill).

A figure that averages two kinds of step (a live window's mean ITL: decode steps, and a share
``φ`` of steps that also computed a prompt chunk of ``c`` tokens) is their mean,
``(1 − φ)·max(u·m, v·f) + φ·max(u·m, v·(f + f_c))`` with ``f_c`` the chunk's FLOPs over the peak.

For a fixed ratio ``r = v/u`` the model is ``o + s·d + a·A + q + u·max(m, r·f)``: linear in ``(o, s, a, q, u)``,
solved by least squares with the bounds kept; the ratio is searched on a log grid, then refined
around the best point. Where no
measured step is compute-bound the data cannot say how fast compute is (only that it is at least
fast enough for every step to stay memory-bound): the fit then keeps the prior compute efficiency
if the data allows it, else the smallest efficiency the data allows, and says so
(``compute_identified = False``); the same holds for bandwidth when every step is compute-bound.

Pure module: numbers in, numbers out; numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmscale.model.roofline import ReplicaModel

__all__ = [
    "EfficiencyFit",
    "LiveWindow",
    "StepObservation",
    "figure_time",
    "fit_efficiencies",
    "fit_live",
    "live_observations",
    "lone_prompt_steps",
]


@dataclass(frozen=True, slots=True)
class StepObservation:
    """``steps`` engine steps of one shape and the seconds *one* of them took (a mean or median).

    Attributes:
        decode_seqs: sequences producing a token in the step.
        kv_tokens_read: KV-cache tokens the step reads (sum of the decodes' contexts).
        prefill_tokens: prompt tokens computed in the step.
        seconds: measured duration of one such step, seconds (> 0).
        weight: relative weight in the fit (e.g. how many samples the figure stands on), > 0.
        prefill_pairs: query-key pairs of the prompt tokens (``Σ c·e + c²/2`` over the chunks,
            :meth:`~llmscale.model.ReplicaModel.step_time`); ``None``: one chunk alone.
        request_share: the share of a request's per-request cost ``q`` the figure carries: 1 for
            a lone prompt's TTFT, ``1/n`` for one of its ``n`` chunk steps' share of it, 0 for a
            step the engine timed (a decode step, an engine-side prefill time).
        chunk_share: the share ``φ`` of the steps this figure averages that also computed a prompt
            chunk (a live window's mean ITL carries its chunk steps), in [0, 1]; 0: one shape.
        chunk_tokens: the prompt tokens of such a chunk, tokens.
        chunk_pairs: its query-key pairs (:func:`lone_prompt_steps`).
    """

    decode_seqs: float
    kv_tokens_read: float
    prefill_tokens: float
    seconds: float
    weight: float = 1.0
    prefill_pairs: float | None = None
    request_share: float = 0.0
    chunk_share: float = 0.0
    chunk_tokens: float = 0.0
    chunk_pairs: float = 0.0


@dataclass(frozen=True, slots=True)
class EfficiencyFit:
    """The fitted efficiencies and how well they explain the observations.

    Attributes:
        bandwidth_efficiency: achieved / peak memory bandwidth, (0, 1].
        compute_efficiency: achieved / peak FLOP/s, (0, 1].
        step_overhead_s: fixed seconds per step, ≥ 0.
        seq_overhead_s: seconds each decoding sequence adds to a step, ≥ 0.
        attention_efficiency: achieved share of peak FLOP/s in attention, or ``None`` when attention
            explains no visible share of any step (then it is left out of the model).
        request_overhead_s: seconds a request pays once before its first token beyond its prefill
            steps, ≥ 0 (0 without TTFT observations). Not a model field: whoever predicts a TTFT
            adds it (:mod:`llmscale.calibrate.note`).
        rms_relative_error: root mean square of (model − measured) / measured over the observations.
        max_relative_error: the largest |model − measured| / measured.
        bandwidth_identified: some observation is memory-bound under the fit (else the figure is
            a bound, kept at the prior where the data allows).
        compute_identified: some observation is compute-bound under the fit (likewise).
        observations: how many observations were fitted.
    """

    bandwidth_efficiency: float
    compute_efficiency: float
    step_overhead_s: float
    seq_overhead_s: float
    attention_efficiency: float | None
    request_overhead_s: float
    rms_relative_error: float
    max_relative_error: float
    bandwidth_identified: bool
    compute_identified: bool
    observations: int

    def apply(self, model: ReplicaModel) -> ReplicaModel:
        """``model`` with the fitted efficiencies and overhead."""
        return model.with_changes(
            bandwidth_efficiency=self.bandwidth_efficiency,
            compute_efficiency=self.compute_efficiency,
            step_overhead_s=self.step_overhead_s,
            seq_overhead_s=self.seq_overhead_s,
            attention_efficiency=self.attention_efficiency,
        )


def _unit_times(
    model: ReplicaModel, obs: Sequence[StepObservation]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """``(m, f, f_c)``: each step's memory and compute time at efficiency 1, and its chunk's compute
    time (:attr:`StepObservation.chunk_tokens`), seconds."""
    d = np.array([o.decode_seqs for o in obs], dtype=np.float64)
    kv = np.array([o.kv_tokens_read for o in obs], dtype=np.float64)
    p = np.array([o.prefill_tokens for o in obs], dtype=np.float64)
    c = np.array([o.chunk_tokens if o.chunk_share > 0 else 0.0 for o in obs], dtype=np.float64)
    peak_bw = model.gpu.hbm_bandwidth_bytes_s * model.gpus
    peak_flops = model.peak_flops * model.gpus
    m = (model.weight_bytes + kv * model.kv_bytes_per_token) / peak_bw
    f = (d + p) * model.flops_per_token / peak_flops
    return m, f, c * model.flops_per_token / peak_flops


def _roof(m: NDArray[np.float64], f: NDArray[np.float64], fc: NDArray[np.float64], phi: NDArray[np.float64],
          r: float) -> NDArray[np.float64]:
    """Each figure's roofline term at ``u = 1``, ``v = r``: ``max(m, r·f)``, or the mean over the
    share ``φ`` of its steps that also computed a chunk (module docstring); exactly ``max(m, r·f)``
    where ``φ = 0``."""
    base = np.maximum(m, r * f)
    if not phi.any():
        return base
    return np.where(phi > 0, (1.0 - phi) * base + phi * np.maximum(m, r * (f + fc)), base)


class _Design:
    """The least squares of :func:`_solve` for one search: the columns ``[1, d, att, req, x]`` and
    their ``sqrt(w)``-weighted copy, of which only ``x`` changes from one grid point to the next
    (written in place: the same arrays, so the same figures, as stacking them anew)."""

    __slots__ = ("cols", "colsw", "sw", "w", "y", "ysw")

    def __init__(self, d: NDArray[np.float64], att: NDArray[np.float64], req: NDArray[np.float64],
                 y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        self.sw = np.sqrt(w)
        self.cols = np.stack([np.ones_like(y), d, att, req, np.zeros_like(y)], axis=1)
        self.colsw = self.cols * self.sw[:, None]
        self.ysw = y * self.sw
        self.y, self.w = y, w

    def at(self, x: NDArray[np.float64]) -> None:
        """Set the last column to ``x``."""
        self.cols[:, 4] = x
        self.colsw[:, 4] = x * self.sw


_BOUNDS = (0.0, 0.0, 0.0, 0.0, 1.0)


def _solve(design: _Design, x: NDArray[np.float64]) -> tuple[float, float, float, float, float, float]:
    """Weighted least squares of ``y ≈ o + s·d + a·att + q·req + u·x`` with ``o, s, a, q ≥ 0`` and
    ``u ≥ 1`` (a small active set: a coefficient that leaves its bound is fixed there and the rest
    re-solved); returns ``(o, s, a, q, u, loss)``."""
    design.at(x)
    cols, y, sw = design.cols, design.y, design.sw
    bounds = _BOUNDS
    k = len(bounds)
    fixed: dict[int, float] = {}
    coef = np.zeros(k)
    for _ in range(k + 1):
        if not fixed:
            sol = np.linalg.lstsq(design.colsw, design.ysw, rcond=None)[0]
            coef = sol.copy()
        else:
            free = [i for i in range(k) if i not in fixed]
            target = y - sum((cols[:, i] * v for i, v in fixed.items()), np.zeros_like(y))
            sol = np.linalg.lstsq(design.colsw[:, free], target * sw, rcond=None)[0] if free else np.zeros(0)
            coef = np.zeros(k)
            for i, v in fixed.items():
                coef[i] = v
            for i, v in zip(free, sol, strict=True):
                coef[i] = v
        low = [i for i in range(k) if i not in fixed and coef[i] < bounds[i]]
        if not low:
            break
        for i in low:
            fixed[i] = bounds[i]
    resid = cols @ coef - y
    o, s, a, q, u = (float(c) for c in coef)
    return o, s, a, q, u, float((design.w * resid * resid).sum())


def _attention_units(model: ReplicaModel, obs: Sequence[StepObservation]) -> NDArray[np.float64]:
    """Each step's attention time at the peak FLOP/s, seconds (the roofline's attention term)."""
    kv = np.array([o.kv_tokens_read for o in obs], dtype=np.float64)
    pairs = np.array(
        [o.prefill_tokens * o.prefill_tokens / 2.0 if o.prefill_pairs is None else o.prefill_pairs for o in obs],
        dtype=np.float64,
    )
    chunk = np.array([o.chunk_share * o.chunk_pairs for o in obs], dtype=np.float64)
    return (kv + pairs + chunk) * model.attention_flops_per_token_pair / (model.peak_flops * model.gpus)


def fit_efficiencies(
    model: ReplicaModel, observations: Sequence[StepObservation], *, attention: bool = True
) -> EfficiencyFit:
    """Fit ``model``'s bandwidth and compute efficiencies and a per-step overhead to
    ``observations`` (module docstring: the model and the method). ``model``'s own efficiencies are
    the prior kept for a side the data does not reach. ``attention``: also fit an attention term
    (kept only when it explains a visible share of some step).

    Raises:
        ValueError: fewer than two observations, a non-positive or non-finite duration or weight, or
            a request share outside [0, 1].
    """
    obs = list(observations)
    if len(obs) < 2:
        raise ValueError(f"need at least two observations to fit, got {len(obs)}")
    for ob in obs:
        if not (math.isfinite(ob.seconds) and ob.seconds > 0 and math.isfinite(ob.weight) and ob.weight > 0):
            raise ValueError(f"observation durations and weights must be positive and finite: {ob}")
        if not 0.0 <= ob.request_share <= 1.0:
            raise ValueError(f"an observation's request_share must be in [0, 1]: {ob}")
        if not (0.0 <= ob.chunk_share <= 1.0 and math.isfinite(ob.chunk_tokens) and ob.chunk_tokens >= 0
                and math.isfinite(ob.chunk_pairs) and ob.chunk_pairs >= 0):
            raise ValueError(f"an observation's chunk_share must be in [0, 1], its chunk finite and >= 0: {ob}")
    m, f, fc = _unit_times(model, obs)
    phi = np.array([ob.chunk_share for ob in obs], dtype=np.float64)
    fmix = np.where(phi > 0, f + fc, f)  # the compute of a figure's heaviest step
    y = np.array([ob.seconds for ob in obs], dtype=np.float64)
    # Relative error: weight each squared residual by 1/y².
    w = np.array([ob.weight for ob in obs], dtype=np.float64) / (y * y)

    positive = fmix > 0
    if positive.any():
        ratios = np.concatenate([m[f > 0] / f[f > 0], m[positive] / fmix[positive]])
        lo, hi = math.log10(float(ratios.min())) - 3.0, math.log10(float(ratios.max())) + 3.0
    else:
        lo, hi = 0.0, 1.0
    d = np.array([ob.decode_seqs for ob in obs], dtype=np.float64)
    req = np.array([ob.request_share for ob in obs], dtype=np.float64)

    def search(att: NDArray[np.float64]) -> tuple[float, float, float, float, float, float, float]:
        design = _Design(d, att, req, y, w)
        lo_, hi_ = lo, hi
        grid = np.logspace(lo_, hi_, 121)
        best = (math.inf, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)  # loss, r, o, s, a, q, u
        for _ in range(5):  # refine around the best ratio, four times
            for r in grid:
                o_r, s_r, a_r, q_r, u_r, loss = _solve(design, _roof(m, f, fc, phi, float(r)))
                if r * u_r >= 1.0 - 1e-12 and loss < best[0]:  # v = r·u ≥ 1
                    best = (loss, float(r), o_r, s_r, a_r, q_r, u_r)
            step = (hi_ - lo_) / (len(grid) - 1)
            lo_, hi_ = math.log10(best[1]) - 2 * step, math.log10(best[1]) + 2 * step
            grid = np.logspace(lo_, hi_, 17)
        return best

    no_att = np.zeros_like(y)
    loss, r, o, seq, a, q, u = search(no_att)
    att = _attention_units(model, obs) if attention else no_att
    if attention:
        # Attention is one more free coefficient: keep it only when it explains much more (a fifth
        # of the squared error) and a visible share (1 %) of some step; its efficiency is 1/a.
        with_att = search(att)
        if with_att[0] < 0.8 * loss and bool((with_att[4] * att > 0.01 * y).any()):
            loss, r, o, seq, a, q, u = with_att
    v = r * u
    attention_efficiency = min(1.0 / a, 1.0) if a > 0 else None
    if attention_efficiency is None:
        a = 0.0

    # A figure's decode steps (a share 1 − φ) are memory-bound where u·m ≥ v·f, its chunk steps (a
    # share φ) where u·m ≥ v·(f + f_c); either says the bandwidth. Compute-bound the other way.
    memory_bound = ((u * m >= v * f) & (phi < 1.0)) | ((phi > 0) & (u * m >= v * fmix))
    bandwidth_identified = bool(memory_bound.any())
    compute_identified = bool(((u * m < v * f) | ((phi > 0) & (u * m < v * fmix))).any())
    prior_u, prior_v = 1.0 / model.bandwidth_efficiency, 1.0 / model.compute_efficiency
    if not compute_identified and positive.any():
        # Any v up to the one that would turn the first step compute-bound explains the data.
        v_max = float((u * m[positive] / fmix[positive]).min())
        v = max(min(prior_v, v_max), 1.0)
    if not bandwidth_identified:
        # Any u up to the one that would turn the first step memory-bound (a figure of chunk steps
        # alone: its chunk step).
        u_max = float((v * np.where(phi >= 1.0, fmix, f) / m).min())
        u = max(min(prior_u, u_max), 1.0)
    roof = np.maximum(u * m, v * f)
    roof = np.where(phi > 0, (1.0 - phi) * roof + phi * np.maximum(u * m, v * fmix), roof)
    pred = o + seq * d + a * att + q * req + roof
    rel = (pred - y) / y
    return EfficiencyFit(
        bandwidth_efficiency=min(1.0 / u, 1.0),
        compute_efficiency=min(1.0 / v, 1.0),
        step_overhead_s=max(o, 0.0),
        seq_overhead_s=max(seq, 0.0),
        attention_efficiency=attention_efficiency,
        request_overhead_s=max(q, 0.0),
        rms_relative_error=float(np.sqrt(np.mean(rel * rel))),
        max_relative_error=float(np.abs(rel).max()),
        bandwidth_identified=bandwidth_identified,
        compute_identified=compute_identified,
        observations=len(obs),
    )


def figure_time(model: ReplicaModel, ob: StepObservation) -> float:
    """What ``model`` says figure ``ob`` measures, seconds: its step
    (:meth:`~llmscale.model.ReplicaModel.step_time`), or the mean of its decode steps and the
    share ``ob.chunk_share`` of them that also computed a chunk (module docstring). A request's
    share of ``q`` is not included."""
    t = model.step_time(ob.decode_seqs, ob.kv_tokens_read, ob.prefill_tokens, ob.prefill_pairs)
    if ob.chunk_share <= 0:
        return t
    pairs = ob.prefill_tokens * ob.prefill_tokens / 2.0 if ob.prefill_pairs is None else ob.prefill_pairs
    chunked = model.step_time(ob.decode_seqs, ob.kv_tokens_read, ob.prefill_tokens + ob.chunk_tokens,
                              pairs + ob.chunk_pairs)
    return (1.0 - ob.chunk_share) * t + ob.chunk_share * chunked


def lone_prompt_steps(prompt_tokens: float, budget: int) -> tuple[int, float, float]:
    """How a lone prompt is computed: ``(n, c, pairs)``, ``n`` chunk steps of ``c = P/n`` tokens
    (the step budget bounds a chunk), chunk ``k`` after ``k·c`` earlier tokens, so ``pairs = n·c²/2``
    query-key pairs a step on average (``P²/2`` in all, however it is chunked)."""
    n = max(1, math.ceil(prompt_tokens / max(budget, 1)))
    c = prompt_tokens / n
    return n, c, n * c * c / 2.0


@dataclass(frozen=True, slots=True)
class LiveWindow:
    """What a deployment's engines' own histograms say over one window (e.g. five minutes).

    Read from Prometheus as ``increase(_sum) / increase(_count)`` of each histogram and the mean of
    the gauges (vLLM names): ``vllm:inter_token_latency_seconds``, ``vllm:num_requests_running``,
    ``vllm:request_prefill_time_seconds`` and ``vllm:request_prompt_tokens``.

    Attributes:
        running: mean running requests per engine.
        context_tokens: mean context of a running request, tokens (mean prompt + half the mean output).
        itl_mean_s: mean inter-token latency, seconds.
        prompt_tokens: mean prompt per request, tokens.
        prefill_mean_s: mean prefill time per request, seconds.
        tokens: output tokens the window's ITL mean stands on (its weight).
        budget_tokens: the engine's step token budget (``--max-num-batched-tokens``).
        requests: prompts the window's prompt-token histogram counts (0: unknown; the mean ITL is
            then read as decode steps alone).
    """

    running: float
    context_tokens: float
    itl_mean_s: float
    prompt_tokens: float
    prefill_mean_s: float
    tokens: float = 1.0
    budget_tokens: int = 8192
    requests: float = 0.0


def fit_live(model: ReplicaModel, windows: Sequence[LiveWindow]) -> EfficiencyFit | None:
    """Fit the efficiencies to a deployment's live histograms (the production side of
    ``llmscale calibrate``): each window's mean ITL is the mean of its steps, decode steps of its
    mean running batch of which a share also computed a chunk of its mean prompt, and its mean
    prefill time the chunk steps of its mean prompt beside that batch
    (:func:`live_observations`). Windows with no traffic or non-finite figures are skipped;
    ``None`` when fewer than two observations remain.
    """
    obs = live_observations(windows)
    if len(obs) < 2:
        return None
    return fit_efficiencies(model, obs)


def live_observations(windows: Sequence[LiveWindow]) -> list[StepObservation]:
    """The steps ``windows`` stand for (:func:`fit_live`); idle or non-finite figures give none.

    A window's mean ITL is the mean step its running requests saw: ``tokens / running`` steps
    across the pool (each gives every running request a token), of which the ``requests`` prompts'
    ``n`` chunks each took one (:func:`lone_prompt_steps`; all of them when the chunks outnumber
    the steps, each chunk the prompt tokens over the steps). Its mean prefill time is ``n`` such
    chunk steps, each beside the running batch's decodes (vLLM's prefill time runs from scheduling
    to the first token, and a chunk shares its step with every decode).
    """
    obs: list[StepObservation] = []
    for w in windows:
        weight = max(w.tokens, 1.0)
        running = w.running >= 1.0 and math.isfinite(w.context_tokens)
        prompt = w.prompt_tokens >= 1 and math.isfinite(w.prompt_tokens)
        n, c, pairs = lone_prompt_steps(w.prompt_tokens, w.budget_tokens) if prompt else (0, 0.0, 0.0)
        if running and math.isfinite(w.itl_mean_s) and w.itl_mean_s > 0:
            share, chunk, chunk_pairs = 0.0, 0.0, 0.0
            steps = w.tokens / w.running
            if prompt and w.requests is not None and math.isfinite(w.requests) and w.requests > 0 and steps > 0:
                chunks = w.requests * n
                share = min(chunks / steps, 1.0)
                # More chunks than steps: every step took a share of the prompts, at most a budget
                # (the rest ran in steps that timed no gap); a prompt's pairs are P²/2 however cut.
                chunk = c if chunks <= steps else min(w.requests * w.prompt_tokens / steps, float(max(w.budget_tokens, 1)))
                chunk_pairs = pairs * chunk / c
            obs.append(StepObservation(w.running, w.running * w.context_tokens, 0.0, w.itl_mean_s, weight,
                                       chunk_share=share, chunk_tokens=chunk, chunk_pairs=chunk_pairs))
        if prompt and math.isfinite(w.prefill_mean_s) and w.prefill_mean_s > 0:
            d = w.running if running else 0.0
            obs.append(StepObservation(d, d * w.context_tokens if running else 0.0, c, w.prefill_mean_s / n, weight,
                                       prefill_pairs=pairs))
    return obs
