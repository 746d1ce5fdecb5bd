"""DDPM noise schedule and the single-step DDPM / DDIM transitions (pure tensor functions).

Implements Ho et al. 2020 (DDPM), Song et al. 2021 (DDIM) with the cosine schedule of
Nichol & Dhariwal 2021, as used by Diffusion Policy (Chi et al. 2023,
real-stanford/diffusion_policy) and DPPO (Ren et al. 2024, irom-princeton/dppo).

Symbols: ``B`` batch, ``Ta`` action chunk length, ``Da`` action size, ``K`` denoising
steps. Latents ``x`` are action chunks ``(B, Ta, Da)`` in normalised units ``[-1, 1]``.
Timesteps ``k`` are integer tensors ``(B,)`` in ``[0, K)``; ``k = K-1`` is the noisiest.

Every step is written as a Gaussian ``x^{k-1} ~ N(mean, std²)``; the same
:meth:`DiffusionSchedule.ddpm_step` / :meth:`DiffusionSchedule.ddim_step` feed sampling
and DPPO's denoising-MDP log-probabilities, so both use identical means.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def cosine_betas(K: int, s: float = 0.008, max_beta: float = 0.999) -> torch.Tensor:
    """Cosine β schedule ``(K,)`` (Nichol & Dhariwal 2021, eq. 17), β clipped to ``max_beta``."""
    steps = torch.arange(K + 1, dtype=torch.float64)
    f = torch.cos(((steps / K) + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = f / f[0]
    betas = 1 - alphas_cumprod[1:] / alphas_cumprod[:-1]
    return betas.clamp(max=max_beta).float()


def ddim_timesteps(K: int, n: int) -> torch.Tensor:
    """``n`` DDIM timesteps ``(n,)`` in decreasing order, evenly spaced in ``[0, K)`` (ends at 0).

    Raises:
        ValueError: ``n`` not in ``[1, K]``.
    """
    if not 1 <= n <= K:
        raise ValueError(f"ddim_steps must be in [1, K={K}], got {n}")
    step = K // n
    return (torch.arange(n) * step).flip(0)


def _post_logvar(K: int) -> torch.Tensor:
    """``log(max(β̃_k, 1e-20))`` ``(K,)`` of the cosine schedule, ``β̃_k = β_k (1-ᾱ_{k-1})/(1-ᾱ_k)``
    (``β̃_0 = 0``: the last reverse step is noise-free unless a std floor applies)."""
    betas = cosine_betas(K)
    ac = torch.cumprod(1 - betas, 0)
    ac_prev = torch.cat([torch.ones(1), ac[:-1]])
    return torch.log((betas * (1 - ac_prev) / (1 - ac)).clamp(min=1e-20))


def _bcast(v: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Gather ``v[k]`` ``(B,)`` and shape it ``(B, 1, 1)`` to broadcast over ``(Ta, Da)``."""
    return v[k].view(-1, 1, 1)


class DiffusionSchedule(nn.Module):
    """Buffers of a DDPM with ``K`` steps (all float32, ``(K,)``).

    Args:
        K: number of denoising steps.
        x0_clip: clamp the predicted ``x0`` to ``±x0_clip`` at every step (DP and DPPO: 1).
    """

    def __init__(self, K: int, x0_clip: float | None = 1.0):
        super().__init__()
        if K < 1:
            raise ValueError(f"K must be >= 1, got {K}")
        self.K, self.x0_clip = int(K), x0_clip
        betas = cosine_betas(K)
        alphas = 1 - betas
        ac = torch.cumprod(alphas, 0)
        ac_prev = torch.cat([torch.ones(1), ac[:-1]])
        reg = self.register_buffer
        reg("betas", betas)
        reg("alphas_cumprod", ac)
        reg("alphas_cumprod_prev", ac_prev)
        reg("sqrt_ac", ac.sqrt())
        reg("sqrt_1m_ac", (1 - ac).sqrt())
        # log of the posterior variance, clamped at 1e-20 as DPPO does (``ddpm_logvar_clipped`` in
        # irom-princeton/dppo model/diffusion/diffusion.py): the final step's (k=0) variance is 0,
        # so its std is ~1e-10 and callers' floors decide it (DPPO: min_sampling/logprob std 0.1).
        # Not the improved-DDPM copy of β̃_1 into k=0, which gave 0.28 at K=5 and out-ranked the floor.
        reg("post_logvar", _post_logvar(K))
        reg("post_coef_x0", betas * ac_prev.sqrt() / (1 - ac))
        reg("post_coef_xk", (1 - ac_prev) * alphas.sqrt() / (1 - ac))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the buffers are functions of K; ``post_logvar`` is recomputed rather than loaded, so a
        # checkpoint written before the final-step variance followed DPPO (β̃_1 at k=0) samples
        # and scores log-probs like a new one
        key = prefix + "post_logvar"
        if key in state_dict:
            state_dict[key] = self.post_logvar.clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------------ training
    def q_sample(self, x0: torch.Tensor, k: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Forward process ``x^k = √ᾱ_k x0 + √(1-ᾱ_k) ε``; all ``(B, Ta, Da)``, ``k (B,)``."""
        return _bcast(self.sqrt_ac, k) * x0 + _bcast(self.sqrt_1m_ac, k) * noise

    def predict_x0(self, x: torch.Tensor, k: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """``x0 = (x^k - √(1-ᾱ_k) ε) / √ᾱ_k``, clamped to ``±x0_clip``; ``(B, Ta, Da)``."""
        x0 = (x - _bcast(self.sqrt_1m_ac, k) * eps) / _bcast(self.sqrt_ac, k)
        return x0.clamp(-self.x0_clip, self.x0_clip) if self.x0_clip is not None else x0

    # ------------------------------------------------------------------ single steps
    def ddpm_step(self, x: torch.Tensor, k: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """DDPM reverse step ``p(x^{k-1} | x^k)``: returns ``(mean (B,Ta,Da), std (B,1,1))``.

        mean = posterior mean of ``q(x^{k-1} | x^k, x0̂)`` with the clamped ``x0̂``; std =
        ``exp(0.5·log max(β̃_k, 1e-20))`` (~1e-10 at ``k = 0``). Callers floor the std (DPPO).
        """
        x0 = self.predict_x0(x, k, eps)
        mean = _bcast(self.post_coef_x0, k) * x0 + _bcast(self.post_coef_xk, k) * x
        return mean, torch.exp(0.5 * _bcast(self.post_logvar, k))

    def ddim_step(self, x: torch.Tensor, k: torch.Tensor, k_prev: torch.Tensor, eps: torch.Tensor,
                  eta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """DDIM step from ``k`` to ``k_prev`` (``k_prev < 0`` means ``ᾱ = 1``): ``(mean, std (B,1,1))``.

        ``σ = η √((1-ᾱ_prev)/(1-ᾱ) · (1-ᾱ/ᾱ_prev))``; after clamping ``x0̂`` the noise is
        recomputed from it (as DPPO does) so mean and ``x0̂`` agree.
        """
        x0 = self.predict_x0(x, k, eps)
        a = _bcast(self.alphas_cumprod, k)
        a_prev = torch.where(k_prev >= 0, self.alphas_cumprod[k_prev.clamp(min=0)], torch.ones_like(k_prev, dtype=a.dtype))
        a_prev = a_prev.view(-1, 1, 1)
        eps = (x - a.sqrt() * x0) / (1 - a).sqrt()
        sigma = eta * ((1 - a_prev) / (1 - a) * (1 - a / a_prev)).clamp(min=0).sqrt()
        direction = (1 - a_prev - sigma ** 2).clamp(min=0).sqrt() * eps
        return a_prev.sqrt() * x0 + direction, sigma
