"""Networks of the warm-start Q-learning agents (SAC core, CQL/Cal-QL, IQL).

Symbols: ``B`` batch, ``Do`` observation size, ``Da`` action size, ``N`` critic ensemble
size, ``H`` hidden width. Everything works in normalised spaces: normalised observations
in, actions in ``[-1, 1]`` (tanh-squashed).

The critic ensemble stores the weights of its ``N`` heads stacked, ``(N, Din, Dout)``,
and evaluates all heads in ONE batched pass (``torch.baddbmm``), as RLPD/WSRL do with
``jax.vmap`` (github.com/ikostrikov/rlpd, github.com/zhouzypaul/wsrl). Head ``i`` computes
exactly what an independent :class:`robotrl.networks.MLP` with the same weights would
(``EnsembleMLP.head`` exports it; the tests check the equality).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from robotrl.networks import MLP, activation, scale_last_layer_, squashed_gaussian

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class EnsembleLinear(nn.Module):
    """``N`` independent linear layers: ``(N, B, Din) -> (N, B, Dout)`` in one ``baddbmm``.

    Weights are initialised like ``nn.Linear`` (Kaiming-uniform, fan-in bias), per head.
    """

    def __init__(self, n: int, in_dim: int, out_dim: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(n, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, B, Din) -> (N, B, Dout)``."""
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate affine per head: ``(N, B, H) -> (N, B, H)``."""

    def __init__(self, n: int, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(n, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, (self.dim,), eps=self.eps), self.weight)


class EnsembleMLP(nn.Module):
    """``N`` MLPs evaluated together: ``(B, Din)`` or ``(N, B, Din)`` -> ``(N, B, Dout)``.

    Args:
        n: ``N`` heads.
        in_dim, out_dim: ``Din``, ``Dout``.
        hidden: hidden widths.
        act: activation name.
        layer_norm: LayerNorm after each hidden linear layer (RLPD/WSRL).
        final_init_scale: scale of the last layer's initial weights, bias zeroed (WSRL 1e-2).
    """

    def __init__(self, n: int, in_dim: int, out_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 layer_norm: bool = False, final_init_scale: float | None = None):
        super().__init__()
        self.n, self.in_dim, self.out_dim = n, in_dim, out_dim
        self.fused = True  # False: always the plain module-by-module pass (reference for the tests)
        self.hidden, self.act_name, self.layer_norm = list(hidden), act, layer_norm
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers.append(EnsembleLinear(n, d, h))
            if layer_norm:
                layers.append(EnsembleLayerNorm(n, h))
            layers.append(nn.ReLU(inplace=True) if act == "relu" else activation(act))  # in place: no extra copy
            d = h
        layers.append(scale_last_layer_(EnsembleLinear(n, d, out_dim), final_init_scale))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, Din)`` (shared by all heads) or ``(N, B, Din)`` -> ``(N, B, Dout)``.

        The float32 ReLU MLP, with or without LayerNorm (every critic: SAC/CQL/Cal-QL/IQL,
        and the LayerNorm ones of RLPD/WSRL/ResFiT), runs as ONE autograd node with a
        hand-written backward (:class:`_EnsembleReluMLP`): same values and gradients up to
        float rounding, fewer and cheaper kernels. Other configurations (other activations,
        bfloat16 autocast) use ``self.net``.
        """
        if x.ndim == 2:
            x = x.unsqueeze(0).expand(self.n, -1, -1)
        if self._fast_ok(x):
            params = [t for m in self.net if isinstance(m, EnsembleLinear) for t in (m.weight, m.bias)]
            norms = [m for m in self.net if isinstance(m, EnsembleLayerNorm)]
            params += [t for m in norms for t in (m.weight, m.bias)]
            return _EnsembleReluMLP.apply(x, norms[0].eps if norms else None, *params)
        return self.net(x)

    def _fast_ok(self, x: torch.Tensor) -> bool:
        return (self.fused and self.act_name == "relu" and x.dtype == torch.float32
                and self.net[0].weight.dtype == torch.float32 and not torch.is_autocast_enabled(x.device.type))

    @torch.no_grad()
    def head(self, i: int) -> MLP:
        """Head ``i`` as an independent :class:`robotrl.networks.MLP` with copied weights."""
        mlp = MLP(self.in_dim, self.out_dim, self.hidden, act=self.act_name, layer_norm=self.layer_norm)
        src = [m for m in self.net if isinstance(m, (EnsembleLinear, EnsembleLayerNorm))]
        dst = [m for m in mlp.net if isinstance(m, (nn.Linear, nn.LayerNorm))]
        for s, d in zip(src, dst):
            if isinstance(s, EnsembleLinear):
                d.weight.copy_(s.weight[i].T)
                d.bias.copy_(s.bias[i, 0])
            else:
                d.weight.copy_(s.weight[i, 0])
                d.bias.copy_(s.bias[i, 0])
        return mlp.to(self.net[0].weight.device)


class _BufferPool:
    """Recycles the large ``(N, M, H)`` activation/gradient buffers of :class:`_EnsembleReluMLP`.

    A buffer enters the pool only once the backward that used it has finished (it is
    internal: never returned to the caller), and leaves it for the next forward/backward
    of the same shape, so a training step reuses last step's pages instead of faulting
    in fresh ones from the OS (~4 ms per 16 MB buffer on CPU). Bounded: a few shapes,
    a few buffers each.
    """

    def __init__(self, max_keys: int = 4, per_key: int = 3):
        self.free: dict[tuple, list[torch.Tensor]] = {}
        self.max_keys, self.per_key = max_keys, per_key

    def take(self, shape, like: torch.Tensor) -> torch.Tensor:
        key = (tuple(shape), like.dtype, like.device)
        bufs = self.free.get(key)
        return bufs.pop() if bufs else torch.empty(shape, dtype=like.dtype, device=like.device)

    def give(self, t: torch.Tensor) -> None:
        if t.numel() < (1 << 16) or not t.is_contiguous() or t._base is not None:
            return  # small buffers: the allocator is cheap enough
        key = (tuple(t.shape), t.dtype, t.device)
        bufs = self.free.setdefault(key, [])
        if len(bufs) < self.per_key:
            bufs.append(t)
        while len(self.free) > self.max_keys:  # drop the oldest shape
            self.free.pop(next(iter(self.free)))


_POOL = _BufferPool()


class _EnsembleReluMLP(torch.autograd.Function):
    """``N`` stacked ReLU MLPs ``(N, M, Din) -> (N, M, Dout)`` as one autograd node (float32),
    optionally with a per-head LayerNorm after every hidden linear layer (RLPD/WSRL/ResFiT critics).

    Inputs: ``x``, the LayerNorm ``eps`` (``None``: no LayerNorm), the ``weight (N, Din, Dout),
    bias (N, 1, Dout)`` of every linear layer, then (LayerNorm only) the ``weight, bias (N, 1, H)``
    of every hidden layer's LayerNorm. Computes exactly the layers of :class:`EnsembleMLP`
    (``baddbmm``, LayerNorm ``(z - μ) / sqrt(σ² + eps) · γ + β``, in-place ReLU) and their
    gradients, but:

    - a scalar head (``Dout = 1``, every critic) is a matrix-vector product per head
      (``mv``) forward and backward instead of a degenerate ``baddbmm``/``bmm`` with one
      column, about 10x cheaper on CPU (the ``bmm`` GEMV/outer-product paths are slow);
    - the ReLU masks are applied in place to the incoming gradient, and the scalar
      head's input gradient is written over the (then dead) last hidden activation: no
      extra ``(N, M, H)`` buffers, fewer fresh allocations and page faults; hence the
      backward runs once per forward (a second ``retain_graph`` backward raises);
    - LayerNorm runs as ATen's fused kernels (``native_layer_norm`` without affine, its
      backward) with the per-head affine applied around them, in place where the buffers allow;
    - nothing is computed for inputs that need no gradient (the first layer's input).
    """

    @staticmethod
    def forward(ctx, x, eps, *params):
        n_lin = (len(params) + 2) // 4 if eps is not None else len(params) // 2  # LayerNorm: 2 more per hidden layer
        lin, lns = params[: 2 * n_lin], params[2 * n_lin:]
        ws, bs = lin[0::2], lin[1::2]
        hs, zs, stats = [x], [], []
        h = x
        pooled = any(ctx.needs_input_grad)  # a backward will run and hand the buffers back
        for i, (w, b) in enumerate(zip(ws[:-1], bs[:-1])):
            shape = (w.shape[0], h.shape[1], w.shape[2])
            z = torch.baddbmm(b, h, w, out=_POOL.take(shape, h)) if pooled else torch.baddbmm(b, h, w)
            if eps is not None:  # y = LN(z)·γ + β (x̂ kept for γ's gradient, z and the statistics for LN's backward)
                xhat, mean, rstd = torch.native_layer_norm(z, [z.shape[-1]], None, None, eps)
                h = torch.addcmul(lns[2 * i + 1], xhat, lns[2 * i], out=_POOL.take(shape, z) if pooled else None)
                zs.append(z)
                stats += [xhat, mean, rstd]
            else:
                h = z
            h.relu_()
            hs.append(h)
        w, b = ws[-1], bs[-1]
        if w.shape[-1] == 1:
            out = torch.stack([torch.mv(h[i], w[i, :, 0]) for i in range(w.shape[0])]).unsqueeze(-1).add_(b)
        else:
            out = torch.baddbmm(b, h, w)
        ctx.save_for_backward(*hs, *ws, *zs, *stats, *lns[0::2])
        ctx.n_layers, ctx.consumed, ctx.eps = len(ws), False, eps
        return out

    @staticmethod
    def _ln_backward(g_y: torch.Tensor, z: torch.Tensor, xhat: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                     gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients through ``LN(z)·γ + β`` from ``g_y (N, M, H)``: ``(g_z, g_γ, g_β)`` (``g_y`` is overwritten)."""
        g_beta = g_y.sum(1, keepdim=True)
        g_gamma = (g_y * xhat).sum(1, keepdim=True)
        g_z = torch.ops.aten.native_layer_norm_backward(g_y.mul_(gamma), z, [z.shape[-1]], mean, rstd, None, None,
                                                        [True, False, False])[0]
        return g_z, g_gamma, g_beta

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_out):
        if ctx.consumed:  # the saved activations were overwritten by the first backward
            raise RuntimeError("EnsembleMLP's fused backward runs once per forward (no retain_graph re-use)")
        ctx.consumed = True
        L, ln = ctx.n_layers, ctx.eps is not None
        saved = ctx.saved_tensors
        hs, ws = saved[:L], saved[L:2 * L]
        zs = saved[2 * L:3 * L - 1] if ln else ()
        stats = saved[3 * L - 1:6 * L - 4] if ln else ()
        gammas = saved[6 * L - 4:] if ln else ()
        need = ctx.needs_input_grad
        grads: list[torch.Tensor | None] = [None] * (2 + 2 * L + (2 * (L - 1) if ln else 0))
        g_out = g_out.contiguous()
        from_bmm = False  # whether g_h lives in a buffer taken from the pool in this backward
        for layer in range(L - 1, -1, -1):
            h_in, w = hs[layer], ws[layer]
            if layer == L - 1 and w.shape[-1] == 1:
                g = g_out[..., 0]  # (N, M)
                if need[2 + 2 * layer]:
                    grads[2 + 2 * layer] = torch.bmm(g.unsqueeze(1), h_in).transpose(1, 2)
                if need[3 + 2 * layer]:
                    grads[3 + 2 * layer] = g.sum(1).view(-1, 1, 1)
                if layer > 0:  # g ⊗ w masked by the ReLU below, written over h_in (dead after this)
                    g_h = h_in.sign_().mul_(g.unsqueeze(-1)).mul_(w.transpose(1, 2))
                    h_in = None
                elif need[0]:
                    g_h = g.unsqueeze(-1) * w.transpose(1, 2)  # outer product, (N, M, Din)
            else:
                g = g_out if layer == L - 1 else g_h
                if need[2 + 2 * layer]:
                    grads[2 + 2 * layer] = torch.bmm(h_in.transpose(1, 2), g)
                if need[3 + 2 * layer]:
                    grads[3 + 2 * layer] = g.sum(1, keepdim=True)
                if layer > 0:
                    g_h = torch.bmm(g, w.transpose(1, 2), out=_POOL.take((g.shape[0], g.shape[1], w.shape[1]), g))
                elif need[0]:
                    g_h = torch.bmm(g, w.transpose(1, 2))
                if from_bmm:
                    _POOL.give(g)  # the pooled gradient buffer of this layer's output is dead now
                from_bmm = layer > 0
            if layer > 0 and h_in is not None:  # ReLU of the layer below: zero the gradient where its output is 0
                torch.ops.aten.threshold_backward.grad_input(g_h, h_in, 0.0, grad_input=g_h)
            if layer > 0 and ln:  # the layer below's LayerNorm: gradient w.r.t. its linear output z
                k = layer - 1
                g_z, g_gamma, g_beta = _EnsembleReluMLP._ln_backward(g_h, zs[k], *stats[3 * k:3 * k + 3], gammas[k])
                grads[2 + 2 * L + 2 * k], grads[3 + 2 * L + 2 * k] = g_gamma, g_beta
                if from_bmm:
                    _POOL.give(g_h)
                g_h, from_bmm = g_z, False
        if need[0]:
            grads[0] = g_h
        for t in (*hs[1:], *zs):
            if t is not None:
                _POOL.give(t)
        return tuple(grads)


class EnsembleCritic(nn.Module):
    """``Q_1..Q_N(s, a)``: ``obs (B, Do), action (B, Da) -> (N, B)`` in one batched pass.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        n: ``N`` heads (WSRL/RLPD 10, SAC/CQL 2).
        hidden, act, layer_norm, final_init_scale: see :class:`EnsembleMLP`.
    """

    def __init__(self, obs_dim: int, action_dim: int, n: int = 2, hidden: Sequence[int] = (256, 256), *,
                 act: str = "relu", layer_norm: bool = False, final_init_scale: float | None = None):
        super().__init__()
        self.n = n
        self.net = EnsembleMLP(n, obs_dim + action_dim, 1, hidden, act=act, layer_norm=layer_norm,
                               final_init_scale=final_init_scale)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``(B, Do), (B, Da) -> (N, B)`` (float32 also under a bfloat16 autocast)."""
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1).float()

    @torch.no_grad()
    def set_output_bias_(self, value: float) -> None:
        """Set every head's output bias to ``value`` (reward units): ``Q_i(s, a) = f_i(s, a) + value``."""
        self.net.net[-1].bias.fill_(float(value))


class TanhGaussianActor(nn.Module):
    """SAC actor: ``obs (B, Do) -> tanh(N(mean, std))`` actions in ``[-1, 1]`` with log-probs.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        hidden, act, layer_norm: trunk architecture.
        final_init_scale: initial scale of the output layer (WSRL 1e-2).
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 layer_norm: bool = False, final_init_scale: float | None = None):
        super().__init__()
        self.action_dim = action_dim
        self.net = MLP(obs_dim, 2 * action_dim, hidden, act=act, layer_norm=layer_norm,
                       final_init_scale=final_init_scale)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, Do) -> (mean (B, Da), log_std (B, Da))`` of the pre-tanh Gaussian (float32)."""
        mean, log_std = self.net(obs).float().split(self.action_dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample: ``(B, Do) -> (action (B, Da) in [-1, 1], log_prob (B,))``.

        The log-prob includes the tanh change of variables (numerically stable form
        ``2(log 2 - u - softplus(-2u))``, as in SAC's reference code).
        """
        mean, log_std = self(obs)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return squashed_gaussian(mean, log_std, eps)

    def sample_n(self, obs: torch.Tensor, n: int,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` samples per state from ONE actor pass: ``(B, Do) -> ((n, B, Da), (n, B))`` (CQL's action sets)."""
        mean, log_std = self(obs)
        eps = torch.randn((n, *mean.shape), generator=generator, device=mean.device, dtype=mean.dtype)
        return squashed_gaussian(mean, log_std, eps)

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """``log π(action | obs)`` for actions in ``(-1, 1)``: ``(B, Do), (B, Da) -> (B,)`` (IQL's AWR)."""
        mean, log_std = self(obs)
        a = action.clamp(-1 + eps, 1 - eps)
        u = torch.atanh(a)
        z = (u - mean) * torch.exp(-log_std)
        lp = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return lp - torch.log1p(-a.pow(2) + eps).sum(-1)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``tanh(mean)``: ``(B, Do) -> (B, Da)``."""
        return torch.tanh(self(obs)[0])
