"""The deployable flow-matching policy: normalisers + velocity network (EMA weights) + chunk queues.

Rectified-flow policy over action chunks (Liu et al. 2023; the ReinFlow repository's
``ReFlow``/``FlowMLP``, ReinFlow/ReinFlow ``model/flow/``). Symbols: ``B``/``N`` batch /
envs, ``To`` observation history, ``Do`` observation size, ``Ta`` predicted chunk, ``Te``
executed steps per chunk (``act_steps``), ``Da`` action size, ``K`` Euler steps.

The velocity network is one of the diffusion denoisers
(:func:`robotrl.agents.diffusion.networks.build_denoiser`: residual MLP, plain MLP or 1D
UNet) fed the continuous time ``t ∈ [0, 1)`` instead of an integer timestep (its
sinusoidal embedding takes floats). Inference draws ``x_0 ~ N(0, I)`` and integrates
``K`` Euler steps (:func:`~robotrl.agents.flow.sampling.euler_sample`); no noise is
injected, so for a given ``x_0`` the chunk is a deterministic function of the history.

``forward(obs (N, Do) raw) -> action (N, Da) raw`` acts per env step with the same
history/queue semantics as :class:`~robotrl.agents.diffusion.policy.DiffusionPolicy`
(its per-step methods are reused as they are); :meth:`predict_chunk` is the stateless
path ``(B, To, Do) -> (B, Ta, Da)`` raw. Cameras are an option of the observation, as for the diffusion
policy (``image_shapes``, :class:`~robotrl.vision.frontend.ObservationFrontend`): the velocity network then
conditions on each history step's encoder features. With ``shortcut=True`` the network is a shortcut
model's (:mod:`robotrl.agents.flow.shortcut`), which every Euler step calls with ``d = 1/K``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from robotrl.agents.diffusion.networks import build_denoiser
from robotrl.agents.diffusion.policy import DiffusionPolicy, as_step_history, check_no_frame_stack
from robotrl.agents.flow.sampling import euler_sample, euler_times
from robotrl.agents.flow.shortcut import ShortcutVelocity
from robotrl.errors import ConfigError
from robotrl.vision.frontend import ObservationFrontend


def _velocity_net(denoiser: str, obs_dim: int, action_dim: int, To: int, Ta: int, kwargs: dict, shortcut: bool,
                  max_steps: int) -> nn.Module:
    """The flow policy's velocity network: a denoiser, or a :class:`ShortcutVelocity` around one whose
    condition has room for the step embedding (of the denoiser's ``time_dim``, default 16).

    Raises:
        ConfigError: a bad denoiser or ``max_steps``.
    """
    step_dim = int(kwargs.get("time_dim", 16))
    try:
        if not shortcut:
            return build_denoiser(denoiser, obs_dim, action_dim, To, Ta, **kwargs)
        base = build_denoiser(denoiser, To * obs_dim + step_dim, action_dim, 1, Ta, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"agent.model.denoiser / denoiser_kwargs: {exc}") from exc
    return ShortcutVelocity(base, max_steps, step_dim, act=str(kwargs.get("act", "mish")))


class FlowPolicy(ObservationFrontend):
    """Rectified-flow action-chunk policy with ``K``-step Euler inference, from states or cameras plus the state.

    Args:
        obs_dim, action_dim: ``Do`` (the flat state beside any cameras; 0: cameras only), ``Da``.
        obs_horizon, action_horizon, act_steps: ``To``, ``Ta``, ``Te`` (``Te <= Ta``).
        flow_steps: ``K``, Euler steps at inference (an inference setting, not part of the
            network: a policy trained once samples with any ``K``).
        denoiser: ``"mlp"`` (residual), ``"plain_mlp"`` or ``"unet"``; ``denoiser_kwargs``
            go to its constructor (``hidden``, ``time_dim``, ``act`` / ``channels``).
        obs_clip: clamp of normalised observations.
        x_clip: clamp of the intermediate latents after each Euler step (ReinFlow: 1;
            ``None``: off). The final chunk is always clamped to ``[-1, 1]``.
        shortcut: a shortcut model (Frans et al. 2024): the velocity network is also conditioned
            on the step size ``d`` (:class:`~robotrl.agents.flow.shortcut.ShortcutVelocity`) and a
            ``K``-step chain steps with ``d = 1/K``, so ``K = 1`` is a one-step policy (the trained step
            sizes are ``1, 1/2, …, 1/M``: other ``K`` run, on step sizes the network interpolates).
        shortcut_max_steps: ``M``, the finest number of steps a shortcut network is trained for
            (a power of two; the paper's 128).
        **frontend: the observation spec's cameras and encoder (``image_shapes``, ``encoder``, ...,
            :class:`~robotrl.vision.frontend.ObservationFrontend`; none: a state policy, ``state_dict`` and numbers
            unchanged); ``frame_stack`` must be 1.

    Raises:
        ConfigError: ``act_steps`` outside ``[1, Ta]``, ``flow_steps < 1``, a bad denoiser or ``M``,
            ``frame_stack != 1``.
    """

    ARCH_KEYS = (*ObservationFrontend.ARCH_KEYS, "obs_horizon", "action_horizon", "denoiser", "denoiser_kwargs",
                 "shortcut", "shortcut_max_steps")
    ARCH_DEFAULTS = {**ObservationFrontend.ARCH_DEFAULTS, "shortcut": False, "shortcut_max_steps": 128}  # before shortcuts


    def __init__(self, obs_dim: int, action_dim: int, *, obs_horizon: int = 1, action_horizon: int = 4,
                 act_steps: int = 4, flow_steps: int = 4, denoiser: str = "mlp", denoiser_kwargs: dict | None = None,
                 obs_clip: float | None = 10.0, x_clip: float | None = 1.0, shortcut: bool = False,
                 shortcut_max_steps: int = 128, **frontend):
        if not 1 <= act_steps <= action_horizon:
            raise ConfigError(f"agent.model.act_steps Te={act_steps} must be in [1, Ta={action_horizon}]")
        euler_times(flow_steps)  # validates K
        check_no_frame_stack(frontend)
        x_clip = None if x_clip is None else float(x_clip)
        super().__init__(obs_dim, action_dim, obs_clip=obs_clip, **frontend, obs_horizon=int(obs_horizon),
                         action_horizon=int(action_horizon), act_steps=int(act_steps), flow_steps=int(flow_steps),
                         denoiser=denoiser, denoiser_kwargs=dict(denoiser_kwargs or {}), x_clip=x_clip,
                         shortcut=bool(shortcut), shortcut_max_steps=int(shortcut_max_steps))
        self.To, self.Ta, self.Te, self.K = int(obs_horizon), int(action_horizon), int(act_steps), int(flow_steps)
        self.x_clip = x_clip
        self.velocity = _velocity_net(denoiser, self.out_dim, self.action_dim, self.To, self.Ta,
                                      dict(denoiser_kwargs or {}), shortcut, shortcut_max_steps)
        self._init_queues()

    # the per-env history / chunk-queue machinery and the conditioning are the diffusion policy's, unchanged
    _init_queues = DiffusionPolicy._init_queues
    history_inputs = DiffusionPolicy.history_inputs
    condition = DiffusionPolicy.condition
    forward = DiffusionPolicy.forward
    reset = DiffusionPolicy.reset
    _restart = DiffusionPolicy._restart
    chunk_len = DiffusionPolicy.chunk_len
    act_steps = DiffusionPolicy.act_steps

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return {**self._spec, "denoiser_kwargs": dict(self._spec["denoiser_kwargs"])}

    def export_module(self, seed: int = 0) -> nn.Module:
        """Traceable ``obs (B, Do) -> chunk (B, Ta, Da)`` (with cameras ``(obs, {camera: uint8 (B, H, W, C)})``)
        with a fixed ``x_0``, for TorchScript/ONNX.

        See :class:`~robotrl.agents.flow.export.FlowChunkExport`.
        """
        from robotrl.agents.flow.export import FlowChunkExport

        return FlowChunkExport(self, seed=seed)

    # ------------------------------------------------------------------ stateless
    @torch.no_grad()
    def sample_normalized(self, cond: torch.Tensor, *, steps: int | None = None, x0: torch.Tensor | None = None,
                          generator: torch.Generator | None = None) -> torch.Tensor:
        """Chunk ``(B, Ta, Da)`` in ``[-1, 1]`` for a normalised condition ``(B, To, Do)``.

        Args:
            steps: Euler steps (default ``K``); x0: starting noise ``(B, Ta, Da)`` (default: drawn
                from ``N(0, I)`` with ``generator``).
        """
        if x0 is None:
            x0 = torch.randn((cond.shape[0], self.Ta, self.action_dim), device=cond.device, generator=generator)
        return euler_sample(self.velocity, cond, x0, int(steps or self.K), x_clip=self.x_clip)

    @torch.no_grad()
    def predict_chunk(self, obs_hist: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None, *,
                      steps: int | None = None) -> torch.Tensor:
        """Raw history ``(B, To, Do)`` (or ``(B, Do)`` when ``To == 1``; with cameras frames
        ``{camera: (B, To, H, W, C)}`` or ``(B, H, W, C)`` alike) → raw chunk ``(B, Ta, Da)``.

        ``steps``: Euler steps (default ``K``).
        """
        obs_hist, images = as_step_history(obs_hist, images)
        return self.action_scaler.unnormalize(self.sample_normalized(self.condition(obs_hist, images), steps=steps))
