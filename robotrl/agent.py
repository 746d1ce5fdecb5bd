"""The agent protocols the loops drive: :class:`OffPolicyAgent` and :class:`OnPolicyAgent`.

An agent owns the training-only parts (losses, optimizers, critics, targets) and exposes
its deployable :class:`~robotrl.policy.Policy` as ``agent.policy``. Agents are built by
Hydra from ``configs/agent/*.yaml`` (``_target_``) with sizes and normalisers passed in
explicitly by :func:`robotrl.experiment.build_trainer`; the core never imports an agent
module by name (``tests/test_layers.py``).

Every member a loop uses is declared here, typed and documented, and the loops call it
directly (no ``getattr`` probing):

- the members every agent of a kind has: :class:`OffPolicyAgent`, :class:`OnPolicyAgent`;
- the *hooks* a loop calls on every agent, with defaults that change nothing
  (:class:`AgentBase`, :class:`OffPolicyAgentBase`, :class:`OnPolicyAgentBase`: an agent
  inherits its kind's base and overrides the hooks it needs);
- the *capabilities* only some agents have, each its own protocol, checked with
  ``isinstance`` before a run starts: :class:`PartLoader` (``load_parts``, partial warm
  starts), :class:`BCPretrainer` (``bc_update``, on-policy pretraining),
  :class:`ResidualAgent` (``set_base``, a residual on a frozen base policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from robotrl.checkpoint import load_checkpoint
from robotrl.data.batch import Batch
from robotrl.errors import CheckpointError

if TYPE_CHECKING:
    from robotrl.data.replay import ReplayBuffer

__all__ = ["FRONTEND_ARCHITECTURE", "Agent", "AgentBase", "BCPretrainer", "OffPolicyAgent", "OffPolicyAgentBase", "OnPolicyAgent",
           "OnPolicyAgentBase", "PartLoader", "ResidualAgent", "agent_device"]


def agent_device(agent) -> torch.device:
    """The device of ``agent.policy``'s first tensor (CPU when it has none)."""
    for t in (*agent.policy.parameters(), *agent.policy.buffers()):
        return t.device
    return torch.device("cpu")


#: The ``agent.model`` settings of the observation front end (:class:`~robotrl.vision.frontend.ObservationFrontend`)
#: that shape its networks: part of the :attr:`AgentBase.ARCHITECTURE_KEYS` of every agent that reads cameras.
FRONTEND_ARCHITECTURE: tuple[str, ...] = ("encoder", "pooling", "feature_dim", "channels")


class AgentBase:
    """Hook defaults shared by off- and on-policy agents: the warm start (``trainer.init_from``).

    Subclasses provide ``policy``, ``state_dict`` and ``load_state_dict`` (their protocol's members).

    Attributes:
        ARCHITECTURE_KEYS: the constructor settings (``agent.model`` keys) that define the agent's networks (layer
            sizes, activations, ensemble size, normaliser clipping, chunk horizons, the camera encoder:
            :data:`FRONTEND_ARCHITECTURE`). A warm start into this class adopts each of them from the checkpoint it
            loads when the pretraining run recorded it (:func:`robotrl.experiment.warm_start_architecture`), so
            the weights fit; an explicit override that differs is refused. Default ``()``: nothing adopted.
    """

    ARCHITECTURE_KEYS: ClassVar[tuple[str, ...]] = ()
    policy: nn.Module

    def load_pretrained(self, path: str) -> None:
        """Initialise from a pretrained checkpoint (``trainer.init_from``; :func:`robotrl.warmstart.warm_start`).

        Default: the checkpoint's whole agent state (an agent of the same class and sizes).
        Agents that convert another policy's checkpoint (DPPO from diffusion BC, ReinFlow from
        flow BC, PPO from BC, a residual's base) override it.

        Args:
            path: a checkpoint file or a run directory (its ``checkpoints/latest.pt``).

        Raises:
            CheckpointError: missing or unreadable checkpoint, or a state that does not fit the agent.
        """
        state = load_checkpoint(path, map_location=agent_device(self))
        try:
            self.load_state_dict(state["agent"])
        except (KeyError, RuntimeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"init_from {path}: its agent state does not fit this agent ({exc})") from exc

    def attach_offline_data(self, buffer: ReplayBuffer) -> None:
        """The pretraining data (a replay buffer, raw rewards as the run stores them), handed over by the loop
        before the online phase when the run holds it; e.g. for knowledge retention (BC on the pretraining data,
        offline replay: ``robotrl.agents.retention``). Default: nothing."""


class OffPolicyAgentBase(AgentBase):
    """No-op defaults of the hooks :class:`~robotrl.trainer.OffPolicyLoop` calls on every off-policy agent.

    Attributes:
        critic_utd: critic minibatches one :meth:`update` splits its batch into (:func:`robotrl.utd.batch_split`;
            1: no split, one update per minibatch; WSRL/RLPD's ``QLAgent`` sets ``agent.model.critic_utd``).
        frame_stack: frames per camera in one observation (uint8 ``(B, H, W, k·C)`` stacks, oldest first;
            the online replay buffer builds the same stacks, :mod:`robotrl.vision.stack`); 1 for states.
    """

    critic_utd: int = 1
    frame_stack: int = 1

    @property
    def explores_online(self) -> bool:
        """Whether :meth:`explore` can collect online data in this configuration; ``False`` for an agent that
        learns offline only here (behaviour cloning from cameras: its stateless ``explore`` has no frame
        history), so the build path refuses ``trainer.online_steps > 0`` with one line. Default ``True``."""
        return True

    @property
    def needs_mc_returns(self) -> bool:
        """Whether updates use Monte-Carlo returns-to-go (Cal-QL): online rows then come only from ended
        episodes, and updates wait for the first one. Default ``False``."""
        return False

    def init_from_data(self, buffer: ReplayBuffer) -> float | None:
        """Called once before the first offline update of a fresh run (not warm-started, not resumed) with the
        offline replay buffer, e.g. to start the critic's output at the data's mean return. Returns what was
        set (for the log), ``None`` when nothing was done. Default: nothing."""
        return None

    def sample_batch(self, buffer: ReplayBuffer, batch_size: int) -> Batch | None:
        """The agent's own offline batch of ``batch_size`` rows (sequences, action chunks: diffusion and flow
        policies), or ``None``: the loop samples ``buffer.sample(batch_size, n_step=trainer.n_step)``.
        Default ``None``."""
        return None

    def start_online(self) -> None:
        """Called when the online phase starts, also on resume (e.g. Cal-QL's bound switched off for SAC
        fine-tuning, WSRL). Default: nothing."""

    def reset_explore(self, env_ids: np.ndarray | None = None) -> None:
        """The episodes of ``env_ids`` (``None``: every env) start with the observations the envs just
        returned (per-env exploration state such as frame stacks starts afresh). Default: nothing."""

    @property
    def transition_fields(self) -> dict[str, int]:
        """Float fields the loop stores with every online transition beside the usual ones, as
        ``{name: width}`` (:class:`robotrl.data.ReplayBuffer` ``extra_dims``; the offline buffer holds them as
        NaN, unknown), e.g. a residual agent's executed base action with a chunked base
        (:class:`robotrl.agents.residual.offpolicy.ResidualOffPolicyAgent`). Default: none."""
        return {}

    def explore_extras(self) -> dict[str, np.ndarray]:
        """The :attr:`transition_fields` of the last :meth:`explore` call, ``{name: (N, width)}`` float arrays
        for its ``N`` observations. Default: none."""
        return {}


class OnPolicyAgentBase(AgentBase):
    """No-op defaults of the hooks :class:`~robotrl.onpolicy.OnPolicyLoop` calls on every on-policy agent."""

    def reset_rollout(self, env_ids: np.ndarray | None = None) -> None:
        """The envs ``env_ids`` start a new episode (per-env state such as a base policy's chunk queue).
        Default: nothing."""

    def start_online(self) -> None:
        """Called before the first online iteration, also on resume (e.g. the frozen pretrained snapshot of
        knowledge retention). Default: nothing."""


@runtime_checkable
class PartLoader(Protocol):
    """An agent that loads named parts of a checkpoint (``trainer.init_parts``, e.g. ``[policy]`` for PORL)."""

    def load_parts(self, state: dict, parts: Sequence[str]) -> None:
        """Load ``parts`` (``policy``, ``critic``, ...) of an agent state ``state``.

        Raises:
            ValueError: an unknown part name; KeyError, RuntimeError: a state that does not fit.
        """
        ...


@runtime_checkable
class BCPretrainer(Protocol):
    """An on-policy agent that can clone the dataset's behaviour first (``agent.onpolicy.pretrain_steps``)."""

    def bc_update(self, batch: Batch) -> dict[str, Any]:
        """One behaviour-cloning update on dataset transitions; returns scalar metrics."""
        ...


@runtime_checkable
class ResidualAgent(Protocol):
    """An agent that learns a residual on a frozen base policy (``agent.policy.base``)."""

    def set_base(self, base: Any) -> None:
        """Install the frozen base (a policy module or its checkpoint description)."""
        ...


@runtime_checkable
class OffPolicyAgent(Protocol):
    """One gradient step per :meth:`update`; acting for online collection via :meth:`explore`.

    The hooks (``critic_utd``, ``frame_stack``, ``explores_online``, ``needs_mc_returns``, :meth:`init_from_data`,
    :meth:`sample_batch`, :meth:`start_online`, :meth:`attach_offline_data`, :meth:`reset_explore`,
    :meth:`load_pretrained`)
    are documented, with their defaults, on :class:`OffPolicyAgentBase`, which agents inherit.
    """

    policy: nn.Module
    critic_utd: int
    frame_stack: int

    @property
    def explores_online(self) -> bool: ...

    @property
    def needs_mc_returns(self) -> bool: ...

    def init_from_data(self, buffer: ReplayBuffer) -> float | None: ...

    def sample_batch(self, buffer: ReplayBuffer, batch_size: int) -> Batch | None: ...

    def start_online(self) -> None: ...

    def attach_offline_data(self, buffer: ReplayBuffer) -> None: ...

    def reset_explore(self, env_ids: np.ndarray | None = None) -> None: ...

    @property
    def transition_fields(self) -> dict[str, int]: ...

    def explore_extras(self) -> dict[str, np.ndarray]: ...

    def load_pretrained(self, path: str) -> None: ...

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """One gradient update on ``batch``; returns scalar metrics for logging."""
        ...

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Exploration actions ``(N, Da)`` raw units for observations ``(N, Do)``."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to resume: networks, optimizers, generators (tensors/containers only)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        ...


@runtime_checkable
class OnPolicyAgent(Protocol):
    """Rollouts with :meth:`rollout_act`, one iteration of updates per :meth:`update_rollout`.

    ``policy`` has ``To`` (observation history) and ``Te`` (executed chunk length); ``gamma``
    is the discount of the running reward scaler, ``reward_scaling`` whether it is on.
    The hooks (:meth:`reset_rollout`, :meth:`start_online`, :meth:`attach_offline_data`,
    :meth:`load_pretrained`) are documented, with their
    defaults, on :class:`OnPolicyAgentBase`, which agents inherit.
    """

    policy: nn.Module
    gamma: float
    reward_scaling: bool

    def reset_rollout(self, env_ids: np.ndarray | None = None) -> None: ...

    def start_online(self) -> None: ...

    def attach_offline_data(self, buffer: ReplayBuffer) -> None: ...

    def load_pretrained(self, path: str) -> None: ...

    def rollout_act(self, obs_hist: np.ndarray) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """Actions for observation histories ``(N, To, Do)`` raw: ``(N, Te, Da)`` or ``(N, Da)`` raw
        units, and extras ``{name: tensor (N, ...)}`` stored in the rollout."""
        ...

    def update_rollout(self, rollout: Any, iteration: int) -> dict[str, float]:
        """Updates on one :class:`~robotrl.onpolicy.Rollout`; returns scalar metrics."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to resume: networks, optimizers, generators (tensors/containers only)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        ...


#: The off-policy protocol under its former name.
Agent = OffPolicyAgent
