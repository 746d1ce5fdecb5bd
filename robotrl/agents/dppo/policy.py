"""The deployable DPPO policy: frozen pretrained denoiser + fine-tuned copy, with ``K'`` recorded.

DPPO (Ren et al. 2024, irom-princeton/dppo ``model/diffusion/diffusion_vpg.py``): the
first ``n − K'`` steps of the sampling chain use the frozen pretrained denoiser
(``denoiser``), the last ``K'`` (``ft_denoising_steps``) the fine-tuned copy
(``denoiser_ft``). The choice is made by the step's timestep ``k``, as DPPO's ``p_mean_var``
does for DDPM (``t < K'``): the fine-tuned copy serves every timestep up to ``k_ft``, the
timestep of the first fine-tuned step of the chain it was fine-tuned on (``K' − 1`` on a
DDPM chain; on a DDIM chain the ``K'``-th last DDIM timestep, i.e. DPPO's
``index >= ddim_steps − K'``). A caller that runs the policy on another chain (a shorter DDIM
chain, a distillation teacher) therefore still reaches the fine-tuned weights at the noise
levels where they were trained. Both, ``K'`` and the chain settings are in :meth:`spec` / the
``state_dict``, so rebuilding a checkpoint's policy (``robotrl eval``,
:func:`robotrl.policy.load_policy`) runs the fine-tuned network — the pitfall of
evaluating with the frozen network only cannot happen.

Evaluation is DPPO's deterministic mode: DDPM std floored at 1e-3 and no noise at the
last step, or DDIM with η = 0. Symbols as in :mod:`robotrl.agents.diffusion.policy`.
"""

from __future__ import annotations

import copy

from torch import nn

from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.agents.diffusion.sampling import chain_timesteps
from robotrl.errors import ConfigError


class DPPOPolicy(DiffusionPolicy):
    """A :class:`DiffusionPolicy` whose last ``K'`` chain steps use ``denoiser_ft``.

    Args:
        ft_denoising_steps: ``K'`` (``1 <= K' <= n``, ``n`` = chain length of ``sampler``).
        **kwargs: :class:`DiffusionPolicy` arguments (``sampler="ddim"`` fine-tunes a DDIM chain).

    Raises:
        ConfigError: ``K'`` outside ``[1, n]``.
    """

    def __init__(self, obs_dim: int, action_dim: int, *, ft_denoising_steps: int = 10, **kwargs):
        super().__init__(obs_dim, action_dim, **kwargs)
        n = self.chain_length()
        if not 1 <= ft_denoising_steps <= n:
            raise ConfigError(f"agent.model.ft_denoising_steps K'={ft_denoising_steps} must be in [1, {n}] for the "
                              f"{self.sampler} chain of {n} steps: lower it or lengthen the chain")
        self.ft_steps = int(ft_denoising_steps)
        ks, _ = chain_timesteps(self.K, self.sampler, self.ddim_steps)
        self.ft_max_timestep = int(ks[n - self.ft_steps])  # k_ft: largest timestep the fine-tuned copy serves
        self._spec["ft_denoising_steps"] = self.ft_steps
        self.denoiser.requires_grad_(False)
        self.denoiser_ft = copy.deepcopy(self.denoiser).requires_grad_(True)

    def net_for_step(self, k: int) -> nn.Module:
        """The fine-tuned denoiser at timesteps ``k <= k_ft`` (the last ``K'`` steps of the fine-tuned
        chain), the frozen one above (module doc)."""
        return self.denoiser_ft if k <= self.ft_max_timestep else self.denoiser

    def sync_ft_from_base(self) -> None:
        """Copy the pretrained weights into the fine-tuned denoiser (start of fine-tuning)."""
        self.denoiser_ft.load_state_dict(self.denoiser.state_dict())
