"""A success classifier file as a reward function: the loader ``experiment=reset-free`` names as its Hydra target.

``reset_free.reward._target_: robotrl.real_robot.classifier_file.classifier_reward`` turns each phase's
``classifier.pt`` (written by ``robotrl train agent=reward-classifier``) into a
:class:`~robotrl.real_robot.reward_classifier.ClassifierReward` at the classifier's own threshold. The run assembly
(:mod:`robotrl.reset_free`) reaches it through that target only, as the core reaches agents: it never imports the
robot bridge.
"""

from __future__ import annotations

import os

from robotrl.real_robot.reward_classifier import ClassifierReward, load_classifier

__all__ = ["classifier_reward"]


def classifier_reward(path: str | os.PathLike, obs_dim: int | None = None, end_on_success: bool = True,
                      threshold: float | None = None) -> ClassifierReward:
    """The :class:`ClassifierReward` of the classifier at ``path`` (a ``classifier.pt`` or its run directory).

    Args:
        path: the classifier file or run directory.
        obs_dim: ``Do`` of the observations it will score (``None``: unchecked); a state classifier only.
        end_on_success: a success ends the episode.
        threshold: ``p(success)`` threshold (``None``: the one chosen when it was trained).

    Raises:
        CheckpointError: not a success classifier of this format, or unreadable.
        ConfigError: it reads cameras, or another state size than ``obs_dim`` (one line naming the fix).
    """
    clf, thr = load_classifier(path)
    if obs_dim is not None:
        clf.check_inputs({}, int(obs_dim), "this run's state")
    return ClassifierReward(clf, float(thr if threshold is None else threshold), end_on_success)
