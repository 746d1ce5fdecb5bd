"""A success classifier as the reward of online RL on a robot without a reward of its own (HIL-SERL).

Trained on labelled states from recordings: a Minari dataset whose episodes carry
``infos["success"]`` (the robot bridge's recordings do; so do the twin's tasks). The label
of transition ``t`` is the success reported after it, so the classifier scores the state the
step led to: ``p(success | s') = sigmoid(f(s'))`` with ``f`` an MLP on the normalised state
``(Do,)``. On the robot (:class:`ClassifierReward`, ``robotrl actor reward=classifier``) the
reward is ``1`` when ``p >= threshold`` (HIL-SERL: 0.5–0.7), else ``0``, and the episode can
end on success.

``robotrl train agent=reward-classifier dataset.id=<recording> dataset.generate=false``
trains one (``configs/agent/reward-classifier.yaml``) and writes
``<run_dir>/classifier.pt`` (plain tensors, loaded with ``weights_only=True``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.errors import CheckpointError, DatasetFormatError

KIND = "robotrl.success_classifier"


class SuccessClassifier(nn.Module):
    """``(B, Do)`` raw state → ``(B,)`` success logit (an MLP on the normalised state).

    Args:
        obs_dim: ``Do``.
        hidden: hidden widths.
        mean, std: ``(Do,)`` normalisation statistics (default 0 / 1).
    """

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (256, 256), mean=None, std=None):
        super().__init__()
        self.kwargs = {"obs_dim": int(obs_dim), "hidden": [int(h) for h in hidden]}
        self.register_buffer("mean", torch.as_tensor(np.zeros(obs_dim) if mean is None else mean, dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(np.ones(obs_dim) if std is None else std, dtype=torch.float32))
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            layers += [nn.Linear(d, int(h)), nn.ReLU()]
            d = int(h)
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits ``(B,)``."""
        x = ((obs - self.mean) / self.std).clamp(-10, 10)
        return self.net(x).squeeze(-1)

    @torch.no_grad()
    def prob(self, obs: np.ndarray) -> np.ndarray:
        """``p(success)`` ``(B,)`` (or a float for one ``(Do,)`` state)."""
        x = torch.as_tensor(np.asarray(obs, np.float32))
        p = torch.sigmoid(self(x[None] if x.ndim == 1 else x)).numpy()
        return float(p[0]) if x.ndim == 1 else p


def success_labels(data) -> tuple[np.ndarray, np.ndarray]:
    """States ``(M, Do)`` (the next observations) and their success labels ``(M,)`` of an
    :class:`~robotrl.data.dataset.OfflineData`.

    Raises:
        DatasetFormatError: the dataset has no success labels, or only one class.
    """
    if data.success is None:
        raise DatasetFormatError("the dataset has no success labels (infos['success'] per step); record it with the "
                                 "robot bridge (robotrl deploy / robotrl actor) or label its steps first")
    y = np.asarray(data.success, bool)
    if y.all() or not y.any():
        raise DatasetFormatError(f"the dataset's {y.size} labels are all {bool(y[0])}; a classifier needs successes "
                                 "and failures (record some failed and some successful episodes)")
    return np.asarray(data.next_observations, np.float32), y


def train_success_classifier(states: np.ndarray, labels: np.ndarray, *, steps: int = 2000, batch_size: int = 256,
                             lr: float = 1e-3, hidden: Sequence[int] = (256, 256), holdout: float = 0.1,
                             seed: int = 0) -> tuple[SuccessClassifier, dict]:
    """Fit a :class:`SuccessClassifier` with class-balanced binary cross-entropy.

    Args:
        states: ``(M, Do)``; labels: ``(M,)`` bool.
        steps, batch_size, lr, hidden: optimisation and network.
        holdout: fraction of the states kept out for the reported accuracy (by index, shuffled).
        seed: seed of the split, initialisation and batches.

    Returns:
        The classifier and ``{train_acc, holdout_acc, holdout_balanced_acc, positives, n}``.
    """
    rng = np.random.default_rng(seed)
    M = states.shape[0]
    perm = rng.permutation(M)
    n_hold = int(round(holdout * M))
    hold, train = perm[:n_hold], perm[n_hold:]
    x, y = torch.as_tensor(states), torch.as_tensor(labels.astype(np.float32))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        clf = SuccessClassifier(states.shape[1], hidden, states[train].mean(0), states[train].std(0) + 1e-6)
    pos = float(y[train].mean())
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor((1 - pos) / max(pos, 1e-6)))
    opt = torch.optim.Adam(clf.parameters(), lr=lr)
    for _ in range(int(steps)):
        idx = torch.as_tensor(train[rng.integers(0, train.size, batch_size)])
        loss = loss_fn(clf(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    clf.eval()

    def acc(ix):
        if ix.size == 0:
            return float("nan"), float("nan")
        with torch.no_grad():
            pred = (torch.sigmoid(clf(x[ix])) >= 0.5).numpy()
        t = labels[ix]
        bal = np.mean([np.mean(pred[t == c] == c) for c in (False, True) if np.any(t == c)])
        return float(np.mean(pred == t)), float(bal)

    tr, _ = acc(train)
    ho, ho_bal = acc(hold)
    return clf, {"train_acc": tr, "holdout_acc": ho, "holdout_balanced_acc": ho_bal, "positives": float(labels.mean()),
                 "n": int(M)}


def save_classifier(path: str | os.PathLike, clf: SuccessClassifier, threshold: float, metrics: dict | None = None) -> Path:
    """Write ``clf`` atomically (plain tensors; :func:`load_classifier` reads it)."""
    return save_checkpoint(path, {"kind": KIND, "kwargs": clf.kwargs, "state_dict": clf.state_dict(),
                                  "threshold": float(threshold), "metrics": dict(metrics or {})})


def load_classifier(path: str | os.PathLike) -> tuple[SuccessClassifier, float]:
    """The classifier and its threshold from ``path`` (a file or a run directory with ``classifier.pt``).

    Raises:
        CheckpointError: not a success classifier, or unreadable.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "classifier.pt"
    state = load_checkpoint(p)
    if state.get("kind") != KIND:
        raise CheckpointError(f"{p} is not a success classifier (train one with robotrl train agent=reward-classifier)")
    clf = SuccessClassifier(**state["kwargs"])
    clf.load_state_dict(state["state_dict"])
    return clf.eval(), float(state["threshold"])


class ClassifierReward:
    """The reward of a state from a success classifier.

    Args:
        classifier: a trained :class:`SuccessClassifier`.
        threshold: ``p(success)`` at and above which a state counts as a success.
        end_on_success: a success ends the episode (``terminated``).

    Raises:
        ValueError: ``threshold`` outside ``(0, 1)``.
    """

    def __init__(self, classifier: SuccessClassifier, threshold: float = 0.5, end_on_success: bool = True):
        if not 0 < threshold < 1:
            raise ValueError(f"reward threshold must be in (0, 1), got {threshold}")
        self.classifier, self.threshold, self.end_on_success = classifier, float(threshold), bool(end_on_success)

    def __call__(self, next_state: np.ndarray) -> tuple[float, bool, float]:
        """``(reward, success, p)`` for the state ``(Do,)`` a step led to."""
        p = self.classifier.prob(next_state)
        ok = p >= self.threshold
        return float(ok), bool(ok), float(p)


def run_train(cfg, run_dir: Path) -> dict:
    """Body of ``robotrl train agent=reward-classifier``: load the dataset, fit, save; returns a summary."""
    from robotrl.data.dataset import load_dataset
    from robotrl.experiment import ensure_dataset

    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    m = cfg.agent.model
    data = load_dataset(ensure_dataset(cfg.dataset))
    states, labels = success_labels(data)
    clf, metrics = train_success_classifier(states, labels, steps=int(m.steps), batch_size=int(m.batch_size),
                                            lr=float(m.lr), hidden=list(m.hidden), holdout=float(m.holdout),
                                            seed=int(cfg.seed))
    path = save_classifier(Path(run_dir) / "classifier.pt", clf, float(m.threshold), metrics)
    return {"classifier": str(path), "dataset": str(cfg.dataset.id), "threshold": float(m.threshold), **metrics}


class RewardClassifierAgent:
    """What ``configs/agent/reward-classifier.yaml`` instantiates: the classifier to train
    (``policy``, scoring states ``(B, Do)``) and its training settings. ``robotrl train`` runs
    :func:`run_train` for it instead of the RL loops.

    Args:
        obs_dim, action_dim: ``Do``, ``Da`` (``Da`` only recorded: the classifier scores states).
        obs_normalizer, action_scaler, device, seed: accepted like every agent's (unused: the
            classifier normalises with its training states' statistics).
        hidden, steps, batch_size, lr, holdout, threshold: see :func:`train_success_classifier`
            and :class:`ClassifierReward`.
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer=None, action_scaler=None, device="cpu",
                 seed: int = 0, hidden: Sequence[int] = (256, 256), steps: int = 2000, batch_size: int = 256,
                 lr: float = 1e-3, holdout: float = 0.1, threshold: float = 0.5):
        self.policy = SuccessClassifier(obs_dim, hidden)
        self.policy.obs_dim, self.policy.action_dim = int(obs_dim), int(action_dim)
        self.settings = {"steps": int(steps), "batch_size": int(batch_size), "lr": float(lr), "holdout": float(holdout),
                         "threshold": float(threshold), "hidden": [int(h) for h in hidden]}
