"""A success classifier as the reward of online RL on a robot without a reward of its own (HIL-SERL).

HIL-SERL (Luo et al. 2024, "Precise and Dexterous Robotic Manipulation via Human-in-the-Loop Reinforcement
Learning", section III-B and its ``reward_classifier`` code) trains a binary classifier on camera frames the operator
labelled during recording: a frozen pretrained ResNet-10 encodes each frame, a small learned head gives
``p(success | frames)`` with binary cross-entropy, and on the robot a frame scoring above a threshold yields reward 1
and ends the episode.

Here the classifier (:class:`SuccessClassifier`) reads its inputs through the same
:class:`~robotrl.vision.frontend.ObservationFrontend` as every policy: with cameras (``image_shapes``) the frontend's
:class:`~robotrl.vision.encoders.PixelEncoder` (by default ``encoder="resnet10"``, frozen, its trunk
weights from a LOCAL file, :func:`robotrl.vision.encoders.load_encoder_weights`; nothing is downloaded) plus,
optionally, the normalised state; without cameras the normalised state alone (the state-only classifier is the same
class, a spec option). A learned MLP head maps the frontend's ``(B, F)`` features to one logit.

Labels (:class:`LabelledFrames`): the per-step ``infos["success"]`` of a recording, which the robot bridge records
(the robot's or twin's own success, or the operator's mark: ``y``/``n`` on the keyboard teleop,
:class:`~robotrl.real_robot.teleop.TeleopCommand.label`); each transition's label scores the observation the step led
to. As HIL-SERL labels demonstrations, ``success_last_k = k`` also marks the last ``k`` frames of every episode that
succeeded as positives.

Training (:func:`fit_success_classifier`) holds out whole episodes: half of them choose the threshold (the ``p`` with
the best F1 there, unless a fixed one is given), the other half report precision, recall, F1 and ROC AUC at it
(:func:`binary_metrics`). ``robotrl train agent=reward-classifier dataset.id=<recording> dataset.generate=false``
trains one (``configs/agent/reward-classifier.yaml``; ``obs=pixels`` for cameras), writes
``<run_dir>/classifier.pt`` (plain tensors, loaded with ``weights_only=True``), ``report.json``, ``report.md`` and
TensorBoard scalars under ``<run_dir>/tb``. On the robot (:class:`ClassifierReward`, ``robotrl actor
reward=classifier``) it is the :class:`RewardFunction` of the actor; ``robotrl learner reward=classifier`` rewards its
demonstrations the same way (:func:`relabel_rewards`).

Symbols: ``M`` labelled frames, ``B`` batch, ``Do`` state size, ``H, W, C`` frame size, ``F`` feature size.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.errors import CheckpointError, ConfigError, DatasetFormatError
from robotrl.vision.frontend import ObservationFrontend

KIND = "robotrl.success_classifier"
#: format of the saved classifier: 2 = an ObservationFrontend spec (cameras or state); 1 (state MLP) is not read
FORMAT = 2

__all__ = ["KIND", "RewardVerdict", "RewardFunction", "SuccessClassifier", "LabelledFrames", "binary_metrics",
           "fit_success_classifier", "train_success_classifier", "save_classifier", "load_classifier",
           "ClassifierReward", "relabel_rewards", "run_train", "RewardClassifierAgent"]


_log = logging.getLogger(__name__)
#: Below this AUC on its own training frames a fitted classifier has not learnt its labels (fit_success_classifier warns).
UNFIT_AUC = 0.9


# ----------------------------------------------------------------------------- the reward interface
class RewardVerdict(NamedTuple):
    """What a :class:`RewardFunction` says about the observation a step led to.

    Attributes:
        reward: the step's reward (``1.0`` success, ``0.0`` otherwise for a classifier).
        success: the observation counts as a success.
        p: the classifier's ``p(success)`` (``nan`` where there is none).
    """

    reward: float
    success: bool
    p: float


@runtime_checkable
class RewardFunction(Protocol):
    """A reward computed on the actor from the observation a step led to, replacing the robot's own.

    Attributes:
        end_on_success: a success ends the episode (``terminated``).
    """

    end_on_success: bool

    def __call__(self, state: np.ndarray, images: Mapping[str, np.ndarray] | None = None) -> RewardVerdict:
        """The verdict on the next observation: state ``(Do,)`` and the robot's frames ``{camera: uint8 (H, W, C)}``."""
        ...

    def reset(self) -> None:
        """An episode starts (clear any per-episode history, e.g. a frame stack)."""
        ...


# ----------------------------------------------------------------------------- the classifier
class SuccessClassifier(ObservationFrontend):
    """``(state (B, Do), {"pixels/<camera>": uint8 (B, H, W, k·C)})`` -> success logit ``(B,)``.

    An :class:`~robotrl.vision.frontend.ObservationFrontend` (the policies' one) plus a learned MLP head on its
    :attr:`out_dim` features. With cameras the default is HIL-SERL's: a frozen ResNet-10 from a local weights file
    (``encoder_weights``; the saved classifier holds the weights, its spec never points at the file), spatial-softmax
    pooling and a learned projection. ``obs_dim=0`` with cameras: the frames alone. Without cameras: the normalised
    state alone (``obs_dim > 0``).

    Args:
        obs_dim: ``Do`` read beside the cameras (0: cameras only).
        action_dim: ``Da`` of the robot (recorded only; the classifier scores observations).
        hidden: widths of the head.
        freeze_encoder: keep the trunk fixed; ``None`` (default): frozen when it is pretrained (``encoder_weights``
            given, HIL-SERL's), trained with the head when it is not (``encoder="drq"`` from scratch).
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, augment_pad, obs_clip, state_layout,
            frame_stack: the :class:`~robotrl.vision.frontend.ObservationFrontend`'s.

    Raises:
        ConfigError: neither cameras nor state; or from the encoder (unknown encoder, unusable weights file).
    """

    #: the frontend's architecture keys and the head's widths (:attr:`ObservationFrontend.ARCH_KEYS`)
    ARCH_KEYS = (*ObservationFrontend.ARCH_KEYS, "hidden")

    def __init__(self, obs_dim: int, action_dim: int = 1, *, hidden: Sequence[int] = (256, 256),
                 image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "resnet10",
                 pooling: str = "spatial_softmax", feature_dim: int = 64, channels: int = 64,
                 encoder_weights: str | None = None, freeze_encoder: bool | None = None, augment_pad: int = 0,
                 obs_clip: float | None = 10.0, state_layout: str | None = None, frame_stack: int = 1):
        if not image_shapes and int(obs_dim) <= 0:
            raise ConfigError("a success classifier needs cameras or a state (obs_dim > 0); record frames or states")
        if freeze_encoder is None:  # frozen exactly when pretrained (until 2026-12-02 drq was frozen at random weights)
            freeze_encoder = encoder_weights is not None
        hidden = [int(h) for h in hidden]
        super().__init__(obs_dim, action_dim, image_shapes=image_shapes, encoder=encoder, pooling=pooling,
                         feature_dim=feature_dim, channels=channels, encoder_weights=encoder_weights,
                         freeze_encoder=freeze_encoder, augment_pad=augment_pad, obs_clip=obs_clip,
                         state_layout=state_layout, frame_stack=frame_stack, hidden=hidden)
        layers: list[nn.Module] = []
        d = self.out_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.head = nn.Sequential(*layers)

    def forward(self, state: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Logits ``(B,)`` of raw state ``(B, Do)`` and frames ``{key: uint8 (B, H, W, k·C)}``."""
        return self.head(self.features(state, images)).squeeze(-1)

    def logits_from_stems(self, stems: Mapping[str, torch.Tensor], state: torch.Tensor) -> torch.Tensor:
        """Logits ``(B,)`` from the frozen trunk's cached outputs (:meth:`PixelEncoder.stem`) and the raw state."""
        assert self.encoder is not None
        return self.head(self.encoder.forward_from_stems(stems, self.normalized_state(state))).squeeze(-1)

    def camera_shapes(self) -> dict[str, list[int]]:
        """The cameras it reads, ``{"pixels/<camera>": [H, W, C]}`` (empty: a state classifier)."""
        return {k: [int(d) for d in v] for k, v in (self._spec.get("image_shapes") or {}).items()}

    @torch.no_grad()
    def prob(self, state: np.ndarray, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray | float:
        """``p(success)``: ``(B,)`` for a batch, a float for one ``(Do,)`` state (frames ``uint8 (H, W, k·C)``),
        without touching the frame history."""
        x = torch.as_tensor(np.asarray(state, np.float32))
        single = x.ndim == 1
        imgs = None if images is None else {k: torch.as_tensor(np.asarray(v, np.uint8)) for k, v in images.items()}
        if single:
            x = x[None]
            imgs = None if imgs is None else {k: v[None] for k, v in imgs.items()}
        p = torch.sigmoid(self(x, imgs)).numpy()
        return float(p[0]) if single else p

    def check_inputs(self, cameras: Mapping[str, Sequence[int]], obs_dim: int, where: str) -> None:
        """Refuse a robot (or dataset) that lacks a camera this classifier reads, sends it at another frame size, or
        has another state size (cameras the classifier does not read are ignored).

        Args:
            cameras: ``{"pixels/<camera>": [H, W, C]}`` the robot sends.
            obs_dim: the robot's ``Do``.
            where: what sends them (for the message).

        Raises:
            ConfigError: one line naming both and the way out.
        """
        mine = self.camera_shapes()
        theirs = {str(k): [int(d) for d in v] for k, v in cameras.items()}
        if any(theirs.get(k) != v for k, v in mine.items()):
            raise ConfigError(f"the success classifier reads cameras {mine} ({{key: [H, W, C]}}) and {where} sends "
                              f"{theirs}: give the robot the classifier's cameras and frame size (for the twin "
                              "robot.cameras=[...] robot.image_size=N), or train a classifier on frames recorded with "
                              "this robot's cameras (robotrl train agent=reward-classifier obs=pixels dataset.id=...)")
        if self.obs_dim and self.obs_dim != int(obs_dim):
            raise ConfigError(f"the success classifier reads a state of Do={self.obs_dim} and {where} has "
                              f"Do={int(obs_dim)}: train it on a recording of this robot (robotrl train "
                              "agent=reward-classifier dataset.id=...), or with agent.model.state=false on cameras only")


# ----------------------------------------------------------------------------- labelled frames
@dataclass
class LabelledFrames:
    """Observations with success labels, as the classifier trains on them.

    Attributes:
        state: float32 ``(M, Do)`` (``Do`` may be 0).
        images: ``{"pixels/<camera>": uint8 (M, H, W, C)}`` (empty: states only).
        labels: bool ``(M,)``.
        episode: int64 ``(M,)`` the episode of each frame (held-out sets are whole episodes).
    """

    state: np.ndarray
    images: dict[str, np.ndarray]
    labels: np.ndarray
    episode: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, idx: np.ndarray) -> LabelledFrames:
        """The frames at ``idx`` (copies)."""
        return LabelledFrames(self.state[idx], {k: v[idx] for k, v in self.images.items()}, self.labels[idx],
                              self.episode[idx])

    @classmethod
    def from_dataset(cls, data, *, success_last_k: int = 0, cameras: bool = True, state: bool = True) -> LabelledFrames:
        """The next observations of an :class:`~robotrl.data.dataset.OfflineData` and their ``success`` labels.

        Args:
            data: the dataset (a recording's ``{"state", "<camera>"}`` or a camera dataset's ``pixels/<camera>``
                frames both become ``pixels/<camera>``).
            success_last_k: also label the last ``k`` observations of each episode with any success as positives
                (HIL-SERL's labelling of successful demonstrations; 0: the recorded labels only).
            cameras: keep the frames (``False``: states only).
            state: keep the state (``False``: a ``(M, 0)`` state).

        Raises:
            DatasetFormatError: no success labels, only one class, or ``cameras`` asked of a dataset without frames
                and without a state to fall back on.
        """
        from robotrl.real_robot.online_pixels import with_policy_cameras

        if data.success is None:
            raise DatasetFormatError("the dataset has no success labels (infos['success'] per step); record it with "
                                     "the robot bridge (robotrl actor / robotrl deploy), marking successes with y / n "
                                     "on the keyboard teleop, or label its steps first")
        y = np.asarray(data.success, bool).copy()
        ep = np.zeros(y.shape[0], np.int64)
        for i, (s, e) in enumerate(zip(data.episode_starts, data.episode_ends, strict=True)):
            ep[s:e] = i
            if success_last_k > 0 and y[s:e].any():
                y[max(s, e - int(success_last_k)):e] = True
        if y.all() or not y.any():
            raise DatasetFormatError(f"the dataset's {y.size} labels are all {bool(y[0])}; a classifier needs successes "
                                     "and failures (record some failed and some successful episodes)")
        data = with_policy_cameras(data)
        images: dict[str, np.ndarray] = {}
        if cameras and data.images:
            nxt = np.asarray(data.image_index) + 1  # the frame of each transition's next observation
            images = {k: np.asarray(v)[nxt] for k, v in data.images.items()}
        st = np.asarray(data.next_observations, np.float32)
        if not state:
            st = st[:, :0]
        if not images and st.shape[1] == 0:
            raise DatasetFormatError("the dataset has no camera frames and the classifier is told not to read the "
                                     "state (agent.model.state=false): record with cameras, or read the state")
        return cls(st, images, y, ep)


# ----------------------------------------------------------------------------- metrics
def binary_metrics(p: np.ndarray, y: np.ndarray, threshold: float) -> dict[str, float]:
    """Precision, recall, F1, accuracy, balanced accuracy at ``threshold`` and ROC AUC of scores ``p (M,)`` against
    labels ``y (M,)`` (AUC by the Mann-Whitney rank statistic, ties counted half; ``nan`` where a class is missing;
    precision of no predicted positive is 0).
    """
    p, y = np.asarray(p, np.float64), np.asarray(y, bool)
    pred = p >= threshold
    tp, fp, fn = int(np.sum(pred & y)), int(np.sum(pred & ~y)), int(np.sum(~pred & y))
    tn = int(y.size - tp - fp - fn)
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos and nneg:
        order = np.argsort(p, kind="mergesort")
        ranks = np.empty(p.size, np.float64)
        sp = p[order]
        i = 0
        while i < sp.size:  # average ranks of ties
            j = i
            while j + 1 < sp.size and sp[j + 1] == sp[i]:
                j += 1
            ranks[order[i:j + 1]] = (i + j) / 2 + 1
            i = j + 1
        auc = (ranks[y].sum() - npos * (npos + 1) / 2) / (npos * nneg)
        bal = 0.5 * (tp / npos + tn / nneg)
    else:
        auc = bal = float("nan")
    return {"precision": float(prec), "recall": float(rec), "f1": float(f1), "auc": float(auc),
            "accuracy": float((tp + tn) / max(y.size, 1)), "balanced_accuracy": float(bal),
            "positives": npos, "negatives": nneg, "threshold": float(threshold)}


def best_f1_threshold(p: np.ndarray, y: np.ndarray) -> float:
    """The threshold in ``(0, 1)`` with the best F1 of scores ``p`` against labels ``y`` (midpoints between sorted
    distinct scores; ties: the highest threshold, so fewer false successes); 0.5 without both classes."""
    p, y = np.asarray(p, np.float64), np.asarray(y, bool)
    if y.all() or not y.any():
        return 0.5
    u = np.unique(p)
    cands = np.concatenate([(u[:-1] + u[1:]) / 2, [u[0] / 2, (u[-1] + 1) / 2]])
    cands = np.clip(cands, 1e-6, 1 - 1e-6)
    best, thr = -1.0, 0.5
    for t in np.sort(cands)[::-1]:
        f = binary_metrics(p, y, float(t))["f1"]
        if f > best + 1e-12:
            best, thr = f, float(t)
    return thr


# ----------------------------------------------------------------------------- training
def _split(frames: LabelledFrames, holdout: float,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Train / threshold / evaluation indices and ``"episodes"`` or ``"frames"``: whole held-out episodes, stratified (episodes with a success and
    episodes without one are held out separately, each keeping at least one for training), alternately to the two
    held-out sets; by frame when there are fewer than 2 episodes to hold out."""
    def stratified(units: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        held = []
        for group in (units[positive], units[~positive]):
            n = group.size
            k = min(n - 1, max(1, int(round(holdout * n)))) if n >= 2 else 0
            held.append(rng.permutation(group)[:k])
        calib, ev = np.concatenate([h[0::2] for h in held]), np.concatenate([h[1::2] for h in held])
        return np.concatenate(held), calib, ev

    eps = np.unique(frames.episode)
    hold, calib_e, eval_e = stratified(eps, np.array([frames.labels[frames.episode == e].any() for e in eps]))
    if calib_e.size and eval_e.size:
        return (np.flatnonzero(~np.isin(frames.episode, hold)), np.flatnonzero(np.isin(frames.episode, calib_e)),
                np.flatnonzero(np.isin(frames.episode, eval_e)), "episodes")
    idx = np.arange(len(frames))  # too few episodes: by frame
    hold, calib, ev = stratified(idx, frames.labels)
    return np.setdiff1d(idx, hold), np.sort(calib), np.sort(ev), "frames"


@torch.no_grad()
def _probs(clf: SuccessClassifier, frames: LabelledFrames, idx: np.ndarray, stems: dict | None,
           chunk: int = 512) -> np.ndarray:
    out = []
    for s in range(0, idx.size, chunk):
        ix = torch.as_tensor(idx[s:s + chunk])
        st = torch.as_tensor(frames.state)[ix]
        if stems is not None:
            z = clf.logits_from_stems({k: v[ix] for k, v in stems.items()}, st)
        else:
            z = clf(st, {k: torch.as_tensor(v)[ix] for k, v in frames.images.items()} or None)
        out.append(torch.sigmoid(z).numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def fit_success_classifier(clf: SuccessClassifier, frames: LabelledFrames, *, steps: int = 2000, batch_size: int = 256,
                           lr: float = 1e-3, holdout: float = 0.2, threshold: float | None = None, seed: int = 0,
                           log: Callable[[int, dict[str, float]], None] | None = None, log_every: int = 100) -> dict:
    """Train ``clf``'s head (and its projection; a frozen trunk stays fixed) with class-balanced binary
    cross-entropy, choose the threshold and evaluate on held-out episodes.

    Whole episodes are held out, stratified: ``holdout`` of the episodes with a success and of those without (at
    least one of each group of ≥ 2, never all of it), alternately to a threshold set, where the threshold with the
    best F1 is chosen (unless ``threshold`` is given), and an evaluation set, where :func:`binary_metrics` reports
    precision / recall / F1 / AUC at it; with too few episodes for both sets, frames are held out the same way. A
    frozen trunk without random shift is run once per frame (:meth:`PixelEncoder.stem`), not per step.

    Args:
        clf: the classifier (its state normaliser is set from the training frames).
        frames: the labelled observations.
        steps, batch_size, lr: Adam optimisation.
        holdout: fraction of episodes held out.
        threshold: fixed threshold in ``(0, 1)`` (``None``: chosen on the threshold set).
        seed: seed of the split and batches.
        log: ``log(step, scalars)`` every ``log_every`` steps and at the end (TensorBoard in :func:`run_train`).

    Returns:
        ``{"threshold", "split", "train": metrics, "heldout": metrics, "threshold_set": metrics, "frames",
        "episodes"}`` with :func:`binary_metrics` dicts (``heldout``: the evaluation episodes; ``split``:
        ``"episodes"``, or ``"frames"`` when there were too few episodes).

    Raises:
        ConfigError: ``threshold`` outside ``(0, 1)``, or the training split has one class only.
    """
    from robotrl.data.normalizer import ObservationNormalizer

    if threshold is not None and not 0 < threshold < 1:
        raise ConfigError(f"classifier threshold must be in (0, 1) or null (chosen on held-out frames), got {threshold}")
    rng = np.random.default_rng(seed)
    train, calib, ev, split = _split(frames, holdout, rng)
    y_all = frames.labels
    if y_all[train].all() or not y_all[train].any():
        raise ConfigError("the training episodes hold one class only; record more successful and failed episodes "
                          "(or lower agent.model.holdout)")
    if clf.obs_dim:
        s = frames.state[train]
        clf.obs_normalizer.load_state_dict(ObservationNormalizer(s.mean(0), s.std(0) + 1e-6,
                                                                  clip=clf.spec().get("obs_clip")).state_dict())
    stems = None
    if clf.encoder is not None and clf.encoder.cacheable():
        stems = {}
        for k, v in frames.images.items():
            parts = [clf.encoder.stem(k, torch.as_tensor(v[s:s + 256])) for s in range(0, len(v), 256)]
            stems[k] = torch.cat(parts)
    x_state = torch.as_tensor(frames.state)
    y = torch.as_tensor(y_all.astype(np.float32))
    pos = float(y[train].mean())
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor((1 - pos) / max(pos, 1e-6)))
    params = [p for p in clf.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(int(seed))
    clf.train()
    for step in range(1, int(steps) + 1):
        ix = torch.as_tensor(train)[torch.randint(0, train.size, (int(batch_size),), generator=gen)]
        if stems is not None:
            z = clf.logits_from_stems({k: v[ix] for k, v in stems.items()}, x_state[ix])
        else:
            z = clf(x_state[ix], {k: torch.as_tensor(v[ix.numpy()]) for k, v in frames.images.items()} or None)
        loss = loss_fn(z, y[ix])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log is not None and (step % int(log_every) == 0 or step == int(steps)):
            log(step, {"classifier/loss": float(loss.detach())})
    clf.eval()
    p_calib, p_eval, p_train = (_probs(clf, frames, ix, stems) for ix in (calib, ev, train))
    thr = float(threshold) if threshold is not None else best_f1_threshold(p_calib, y_all[calib])
    out = {"threshold": thr, "split": split, "train": binary_metrics(p_train, y_all[train], thr),
           "threshold_set": binary_metrics(p_calib, y_all[calib], thr),
           "heldout": binary_metrics(p_eval, y_all[ev], thr),
           "frames": {"train": int(train.size), "threshold_set": int(calib.size), "heldout": int(ev.size)},
           "episodes": {"train": int(np.unique(frames.episode[train]).size),
                        "threshold_set": int(np.unique(frames.episode[calib]).size),
                        "heldout": int(np.unique(frames.episode[ev]).size)}}
    if log is not None:
        log(int(steps), {f"classifier/heldout_{k}": v for k, v in out["heldout"].items()
                         if k in ("precision", "recall", "f1", "auc", "balanced_accuracy", "threshold")})
    if out["train"]["auc"] < UNFIT_AUC:
        _log.warning("the success classifier did not fit its own training frames (train AUC %.2f < %.2f; held-out "
                     "precision %.2f): it would reward states at random; train longer (agent.model.steps), at another "
                     "rate (agent.model.lr) or seed, or check the labels, and do not use it as a reward as it is",
                     out["train"]["auc"], UNFIT_AUC, out["heldout"]["precision"])
    return out


def train_success_classifier(states: np.ndarray, labels: np.ndarray, *, steps: int = 2000, batch_size: int = 256,
                             lr: float = 1e-3, hidden: Sequence[int] = (256, 256), holdout: float = 0.1,
                             seed: int = 0, threshold: float | None = 0.5) -> tuple[SuccessClassifier, dict]:
    """A state-only :class:`SuccessClassifier` fitted to states ``(M, Do)`` and labels ``(M,)`` (held-out frames
    drawn by index: no episodes given). See :func:`fit_success_classifier` for the metrics returned."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        clf = SuccessClassifier(states.shape[1], hidden=hidden)
    frames = LabelledFrames(np.asarray(states, np.float32), {}, np.asarray(labels, bool),
                            np.zeros(len(labels), np.int64))  # one "episode": the split is by frame
    return clf, fit_success_classifier(clf, frames, steps=steps, batch_size=batch_size, lr=lr, holdout=holdout,
                                       threshold=threshold, seed=seed)


# ----------------------------------------------------------------------------- files
def save_classifier(path: str | os.PathLike, clf: SuccessClassifier, threshold: float, metrics: dict | None = None) -> Path:
    """Write ``clf`` atomically (its frontend spec, plain tensors; :func:`load_classifier` reads it)."""
    return save_checkpoint(path, {"kind": KIND, "format": FORMAT, "spec": clf.spec(), "state_dict": clf.state_dict(),
                                  "threshold": float(threshold), "metrics": json.loads(json.dumps(metrics or {}))})


def load_classifier(path: str | os.PathLike) -> tuple[SuccessClassifier, float]:
    """The classifier and its threshold from ``path`` (a file or a run directory with ``classifier.pt``).

    Raises:
        CheckpointError: not a success classifier of this format, or unreadable.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "classifier.pt"
    state = load_checkpoint(p)
    if state.get("kind") != KIND:
        raise CheckpointError(f"{p} is not a success classifier (train one with robotrl train agent=reward-classifier)")
    if state.get("format") != FORMAT:
        raise CheckpointError(f"{p} is a success classifier of an older format (a state MLP); train it again with "
                              "robotrl train agent=reward-classifier")
    clf = SuccessClassifier(**state["spec"])
    try:
        clf.load_state_dict(state["state_dict"])
    except RuntimeError as exc:
        raise CheckpointError(f"{p}: the weights do not fit the saved spec ({exc})") from exc
    return clf.eval(), float(state["threshold"])


# ----------------------------------------------------------------------------- the reward on the robot
class ClassifierReward:
    """The :class:`RewardFunction` of a success classifier on the actor.

    Args:
        classifier: a trained :class:`SuccessClassifier`.
        threshold: ``p(success)`` at and above which an observation counts as a success.
        end_on_success: a success ends the episode (``terminated``).

    Raises:
        ValueError: ``threshold`` outside ``(0, 1)``.
    """

    def __init__(self, classifier: SuccessClassifier, threshold: float = 0.5, end_on_success: bool = True):
        if not 0 < threshold < 1:
            raise ValueError(f"reward threshold must be in (0, 1), got {threshold}")
        self.classifier, self.threshold, self.end_on_success = classifier.eval(), float(threshold), bool(end_on_success)

    @classmethod
    def from_file(cls, path: str | os.PathLike, obs_dim: int | None = None,
                  cameras: Mapping[str, Sequence[int]] | None = None, where: str = "this run's observations",
                  threshold: float | None = None, end_on_success: bool = True) -> ClassifierReward:
        """The reward of the classifier at ``path`` (a ``classifier.pt`` written by ``robotrl train
        agent=reward-classifier``, or its run directory), checked against the inputs it will score: ``robotrl actor
        reward=classifier`` and ``experiment=reset-free`` (``reset_free.reward._target_``) load it so.

        Args:
            path: the classifier file or run directory.
            obs_dim: ``Do`` of the observations it will score (``None``: unchecked).
            cameras: ``{"pixels/<camera>": [H, W, C]}`` they carry (``{}``: none; :meth:`SuccessClassifier.check_inputs`).
            where: what sends them (for the message).
            threshold: ``p(success)`` threshold (``None`` or 0: the one chosen when it was trained).
            end_on_success: a success ends the episode.

        Raises:
            CheckpointError: not a success classifier of this format, or unreadable.
            ConfigError: it reads cameras the inputs lack (or at another size), or another state size (one line).
        """
        clf, thr = load_classifier(path)
        if obs_dim is not None:
            clf.check_inputs(cameras or {}, int(obs_dim), where)
        return cls(clf, float(threshold or thr), end_on_success)

    def reset(self) -> None:
        """Clear the classifier's frame history (an episode starts)."""
        self.classifier.reset()

    @torch.no_grad()
    def __call__(self, state: np.ndarray, images: Mapping[str, np.ndarray] | None = None) -> RewardVerdict:
        """The verdict on the next observation: state ``(Do,)`` and the robot's frames ``{camera: uint8 (H, W, C)}``.

        Raises:
            ConfigError: a camera classifier given no frames.
        """
        clf = self.classifier
        x = torch.as_tensor(np.asarray(state, np.float32))[None]
        imgs = None
        if clf.has_cameras:
            if not images:
                raise ConfigError("the success classifier reads camera frames and this observation carries none: give "
                                  "the robot the classifier's cameras")
            from robotrl.real_robot.online_pixels import policy_images

            imgs = clf.stack_frames({k: torch.as_tensor(np.asarray(v, np.uint8))[None]
                                     for k, v in policy_images(images).items() if k in clf.image_keys})
        p = float(torch.sigmoid(clf(x, imgs))[0])
        ok = p >= self.threshold
        return RewardVerdict(float(ok), bool(ok), p)


def relabel_rewards(data, reward: ClassifierReward, chunk: int = 256):
    """``data`` (an :class:`~robotrl.data.dataset.OfflineData`) with each transition's reward and success the
    classifier's verdict on its next observation, as the actor computes them online (``robotrl learner
    reward=classifier``: demonstrations recorded on a robot without a reward of its own). Terminations and episode
    boundaries are kept (a demonstration is not cut at the classifier's first success).

    Raises:
        ConfigError: the classifier reads cameras the data lacks (or at another size), another state size, or
            stacks frames (``frame_stack > 1``: relabel online only).
    """
    import dataclasses

    from robotrl.real_robot.online_pixels import demo_cameras, with_policy_cameras

    clf = reward.classifier
    clf.check_inputs(demo_cameras(data), int(data.next_observations.shape[1]), "the demonstrations")
    if clf.has_cameras and clf.frame_stack > 1:
        raise ConfigError("the success classifier stacks frames (frame_stack > 1); relabelling demonstrations needs "
                          "frame_stack=1")
    d = with_policy_cameras(data)
    nxt = None if d.image_index is None else np.asarray(d.image_index) + 1
    p = np.empty(d.num_transitions, np.float64)
    for s in range(0, p.size, chunk):
        sl = slice(s, s + chunk)
        images = None
        if clf.has_cameras:
            assert d.images is not None and nxt is not None
            images = {k: np.asarray(d.images[k])[nxt[sl]] for k in clf.image_keys}
        p[sl] = clf.prob(np.asarray(d.next_observations[sl], np.float32), images)
    ok = p >= reward.threshold
    return dataclasses.replace(data, rewards=ok.astype(np.asarray(data.rewards).dtype), success=ok)


# ----------------------------------------------------------------------------- robotrl train agent=reward-classifier
def build_classifier(cfg_model, frames: LabelledFrames, action_dim: int, seed: int) -> SuccessClassifier:
    """The :class:`SuccessClassifier` of ``agent.model`` for ``frames`` (their cameras and state size).

    Raises:
        ConfigError: cameras with the pretrained ``resnet10`` encoder and no ``encoder_weights`` file, or
            ``freeze_encoder=true`` without ``encoder_weights`` (a trunk kept at its random weights).
    """
    kw = {k: cfg_model[k] for k in ("encoder", "pooling", "feature_dim", "channels", "encoder_weights",
                                    "freeze_encoder", "augment_pad") if k in cfg_model}
    if frames.images and kw.get("freeze_encoder") and not kw.get("encoder_weights"):
        raise ConfigError("agent.model.freeze_encoder=true with no encoder_weights keeps a randomly initialised trunk "
                          "fixed; give agent.model.encoder_weights=<a local weights file> or set "
                          "agent.model.freeze_encoder=null (frozen exactly when pretrained; drq then trains from scratch)")
    if frames.images and kw.get("encoder", "resnet10") == "resnet10" and not kw.get("encoder_weights"):
        raise ConfigError("the camera classifier's encoder is a pretrained ResNet-10: set agent.model.encoder_weights="
                          "<a local file with its state_dict, torch.save(ResNet10(3, width).state_dict(), path)> "
                          "(nothing is downloaded), or agent.model.encoder=drq to train a small encoder from scratch")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return SuccessClassifier(frames.state.shape[1], action_dim, hidden=list(cfg_model.hidden),
                                 image_shapes={k: list(v.shape[1:]) for k, v in frames.images.items()} or None, **kw)


def run_train(cfg, run_dir: Path) -> dict:
    """Body of ``robotrl train agent=reward-classifier [obs=pixels]``: load the labelled dataset, fit, choose the
    threshold, evaluate on held-out episodes, save ``classifier.pt``, ``report.json`` / ``report.md`` and TensorBoard
    scalars; returns the summary."""
    from robotrl.data.dataset import load_dataset
    from robotrl.experiment import ensure_dataset, wants_cameras
    from robotrl.files import atomic_write

    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    m = cfg.agent.model
    data = load_dataset(ensure_dataset(cfg.dataset))
    cams = wants_cameras(cfg)  # the run's observation spec: obs=pixels reads the recording's cameras
    if cams and not data.images:
        raise ConfigError(f"dataset {cfg.dataset.id} holds no camera frames (obs=pixels): record it with the robot's "
                          "cameras (robot.cameras=[...]), or train the state classifier (drop obs=pixels)")
    frames = LabelledFrames.from_dataset(data, success_last_k=int(m.get("success_last_k", 0) or 0),
                                         cameras=cams, state=bool(m.get("state", True)))
    seed = int(cfg.seed)
    clf = build_classifier(m, frames, int(data.actions.shape[1]), seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "tb"))
    try:
        def log(step: int, scalars: dict[str, float]) -> None:
            for k, v in scalars.items():
                writer.add_scalar(k, v, step)

        thr = m.get("threshold")
        metrics = fit_success_classifier(clf, frames, steps=int(m.steps), batch_size=int(m.batch_size),
                                         lr=float(m.lr), holdout=float(m.holdout),
                                         threshold=None if thr is None else float(thr), seed=seed, log=log)
    finally:
        writer.close()
    path = save_classifier(run_dir / "classifier.pt", clf, metrics["threshold"], metrics)
    summary = {"classifier": str(path), "dataset": str(cfg.dataset.id),
               "inputs": {"cameras": clf.camera_shapes(), "state_dim": clf.obs_dim}, **metrics}
    atomic_write(run_dir / "report.json", json.dumps(summary, indent=2))
    atomic_write(run_dir / "report.md", _report_md(summary))
    return summary


def _report_md(s: dict) -> str:
    rows = ["| frames | episodes | precision | recall | F1 | AUC | positives / negatives |", "|---|---|---|---|---|---|---|"]
    for name in ("train", "threshold_set", "heldout"):
        m = s[name]
        rows.append(f"| {name} ({s['frames'][name]}) | {s['episodes'][name]} | {m['precision']:.3f} | "
                    f"{m['recall']:.3f} | {m['f1']:.3f} | {m['auc']:.3f} | {m['positives']} / {m['negatives']} |")
    return (f"# Success classifier\n\nDataset `{s['dataset']}`; inputs: cameras {s['inputs']['cameras'] or 'none'}, "
            f"state Do={s['inputs']['state_dim']}.\n\nThreshold {s['threshold']:.4f} (p(success) at and above which an "
            "observation is a success), chosen on the threshold episodes; the held-out episodes report the metrics "
            "at it.\n\n" + "\n".join(rows) + "\n"
            + ("" if s["split"] == "episodes" else "\nToo few episodes with and without a success to hold whole episodes "
               "out: frames were held out, so held-out frames have neighbours in training and the figures are "
               "optimistic. Record more episodes.\n"))


class RewardClassifierAgent:
    """What ``configs/agent/reward-classifier*.yaml`` instantiates: the classifier's settings. ``robotrl train``
    runs :func:`run_train` for it instead of the RL loops (it is a reward model, not an agent).

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        obs_normalizer, action_scaler, device, seed: accepted like every agent's (unused).
        state: read the state (beside the cameras with ``obs=pixels``; ``False`` there: the frames alone, HIL-SERL).
        success_last_k: also label the last ``k`` observations of each successful episode positive (HIL-SERL; 0: off).
        hidden: the learned head's layer sizes.
        steps, batch_size, lr: Adam optimisation (:func:`fit_success_classifier`).
        holdout: fraction of episodes held out (half choose the threshold, half report the metrics at it).
        threshold: a fixed threshold in ``(0, 1)``; ``None``: the best-F1 one on the threshold episodes.
        encoder, encoder_weights, freeze_encoder, channels, pooling, feature_dim, augment_pad: the camera encoder
            (``obs=pixels``; :class:`SuccessClassifier`): a frozen pretrained ResNet-10 from a local weights file of
            width ``channels`` by default, or ``drq`` trained from scratch (``freeze_encoder=None``: frozen exactly
            when ``encoder_weights`` is given); ``augment_pad`` the random shift.

    Attributes:
        settings: the settings above by name (what :func:`run_train` reads as ``agent.model``).
        policy: a state :class:`SuccessClassifier` of ``Do`` with the configured head (``run_train`` builds the one
            of the dataset's inputs: its cameras and state).
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer=None, action_scaler=None, device="cpu",
                 seed: int = 0, state: bool = True, success_last_k: int = 0, hidden: Sequence[int] = (256, 256),
                 steps: int = 2000, batch_size: int = 256, lr: float = 1e-3, holdout: float = 0.2,
                 threshold: float | None = None, encoder: str = "resnet10", encoder_weights: str | None = None,
                 freeze_encoder: bool | None = None, channels: int = 64, pooling: str = "spatial_softmax",
                 feature_dim: int = 64, augment_pad: int = 0):
        self.settings = {"state": state, "success_last_k": success_last_k, "hidden": list(hidden), "steps": steps,
                         "batch_size": batch_size, "lr": lr, "holdout": holdout, "threshold": threshold,
                         "encoder": encoder, "encoder_weights": encoder_weights, "freeze_encoder": freeze_encoder,
                         "channels": channels, "pooling": pooling, "feature_dim": feature_dim,
                         "augment_pad": augment_pad}
        self.policy = SuccessClassifier(obs_dim, action_dim, hidden=list(hidden))
