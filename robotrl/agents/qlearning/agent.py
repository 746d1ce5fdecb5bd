"""The off-policy core shared by every warm-start Q-learning mode: SAC + ensemble critic,
with CQL / Cal-QL conservatism and IQL as alternative update rules.

``algo``:

- ``"sac"``  — SAC (Haarnoja et al. 2018) with RLPD/WSRL's ensemble: ``N`` heads in one
  batched pass, optional LayerNorm, target = min over ``target_subset`` random target
  heads (github.com/ikostrikov/rlpd, github.com/zhouzypaul/wsrl). WSRL, RLPD and PORL
  online fine-tuning are this mode with different configs.
- ``"cql"``  — SAC + CQL(H) penalty (Kumar et al. 2020; JaxCQL's ``conservative_sac``).
- ``"calql"`` — CQL whose policy-action values are floored at the MC return-to-go
  ``V^μ(s)`` (Nakamoto et al. 2023, github.com/nakamotoo/Cal-QL).
- ``"iql"``  — implicit Q-learning (Kostrikov et al. 2021): expectile ``V``, ``Q`` from
  ``V(s')``, advantage-weighted policy extraction.

UTD with WSRL/RLPD's batch split: one :meth:`QLAgent.update` call receives ``utd·B``
transitions, splits them into ``critic_utd`` interleaved minibatches (so an exactly
mixed offline/online batch stays exactly mixed in every minibatch), runs one critic
update on each, then one actor + temperature update on the last minibatch. ``utd`` means
critic updates per env step (:mod:`robotrl.utd`), on states and on cameras alike.

Cameras are an option of the observation (``image_shapes``; the flat kwargs of
:class:`~robotrl.vision.frontend.ObservationFrontend`), not another class: the policy then
holds a :class:`~robotrl.vision.encoders.PixelEncoder` over ``{camera: uint8 (B, H, W, k·C)}``
(``Batch.images()``) plus the normalised state, and the critic, actor and value read its
features ``z (B, F)`` instead of the normalised state (DrQ, Kostrikov et al. 2020; SERL /
HIL-SERL's pixel RLPD, Luo et al. 2024):

- the critic's loss trains the encoder (its parameters are in the critic's optimizer); the
  TD target reads a Polyak target encoder (``tau``, moved with the target critic after every
  critic update) on the next frames;
- the actor and temperature read ``z`` of the last critic minibatch with the gradient stopped
  (the actor never trains the encoder);
- ``augment_pad > 0``: DrQ's random shift inside the encoder on every encoded training batch,
  frames and next frames;
- ``freeze_encoder`` keeps a pretrained trunk fixed (a frozen trunk is its own target);
  with ``augment_pad=0`` and ``cache_features`` its output is computed once per stored frame
  (:class:`robotrl.vision.cache.FrozenFeatureCache`, keyed by ``Batch.extras["obs_uid"]``);
- :meth:`QLAgent.load_parts` has an ``encoder`` part (pixel WSRL from pixel Cal-QL/CQL).
  IQL on cameras is not built (its value and critic losses would both train the encoder).

Rewards, discounts and MC returns are used as the batch gives them: the reward
scale/bias is applied once, in the data layer (:mod:`robotrl.experiment`), to offline
data, online data and hence MC returns alike.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from robotrl.agent import FRONTEND_ARCHITECTURE, OffPolicyAgentBase
from robotrl.agents.qlearning import loss as L
from robotrl.agents.qlearning.networks import EnsembleCritic
from robotrl.agents.qlearning.policy import QLPolicy
from robotrl.agents.qlearning.sung import Sung, SungConfig, conservative_rows, optimistic_choice
from robotrl.agents.retention import Retention, RetentionConfig

from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import ConfigError
from robotrl.networks import ValueNet, polyak_update_
from robotrl.utils import native_bf16, set_generator_state
from robotrl.vision.cache import FrozenFeatureCache
from robotrl.vision.stack import FrameHistory

ALGOS = ("sac", "cql", "calql", "iql")
#: parts a warm start can load (``trainer.init_parts``), :meth:`QLAgent.load_parts`
PARTS = ("encoder", "policy", "critic", "temperature", "value", "optimizers")


class QLAgent(OffPolicyAgentBase):
    """SAC / CQL / Cal-QL / IQL over one ensemble critic and one tanh-Gaussian actor.

    Args:
        obs_dim, action_dim: ``Do``, ``Da`` (derived by the trainer).
        obs_normalizer, action_scaler: dataset statistics / env bounds (go in the policy).
        algo: ``"sac" | "cql" | "calql" | "iql"``.
        hidden, critic_hidden: actor / critic hidden widths.
        num_critics: ``N`` heads; ``target_subset``: heads drawn for the target min
            (``None`` = all ``N``).
        critic_layer_norm, actor_layer_norm, final_init_scale, act, obs_clip: architecture.
        actor_lr, critic_lr, alpha_lr, value_lr: Adam learning rates.
        tau: Polyak rate of the target critic.
        init_alpha: initial SAC temperature; ``fixed_alpha`` disables its tuning.
        target_entropy_per_dim: target entropy is this times ``Da`` (SAC/WSRL -1, RLPD -0.5).
        backup_entropy: subtract ``α log π(a'|s')`` in the TD target (RLPD yes, WSRL/CQL no).
        actor_q: ``"min"`` over all ``N`` heads in the actor loss (SAC, CQL/Cal-QL, WSRL) or
            ``"mean"`` (RLPD).
        critic_utd: critic minibatches per :meth:`update` (the batch is split into them); the
            configs set it to ``trainer.utd``, the one UTD knob (:mod:`robotrl.utd`).
        critic_warmup_updates: the first this many updates train critics only (PORL).
        cql_alpha, cql_n_actions, cql_temperature, cql_clip_diff: CQL(H) settings.
        iql_expectile, iql_beta, iql_max_weight: IQL's ``τ``, ``β`` and weight clip.
        max_grad_norm: max gradient norm per network (``None``: off).
        matmul_dtype: ``"float32"`` or ``"bfloat16"``: the network passes of an update run
            under a bfloat16 autocast (matmuls in bf16, weights, optimizer state, losses,
            targets and the deployed policy stay float32; JAX's default TPU matmul
            precision that RLPD/WSRL ran with is also bf16). About 2-4x faster matmuls on
            CPUs with AVX512-BF16/AMX and on GPUs; Q-values carry ~3 significant digits.
        device: torch device; seed: seed of action sampling and target-head draws.
        critic_init: ``"zero"`` (reference: zero-centred outputs) or ``"data"``: the trainer calls
            :meth:`init_from_data` before the first offline update, which starts every head at the
            data's mean Monte-Carlo return (a deviation from Cal-QL/CQL; see that method for why).
        online_algo: the update rule from the trainer's online phase on (``None``: ``algo``);
            ``algo="calql", online_algo="sac"`` is WSRL's pretrain-then-fine-tune in one run.
        image_shapes: the observation's cameras ``{key: (H, W, C)}`` (``None``: a state agent, whose
            networks, numbers and checkpoints are exactly those of a build without these options).
            ``obs_dim`` is then the flat state beside the frames (0: frames only; ``obs_normalizer``
            may then be ``None``).
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad, state_layout, frame_stack:
            the camera encoder and observation spec, as
            :class:`~robotrl.vision.frontend.ObservationFrontend` (ignored without cameras; random
            shift ``augment_pad = 4`` by default, DrQ/SERL).
        cache_features: cache a frozen trunk's output per stored frame (needs ``freeze_encoder``,
            ``augment_pad=0``, ``frame_stack=1``); feature_cache_size: frames kept per camera.
        retention: knowledge retention in the online phase (:mod:`robotrl.agents.retention`: BC on the
            pretraining data, a KL/action-distance penalty toward the policy frozen at :meth:`start_online`,
            offline replay; ``None``: off, the updates unchanged). With cameras the snapshot holds its own copy
            of the encoder and each term runs both policies through their own encoders on the frames
            (:meth:`_retention_loss`).
        sung: SUNG's uncertainty-guided online phase (:mod:`robotrl.agents.qlearning.sung`: a density VAE,
            optimistic exploration, the CQL penalty on the most uncertain rows; ``None``: off, the updates
            unchanged). State agents whose online rule is SAC only.

    Attributes:
        frame_stack: ``k`` frames per camera the policy reads (1 for a state agent): the replay
            buffer stacks that many.

    Raises:
        ValueError: unknown ``algo`` / ``online_algo`` / ``actor_q``, an IQL/SAC-family switch,
            ``target_subset > num_critics``, or IQL on cameras.
        ConfigError: ``cache_features`` without a frozen, unshifted, unstacked encoder (names the
            settings to change); a bad retention setting; SUNG on a camera agent,
            with a non-SAC online rule, or a bad SUNG setting.
    """

    ARCHITECTURE_KEYS = ("hidden", "critic_hidden", "num_critics", "critic_layer_norm", "actor_layer_norm", "act",
                         "obs_clip", *FRONTEND_ARCHITECTURE)

    def __init__(
        self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer | None,
        action_scaler: ActionScaler, algo: str = "sac", hidden: Sequence[int] = (256, 256), critic_hidden: Sequence[int] = (256, 256),
        num_critics: int = 2, target_subset: int | None = None, critic_layer_norm: bool = False,
        actor_layer_norm: bool = False, final_init_scale: float | None = None, act: str = "relu",
        obs_clip: float | None = 10.0, actor_lr: float = 3e-4, critic_lr: float = 3e-4, alpha_lr: float = 3e-4,
        value_lr: float = 3e-4, tau: float = 5e-3, init_alpha: float = 1.0, fixed_alpha: float | None = None,
        target_entropy_per_dim: float = -1.0, backup_entropy: bool = False, actor_q: str = "mean",
        critic_utd: int = 1, critic_warmup_updates: int = 0, cql_alpha: float = 5.0, cql_n_actions: int = 10,
        cql_temperature: float = 1.0, cql_clip_diff: Sequence[float] | None = None, iql_expectile: float = 0.7,
        iql_beta: float = 3.0, iql_max_weight: float = 100.0, max_grad_norm: float | None = None,
        matmul_dtype: str = "float32", device: str | torch.device = "cpu", seed: int = 0,
        online_algo: str | None = None, critic_init: str = "zero",
        image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "drq", pooling: str = "flatten",
        feature_dim: int = 50, channels: int = 32, encoder_weights: str | None = None, freeze_encoder: bool = False,
        augment_pad: int = 4, state_layout: str | None = None, frame_stack: int = 1, cache_features: bool = False,
        feature_cache_size: int = 100_000, retention: RetentionConfig | Mapping | None = None,
        sung: SungConfig | Mapping | None = None,
    ):
        if matmul_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"matmul_dtype must be 'float32' or 'bfloat16', got {matmul_dtype!r}")
        for a in (algo, online_algo or algo):
            if a not in ALGOS:
                raise ValueError(f"unknown algo {a!r}; choose one of {ALGOS}")
        if (online_algo == "iql") != (algo == "iql") and online_algo is not None:
            raise ValueError(f"online_algo {online_algo!r} cannot follow algo {algo!r}: IQL and the SAC family "
                             "train different networks")
        if critic_init not in ("zero", "data"):
            raise ValueError(f"critic_init must be 'zero' (reference) or 'data' (output bias at the data's mean "
                             f"Monte-Carlo return), got {critic_init!r}")
        self.critic_init = critic_init
        if actor_q not in ("mean", "min"):
            raise ValueError(f"actor_q must be 'mean' or 'min', got {actor_q!r}")
        if target_subset is not None and not 1 <= target_subset <= num_critics:
            raise ValueError(f"target_subset={target_subset} must be in [1, num_critics={num_critics}]")
        if image_shapes and "iql" in (algo, online_algo):
            raise ValueError("algo='iql' on cameras is not built (its value and critic losses would both train the "
                             "encoder): use sac, cql or calql, or drop the cameras")
        self.device = torch.device(device)
        self.algo, self.action_dim = algo, int(action_dim)
        self.online_algo = online_algo
        self.critic_layer_norm = bool(critic_layer_norm)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        with torch.random.fork_rng(devices=[]):  # seeded network initialisation, global RNG untouched
            torch.manual_seed(seed)
            self.policy = QLPolicy(obs_dim, action_dim, hidden, act=act, layer_norm=actor_layer_norm,
                                   final_init_scale=final_init_scale, obs_clip=obs_clip, augment_pad=augment_pad,
                                   image_shapes=image_shapes, encoder=encoder, pooling=pooling,
                                   feature_dim=feature_dim, channels=channels, encoder_weights=encoder_weights,
                                   freeze_encoder=freeze_encoder, state_layout=state_layout, frame_stack=frame_stack)
            width = self.policy.out_dim  # Do for a state agent, the encoder's F with cameras
            self.critic = EnsembleCritic(width, action_dim, num_critics, critic_hidden, act=act,
                                         layer_norm=critic_layer_norm, final_init_scale=final_init_scale)
            self.value = ValueNet(width, critic_hidden, act=act, layer_norm=critic_layer_norm) \
                if algo == "iql" else None
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device)
        self.critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._init_cameras(cache_features, feature_cache_size)
        self.log_alpha = torch.tensor(float(np.log(fixed_alpha or init_alpha)), device=self.device, requires_grad=True)
        if self.value is not None:
            self.value.to(self.device)
        self.n_subset = num_critics if target_subset is None else int(target_subset)
        self.tau, self.fixed_alpha = tau, fixed_alpha
        self.target_entropy = float(target_entropy_per_dim) * action_dim
        self.backup_entropy, self.actor_q = backup_entropy, actor_q
        self.critic_utd, self.critic_warmup_updates = int(critic_utd), int(critic_warmup_updates)
        self.cql = dict(alpha=cql_alpha, n=int(cql_n_actions), temperature=cql_temperature,
                        clip=tuple(cql_clip_diff) if cql_clip_diff is not None else (-float("inf"), float("inf")))
        self.iql = dict(expectile=iql_expectile, beta=iql_beta, max_weight=iql_max_weight)
        self.max_grad_norm = max_grad_norm
        self.bf16 = matmul_dtype == "bfloat16"
        if self.bf16 and native_bf16(self.device) is False:
            warnings.warn(f"matmul_dtype=bfloat16 on {self.device}, which has no native bf16 matmuls (no AVX512-BF16/"
                          "AMX on this CPU): PyTorch emulates them, several times slower than float32 "
                          "(robotrl.utils.native_bf16); set agent.model.matmul_dtype=float32", RuntimeWarning, stacklevel=2)
        self.lrs = dict(actor=actor_lr, critic=critic_lr, alpha=alpha_lr, value=value_lr)
        self._make_optimizers()
        self.num_updates = 0
        self.retention = Retention(retention, squash=True)
        self._init_sung(sung, obs_dim, seed, bool(image_shapes))

    def _init_sung(self, sung: Mapping | None, obs_dim: int, seed: int, cameras: bool) -> None:
        """SUNG's parts (:class:`~robotrl.agents.qlearning.sung.Sung`; nothing is built when off).

        Raises:
            ConfigError: SUNG on a camera agent or with an online rule other than SAC, or a bad SUNG setting.
        """
        self.sung = Sung(sung, obs_dim, self.action_dim, device=self.device, seed=seed)
        if not self.sung.enabled:
            return
        if cameras:
            raise ConfigError("agent.model.sung is built for state agents (its VAE reads the state); this run has "
                              "cameras: drop agent.model.sung or obs=pixels")
        if (self.online_algo or self.algo) != "sac":
            raise ConfigError(f"agent.model.sung adds its own conservative term to SAC online; the online rule here is "
                              f"{self.online_algo or self.algo!r}: set agent.model.online_algo=sac (from a CQL/Cal-QL "
                              "run) or agent.model.algo=sac (warm-started from a CQL/Cal-QL/IQL checkpoint: agent=sung)")

    def _init_cameras(self, cache_features: bool, feature_cache_size: int) -> None:
        """The camera parts (module doc): target encoder, the critic's parameter list (encoder first), Polyak
        pairs, exploration frame history and the optional frozen-feature cache; for a state agent the critic's
        parameters and the target critic alone.

        Raises:
            ConfigError: ``cache_features`` without a frozen, unshifted, unstacked encoder.
        """
        enc = self.policy.encoder
        self.frame_stack = self.policy.frame_stack
        self.explore_frames = FrameHistory(self.frame_stack)
        self.target_encoder = None if enc is None else copy.deepcopy(enc).requires_grad_(False)
        if enc is not None and enc.freeze:  # a frozen trunk is its own target: cached features serve both passes
            self.target_encoder.trunks = enc.trunks
        # every encoder parameter is in the critic's optimizer (a frozen trunk's get no gradient, so Adam skips
        # them): the optimizer state has one layout whether the trunk is frozen or not
        self._critic_params = [*(enc.parameters() if enc is not None else ()), *self.critic.parameters()]
        pairs = [(t, s) for t, s in zip([*self.critic_target.parameters(),
                                         *(self.target_encoder.parameters() if enc is not None else ())],
                                        [*self.critic.parameters(), *(enc.parameters() if enc is not None else ())])
                 if t is not s]  # less a shared frozen trunk: never written, so its cached features stay valid
        self._polyak = ([t for t, _ in pairs], [s for _, s in pairs])
        self.feature_cache: FrozenFeatureCache | None = None
        if cache_features:
            if enc is None:
                raise ConfigError("agent.model.cache_features=true caches camera features, and this run has no "
                                  "cameras: drop cache_features")
            if self.frame_stack > 1:
                raise ConfigError("agent.model.cache_features=true caches features per stored frame, and with "
                                  f"obs.frame_stack={self.frame_stack} the encoder reads stacks of frames: "
                                  "set obs.frame_stack=1 or drop cache_features")
            if not enc.cacheable():
                raise ConfigError(
                    "agent.model.cache_features=true caches a frozen encoder's features per stored frame: set "
                    f"agent.model.freeze_encoder=true and agent.model.augment_pad=0 (now freeze_encoder={enc.freeze}, "
                    f"augment_pad={enc.augment_pad}; a random shift changes a frame's features every update), "
                    "or drop cache_features")
            self.feature_cache = FrozenFeatureCache(enc, feature_cache_size)

    @torch.no_grad()
    def init_from_data(self, buffer) -> float | None:
        """Before the first offline update of a fresh run (``critic_init="data"``): start every critic
        head, and its target, at the data's mean Monte-Carlo return.

        With the reference's zero-centred output and τ = 0.005, γ = 0.99, the critic reaches the scale
        of the data's returns only through repeated target updates (the error shrinks ~γ per ~1/τ
        updates): on PointMaze with Cal-QL's 10r − 5 rewards, Q − MC was still +290 after 5k updates
        and +64 after 40k, and WSRL fine-tuning from a critic that far above its returns first spends
        thousands of online steps dragging Q down. Starting at the mean return leaves only the spread
        around it to learn. Returns the bias set (reward units), or ``None`` when nothing was done
        (``critic_init="zero"`` or a buffer without returns).
        """
        if self.critic_init != "data" or getattr(buffer, "mc_returns", None) is None:
            return None
        returns = np.asarray(buffer.mc_returns[: buffer.size], dtype=np.float64)
        returns = returns[np.isfinite(returns)]
        if returns.size == 0:
            return None
        value = float(returns.mean())
        self.critic.set_output_bias_(value)
        self.critic_target.set_output_bias_(value)
        return value

    # ------------------------------------------------------------------ setup
    def _make_optimizers(self) -> None:
        def adam(params, lr):  # fused kernels: one pass over all tensors per step (CPU and CUDA)
            return torch.optim.Adam(params, lr=lr, fused=True)

        self.actor_opt = adam(self.policy.actor.parameters(), self.lrs["actor"])
        self.critic_opt = adam(self._critic_params, self.lrs["critic"])
        self.alpha_opt = adam([self.log_alpha], self.lrs["alpha"])
        self.value_opt = adam(self.value.parameters(), self.lrs["value"]) if self.value else None

    @property
    def actor(self):
        return self.policy.actor

    @property
    def has_cameras(self) -> bool:
        """Whether the agent learns from camera frames (``image_shapes`` given)."""
        return self.policy.encoder is not None

    def start_online(self) -> None:
        """Called by the trainer when its online phase starts (also on resume): from then on
        the updates follow ``online_algo`` (e.g. WSRL in one run: Cal-QL offline, SAC online)."""
        if self.online_algo is not None:
            if self.online_algo == "sac" and self.algo != "sac":
                self._check_warm_start_network()
            self.algo = self.online_algo
        self.retention.start(self.policy)  # the frozen pretrained policy (kept from the checkpoint on resume)
        self._sung_start()

    def _sung_start(self) -> None:
        """SUNG's online start: its VAE pretrained on the offline data (once; a resume keeps the saved one)."""
        if self.sung.enabled:
            p = self.policy
            self.sung.start(lambda b: (p.obs_normalizer(b.observations),
                                       p.action_scaler.normalize(b.actions).clamp(-1.0, 1.0)), self.gen)

    def load_pretrained(self, path: str) -> None:
        """The whole pretrained agent state (:meth:`robotrl.agent.AgentBase.load_pretrained`); a retention snapshot
        saved in it is dropped: this run's retention freezes the loaded policy at :meth:`start_online`."""
        super().load_pretrained(path)
        self.retention.reset()

    def attach_offline_data(self, buffer) -> None:
        """The pretraining data for knowledge retention (:mod:`robotrl.agents.retention`)."""
        self.retention.attach_data(buffer)
        self.sung.attach_data(buffer)  # SUNG's VAE pretraining

    def _retention_loss(self, obs: torch.Tensor,
                        b: Batch | None = None) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """The retention terms for the actor step on normalised states ``obs (B, Do)`` (``None`` when off or
        before the online start).

        With cameras ``obs`` are the live encoder's features ``(B, F)`` and ``b`` is the minibatch they came from:
        each policy — the live one and the snapshot ``π₀``, which holds its own copy of the encoder as it was at
        :meth:`start_online` — reads its own encoder's features of ``b``'s frames (stacked as the buffer gives
        them) and normalised state, without gradient into either encoder (the actor never trains the encoder)
        and in eval mode (no random shift: the terms compare the two policies on the observation itself); a
        frozen trunk's cached stems serve both (``obs_uid``; the snapshot's frozen trunk is the live one's
        copy). Pretraining rows (``bc``, ``kl_states="offline"``) are encoded in full (their ids are not the
        online buffer's).
        """
        if self.retention.reference is None:
            return None, {}
        p = self.policy
        if not self.has_cameras:
            def gaussian(pol, x):
                mean, log_std = pol.actor(x)
                return mean, log_std.exp()

            def prepare(b):
                return p.obs_normalizer(b.observations), p.action_scaler.normalize(b.actions).clamp(-1.0, 1.0)

            return self.retention.actor_loss(p, gaussian=gaussian, log_prob=self.actor.log_prob, prepare=prepare,
                                             states=obs, batch_size=obs.shape[0])
        if b is None:
            raise ValueError("a camera agent's retention terms need the minibatch of the features (b=)")

        def features(pol, x):
            images, state, uids = x
            with torch.no_grad():
                return self._encode(pol.encoder, images, pol.normalized_state(state), uids)

        def camera_gaussian(pol, x):
            mean, log_std = pol.actor(features(pol, x))
            return mean, log_std.exp()

        def camera_prepare(d):
            return (d.images(), d.observations, None), p.action_scaler.normalize(d.actions).clamp(-1.0, 1.0)

        training = p.encoder.training
        p.encoder.eval()
        try:
            return self.retention.actor_loss(
                p, gaussian=camera_gaussian, log_prob=lambda x, a: self.actor.log_prob(features(p, x), a),
                prepare=camera_prepare, states=(b.images(), b.observations, b.extras.get("obs_uid")),
                batch_size=obs.shape[0])
        finally:
            p.encoder.train(training)

    def _check_warm_start_network(self) -> None:
        """Warn when plain SAC is about to fine-tune a pretrained critic that has no LayerNorm.

        Measured on Hopper medium (``benchmarks/bench_wsrl_warmstart.py``, 3 seeds per network,
        one CQL checkpoint per network, 20k online steps after a 5k-step warmup): from 2 critic
        heads without LayerNorm WSRL's lowest evaluation after the warmup was 12.0 / 9.5 / 15.1
        normalised points below the CQL policy's ~18 (the issue's limit: 10) and later ones swung
        between 3 and 101; with LayerNorm in the critic heads it was −9.5 / +1.9 / −7.8. LayerNorm
        bounds the critic's extrapolation to the actions the online actor tries (Ball et al. 2023,
        RLPD); WSRL's reference network has it in every head.
        """
        if not self.critic_layer_norm:
            warnings.warn("plain SAC is fine-tuning a pretrained critic without LayerNorm "
                          "(agent.model.critic_layer_norm=false): WSRL's warm start from such a critic fell 10-15 normalised "
                          "points below its offline score on Hopper (benchmarks/bench_wsrl_warmstart.py); pretrain and "
                          "fine-tune with agent.model.critic_layer_norm=true, as WSRL's reference network does", RuntimeWarning,
                          stacklevel=3)

    @property
    def needs_mc_returns(self) -> bool:
        """Cal-QL bounds with MC returns-to-go: the trainer samples only ended episodes online."""
        return self.algo == "calql"

    @torch.no_grad()
    def q_minus_mc(self, batch: Batch) -> float:
        """The critic's scale check on ``batch`` (:func:`~robotrl.agents.qlearning.loss.q_minus_mc`):
        mean ensemble ``Q(s, a) - G`` over rows with a finite return, in the agent's reward units.

        Raises:
            ValueError: the batch has no ``mc_returns``.
        """
        if batch.mc_returns is None:
            raise ValueError("q_minus_mc needs a batch with mc_returns (sample it from a replay buffer with returns)")
        obs, act, _ = self._normalize(batch)
        with self._amp():
            q = self.critic(obs, act)
        return float(L.q_minus_mc(q.float(), batch.mc_returns))

    def _opt_step(self, opt, loss, params) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        opt.step()

    def _amp(self):
        """bfloat16 autocast of the network passes (a no-op context for float32)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def _soft_update(self) -> None:
        """Polyak step of the target critic (and, with cameras, the target encoder)."""
        polyak_update_(*self._polyak, self.tau)

    def _heads(self) -> torch.Tensor:
        n = self.critic.n
        if self.n_subset == n:
            return torch.arange(n, device=self.device)
        return torch.randperm(n, generator=self.gen, device=self.device)[: self.n_subset]

    def _encode(self, encoder, images: Mapping[str, torch.Tensor], state: torch.Tensor | None,
                uids: torch.Tensor | None) -> torch.Tensor:
        """``(B, F)`` features; from the frozen trunk's cached stems when caching is on and the batch carries
        frame ids (``Batch.extras["obs_uid"]``), else a full encoder pass."""
        if self.feature_cache is not None and uids is not None:
            return encoder.forward_from_stems(self.feature_cache.stems(images, uids), state)
        return encoder(images, state)

    def _normalize(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(obs features (B, W), actions in [-1, 1] (B, Da), next-obs features (B, W))``: the normalised
        states (``W = Do``), or with cameras the encoder's features of the frames and state (``W = F``; the
        next ones from the target encoder, no gradient; the current ones with the gradient into the encoder)."""
        p = self.policy
        act = p.action_scaler.normalize(b.actions).clamp(-1.0, 1.0)
        if self.target_encoder is None:
            return p.obs_normalizer(b.observations), act, p.obs_normalizer(b.next_observations)
        with torch.no_grad():
            nobs = self._encode(self.target_encoder, b.next_images(), p.normalized_state(b.next_observations),
                                b.extras.get("next_obs_uid"))
        obs = self._encode(p.encoder, b.images(), p.normalized_state(b.observations), b.extras.get("obs_uid"))
        return obs, act, nobs

    # ------------------------------------------------------------------ updates
    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """Critic updates on ``critic_utd`` minibatches of ``batch`` then one actor/temperature update.

        Args:
            batch: ``critic_utd·B`` transitions (raw units; ``rewards`` already reward-transformed;
                the trainer samples ``critic_utd × trainer.batch_size``, :mod:`robotrl.utd`); with
                cameras, frames uint8 ``{key: (critic_utd·B, H, W, k·C)}`` in ``extras``
                (``Batch.images()`` / ``Batch.next_images()``).
            step: trainer step (unused; schedules live in the trainer).

        Returns:
            Detached scalar tensors: ``q_mean``, ``q_max``, ``td_error``, ``critic_loss``,
            ``actor_loss``, ``entropy``, ``alpha`` (``alpha_loss`` when the temperature learns), ``offline_frac``
            and algorithm extras (``td_loss``, ``cql_penalty``, ``calql_bound_rate``, ``value_loss``, ``adv_mean``).
        """
        batch = batch.to(self.device)
        if self.retention.reference is not None:
            batch = self.retention.replay(batch)  # offline replay (knowledge retention; unchanged when off)
        B = len(batch)
        k = self.critic_utd if B >= self.critic_utd else 1
        critic_step, actor_step = (self._iql_critic, self._iql_actor) if self.algo == "iql" else \
            (self._sac_critic, self._sac_actor)
        metrics: dict[str, torch.Tensor] = {}
        if self.target_encoder is not None:
            self.policy.train()  # DrQ: random shift on the encoded frames (current and next)
            self.target_encoder.train()
        for i in range(k):
            mb = batch if k == 1 else self._minibatch(batch, torch.arange(i, B, k, device=self.device))
            with self._amp():
                metrics, advantage, obs = critic_step(mb)
            self._soft_update()
        if self.num_updates >= self.critic_warmup_updates:
            with self._amp():  # the last minibatch, its features with the gradient stopped (IQL: its advantage)
                metrics.update(actor_step(mb, advantage, obs.detach()))
            self.retention.tick()
        if self.sung.active:  # one VAE step per update, on the last minibatch
            metrics.update(self._sung_vae_step(mb))
        if "offline" in batch.extras:
            metrics["offline_frac"] = batch.extras["offline"].float().mean()
        if self.target_encoder is not None:
            self.policy.eval()
        self.num_updates += 1
        return metrics

    @staticmethod
    def _minibatch(b: Batch, idx: torch.Tensor) -> Batch:
        pick = lambda t: None if t is None else t.index_select(0, idx)  # noqa: E731
        return Batch(pick(b.observations), pick(b.actions), pick(b.rewards), pick(b.next_observations),
                     pick(b.terminated), pick(b.truncated), pick(b.discounts), pick(b.mc_returns), None,
                     {k: pick(v) for k, v in b.extras.items()})

    def _sac_critic(self, b: Batch) -> tuple[dict[str, torch.Tensor], None, torch.Tensor]:
        """One critic step of the SAC family: TD (SAC/WSRL/RLPD/PORL), TD + CQL(H) (CQL, Cal-QL), or SUNG's
        TD + ``λ·cql_alpha`` times the CQL(H) penalty on ``round_down(conservative_fraction·B)`` rows drawn by their
        uncertainty (:func:`conservative_rows`; plain CQL, no Cal-QL floor, as the reference's online loss);
        returns ``(metrics, None, obs features (B, W))``."""
        obs, act, nobs = self._normalize(b)
        B, R = obs.shape[0], self.cql["n"]
        conservative = self.algo in ("cql", "calql")
        alpha = self.log_alpha.exp().detach()
        rows, weight, metrics = None, self.cql["alpha"], {}
        with torch.no_grad():
            if conservative:  # one actor pass on [s'; s]: R samples each (target + CQL next / current actions)
                a_all, lp_all = self._policy_samples(nobs, obs, R)
                a_next, lp_next = a_all[:B], lp_all[:B]
            else:
                a_next, lp_next = self.actor.sample(nobs, self.gen)
            v_next = L.subset_min(self.critic_target(nobs, a_next), self._heads())
            if self.backup_entropy:
                v_next = v_next - alpha * lp_next
            target = L.td_target(b.rewards, b.discounts, b.terminated, v_next)
            if self.sung.active:  # SUNG online: the CQL penalty on the most uncertain rows
                rows, metrics = self._sung_rows(obs, act)
                weight = self.sung.cfg.conservative_weight * self.cql["alpha"]
                if rows is not None:
                    a_all, lp_all = self._policy_samples(nobs[rows], obs[rows], R)
        if conservative or rows is not None:
            if self.algo == "calql" and b.mc_returns is None:
                raise ValueError("Cal-QL needs mc_returns in the batch (the replay buffer provides them)")
            n = B if rows is None else rows.shape[0]
            a_rand = torch.rand((R * n, self.action_dim), generator=self.gen, device=self.device) * 2 - 1
            critic_loss, q, extra = L.cql_critic_loss(
                self.critic, obs, act, target, a_rand, a_all, lp_all, n_actions=R, rows=rows,
                mc_lower_bound=b.mc_returns if self.algo == "calql" else None, alpha=weight,
                temperature=self.cql["temperature"], clip_diff=self.cql["clip"])
        else:
            critic_loss, q, extra = L.sac_critic_loss(self.critic, obs, act, target)
        self._opt_step(self.critic_opt, critic_loss, self._critic_params)
        q = q.detach()
        metrics.update(q_mean=q.mean(), q_max=q.max(), td_error=(q - target).abs().mean(),
                       critic_loss=critic_loss.detach(), target_mean=target.mean(), **extra)
        if b.mc_returns is not None:
            metrics["q_minus_mc"] = L.q_minus_mc(q, b.mc_returns)
        return metrics, None, obs

    def _policy_samples(self, nobs: torch.Tensor, obs: torch.Tensor, R: int) -> tuple[torch.Tensor, torch.Tensor]:
        """CQL's policy actions: ``R`` samples at each of the ``n`` states ``nobs`` (s') and ``obs`` (s) in one actor
        pass; returns ``(2·R·n, Da)`` actions and ``(2·R·n,)`` log-probs, rows ``R`` blocks at s' then ``R`` at s."""
        n = obs.shape[0]
        a_n, lp_n = self.actor.sample_n(torch.cat([nobs, obs]), R, self.gen)  # (R, 2n, Da), (R, 2n)
        a_all = a_n.view(R, 2, n, -1).transpose(0, 1).reshape(2 * R * n, -1)
        return a_all, lp_n.view(R, 2, n).transpose(0, 1).reshape(2 * R * n)

    def _sung_rows(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """SUNG's conservative rows: ``(n,)`` indices drawn by the VAE uncertainty (``None`` when
        ``conservative='none'``) and the uncertainty metrics."""
        c = self.sung.cfg
        n = 0 if c.conservative == "none" else max(1, int(obs.shape[0] * c.conservative_fraction))
        u = self.sung.uncertainty(obs, act, self.gen)
        metrics = {"sung_uncertainty": u.mean()}
        if not n:
            return None, metrics
        idx = conservative_rows(u, n, mode=c.conservative, temperature=c.conservative_temperature, generator=self.gen)
        metrics["sung_cql_uncertainty"] = u[idx].mean()
        return idx, metrics

    def _sung_vae_step(self, b: Batch) -> dict[str, torch.Tensor]:
        """SUNG's one VAE step per update on the minibatch ``b`` (normalised states, actions in [-1, 1])."""
        p = self.policy
        loss = self.sung.vae_step(p.obs_normalizer(b.observations), p.action_scaler.normalize(b.actions).clamp(-1.0, 1.0),
                                  self.gen)
        return {"vae_loss": loss}

    @torch.no_grad()
    def _sung_explore(self, obs) -> np.ndarray:
        """SUNG's optimistic exploration (:func:`optimistic_choice`): raw actions ``(N, Da)`` for raw states
        ``(N, Do)``; ``Q`` of a candidate is the actor's reduction over the heads (``actor_q``)."""
        c = self.sung.cfg
        x = self.policy.eval().obs_normalizer(torch.as_tensor(np.asarray(obs, np.float32), device=self.device))
        N, C = x.shape[0], c.candidates
        a, _ = self.actor.sample_n(x, C, self.gen)  # (C, N, Da)
        xs, flat = x.unsqueeze(0).expand(C, -1, -1).reshape(C * N, -1), a.reshape(C * N, -1)
        u = self.sung.uncertainty(xs, flat, self.gen).view(C, N)
        with self._amp():
            q = self.critic(xs, flat).float()
        q = (q.mean(0) if self.actor_q == "mean" else q.min(0).values).view(C, N)
        j = optimistic_choice(q, u, topk=c.topk, order=c.order, mode=c.explore, temperature=c.explore_temperature,
                              generator=self.gen)
        chosen = a[j, torch.arange(N, device=self.device)]
        return self.policy.action_scaler.unnormalize(chosen).cpu().numpy()

    def _sac_actor(self, b: Batch, advantage: None, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """SAC actor (ensemble mean or min) and, unless fixed, temperature step on the critic step's
        features ``obs (B, W)`` (gradient stopped)."""
        a, logp = self.actor.sample(obs, self.gen)
        self.critic.requires_grad_(False)
        q = self.critic(obs, a)
        self.critic.requires_grad_(True)
        q_pi = q.mean(0) if self.actor_q == "mean" else q.min(0).values
        alpha = self.log_alpha.exp()
        actor_loss = L.sac_actor_loss(q_pi, logp, alpha.detach())
        keep, kept = self._retention_loss(obs, b)
        self._opt_step(self.actor_opt, actor_loss if keep is None else actor_loss + keep, self.actor.parameters())
        if self.fixed_alpha is None:
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss = L.temperature_loss(self.log_alpha, logp, self.target_entropy)
            alpha_loss.backward()
            self.alpha_opt.step()
            kept = {**kept, "alpha_loss": alpha_loss.detach()}  # the temperature's loss, logged beside alpha
        return {"actor_loss": actor_loss.detach(), "entropy": -logp.detach().mean(), "alpha": alpha.detach(), **kept}

    def _iql_critic(self, b: Batch) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """One IQL step of ``V`` (expectile) and ``Q`` (TD to ``V(s')``); returns the advantage ``(B,)`` and the
        normalised observations."""
        obs, act, nobs = self._normalize(b)
        losses = L.iql_critic_losses(self.critic, self.critic_target, self.value, obs, act, nobs, b.rewards,
                                     b.discounts, b.terminated, self.iql["expectile"])
        self._opt_step(self.value_opt, losses.value_loss, self.value.parameters())
        self._opt_step(self.critic_opt, losses.critic_loss, self._critic_params)
        q, target = losses.q.detach(), losses.target
        return {"q_mean": q.mean(), "q_max": q.max(), "td_error": (q - target).abs().mean(),
                "critic_loss": losses.critic_loss.detach(), "value_loss": losses.value_loss.detach(),
                "v_mean": losses.v_mean}, losses.advantage, obs

    def _iql_actor(self, b: Batch, advantage: torch.Tensor, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """IQL's advantage-weighted regression on ``advantage (B,)`` of the same minibatch."""
        act = self.policy.action_scaler.normalize(b.actions).clamp(-1.0, 1.0)
        logp = self.actor.log_prob(obs, act)
        actor_loss, w = L.awr_actor_loss(logp, advantage, self.iql["beta"], self.iql["max_weight"])
        keep, kept = self._retention_loss(obs, b)
        self._opt_step(self.actor_opt, actor_loss if keep is None else actor_loss + keep, self.actor.parameters())
        with torch.no_grad():
            _, ent_lp = self.actor.sample(obs, self.gen)
        return {"actor_loss": actor_loss.detach(), "adv_mean": advantage.mean(), "awr_weight": w.mean(),
                "entropy": -ent_lp.mean(), **kept}

    # ------------------------------------------------------------------ acting
    def _inputs(self, obs, images: Mapping[str, np.ndarray] | None,
                history: FrameHistory) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        """``(state (N, Do), {key: uint8 (N, H, W, k·C)} or None)`` tensors on the agent's device: flat
        observations (and frames as the policy takes them), or, for a camera agent with ``images=None``, a raw
        batch of the env's ``Dict`` observations (split by the policy's ``state_layout``, each env's newest
        frames stacked by ``history``)."""
        if images is None and self.has_cameras:
            s, imgs, _ = self.policy.split_observation(obs)
            return s, history.push(imgs)
        state = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        if images is None:
            return state, None
        return state, {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in images.items()}

    @torch.no_grad()
    def explore(self, obs, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Actions ``(N, Da)`` raw, sampled from the tanh-Gaussian policy, for observations ``(N, Do)``.

        A camera agent takes ``(N, Do)`` with ``images`` ``{key: uint8 (N, H, W, k·C)}``, or a raw batch of
        the env's ``Dict`` observations (``images=None``: what the trainer's online loop passes; frames
        stacked by the agent's exploration history, :meth:`reset_explore` at episode starts).
        """
        if self.sung.optimistic:  # SUNG online (a state agent)
            return self._sung_explore(obs)
        state, imgs = self._inputs(obs, images, self.explore_frames)
        x = self.policy.eval().features(state, imgs) if self.has_cameras else self.policy.obs_normalizer(state)
        a, _ = self.actor.sample(x, self.gen)
        return self.policy.action_scaler.unnormalize(a).cpu().numpy()

    @torch.no_grad()
    def act(self, obs, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Deterministic raw actions ``(N, Da)`` (inputs as :meth:`explore`; raw camera observations stacked
        by the policy's own history, :meth:`QLPolicy.reset`)."""
        return self.policy.eval()(*self._inputs(obs, images, self.policy._history)).cpu().numpy()

    def reset_explore(self, env_ids: np.ndarray | None = None) -> None:
        """The episodes of the trainer's envs ``env_ids`` (``None``: all) start: their exploration frame stacks
        start afresh (nothing to clear for a state agent or ``frame_stack = 1``)."""
        self.explore_frames.reset(env_ids)

    @torch.no_grad()
    def q_values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Ensemble ``Q(s, a)`` ``(N, B)`` for raw observations ``(B, Do)`` and raw actions ``(B, Da)`` (a state
        agent; a camera agent's critic reads frames: :meth:`q_minus_mc` on a batch)."""
        o = self.policy.obs_normalizer(obs.to(self.device))
        a = self.policy.action_scaler.normalize(actions.to(self.device)).clamp(-1, 1)
        return self.critic(o, a)

    @torch.no_grad()
    def batch_q_values(self, batch: Batch) -> torch.Tensor:
        """Ensemble ``Q(s, a)`` ``(N, B)`` of a replay :class:`Batch` (raw units), states or cameras (the frames in
        ``batch.extras``, read by the critic's encoder): what held-out validation scores
        (:class:`robotrl.validation.Validator`)."""
        obs, act, _ = self._normalize(batch)
        with self._amp():
            return self.critic(obs, act).float()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Networks (policy with normalisers, critic, target, temperature, value), optimizers, RNG, counter."""
        out = {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
               "critic_target": self.critic_target.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
               "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
               "alpha_opt": self.alpha_opt.state_dict(), "gen": self.gen.get_state(), "num_updates": self.num_updates}
        if self.value is not None:
            out.update(value=self.value.state_dict(), value_opt=self.value_opt.state_dict())
        if self.target_encoder is not None:
            out["target_encoder"] = self.target_encoder.state_dict()
        if self.retention.enabled:
            out["retention"] = self.retention.state_dict()
        if self.sung.enabled:
            out["sung"] = self.sung.state_dict()  # VAE, its Adam state, whether it was pretrained
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (resume; also a camera checkpoint of the former ``PixelSACAgent``)."""
        parts = ("encoder",) if self.has_cameras else ()
        self.load_parts(state, parts + ("policy", "critic", "temperature")
                        + (("value",) if self.value is not None else ()))
        self._optimizers_from(state, keep_lr=False)
        set_generator_state(self.gen, state["gen"])
        self.num_updates = int(state.get("num_updates", 0))  # the former PixelSACAgent kept no count
        self.retention.load_state_dict(state.get("retention"), self.policy)
        self.sung.load_state_dict(state.get("sung"))

    def load_parts(self, state: dict, parts: Sequence[str]) -> None:
        """Warm start from a pretrained agent's state: only ``parts`` of ``PARTS``.

        ``encoder`` = a camera agent's image encoder and its target (nothing for a state agent,
        so one ``init_parts`` list serves both); ``policy`` = actor + observation/action
        normalisers (not the encoder); ``critic`` = critic and target; ``temperature`` = ``log α``;
        ``value`` = IQL's ``V``; ``optimizers`` = the Adam states (moments and step counts) of the
        networks, with this agent's configured learning rates kept. Without ``optimizers`` they
        start fresh. With ``freeze_encoder`` the target encoder shares the loaded trunk; a
        cached feature store is cleared when the encoder changes.

        WSRL's reference restores the whole pretrained train state, Adam moments included
        (``flax.training.checkpoints.restore_checkpoint(target=agent)`` in zhouzypaul/wsrl's
        ``finetune.py``). A fresh Adam on a pretrained network takes steps of about ``lr`` per
        parameter in the sign of its first gradients (``m̂/√v̂ ≈ ±1``) until its second moments
        build up, instead of the small steps of the pretrained moments.

        Raises:
            ValueError: unknown part, or a part the checkpoint lacks.
        """
        for p in parts:
            if p not in PARTS:
                raise ValueError(f"unknown part {p!r}; choose from {PARTS}")
        parts = sorted(parts, key=PARTS.index)  # the encoder before the policy, whose encoder keys it keeps
        for p in parts:
            if p == "encoder":
                self._load_encoder(state)
            elif p == "policy":
                pol = state["policy"]
                if self.has_cameras:  # the actor head and normalisers; the encoder is its own part
                    pol = {k: v for k, v in pol.items() if not k.startswith("encoder.")}
                    pol.update({k: v for k, v in self.policy.state_dict().items() if k.startswith("encoder.")})
                self.policy.load_state_dict(pol)
            elif p == "critic":
                self.critic.load_state_dict(state["critic"])
                # "target_critic": a checkpoint of the former PixelSACAgent
                self.critic_target.load_state_dict(state["critic_target"] if "critic_target" in state
                                                   else state["target_critic"])
                if self.algo == "sac" and (self.online_algo or "sac") == "sac":
                    self._check_warm_start_network()
            elif p == "temperature":
                with torch.no_grad():
                    self.log_alpha.copy_(state["log_alpha"])
            elif p == "value":
                if self.value is None or "value" not in state:
                    raise ValueError("part 'value' needs an IQL agent and an IQL checkpoint")
                self.value.load_state_dict(state["value"])
            elif p == "optimizers":
                self._optimizers_from(state, keep_lr=True)

    def _load_encoder(self, state: dict) -> None:
        """The ``encoder`` part: the target encoder first (a frozen trunk it shares then holds the online
        trunk's weights), then the encoder's ``encoder.*`` keys of the saved policy.

        Raises:
            ValueError: the checkpoint has no camera encoder.
        """
        if self.target_encoder is None:
            return  # a state agent: no encoder
        if "target_encoder" not in state:
            raise ValueError("part 'encoder' needs a checkpoint of an agent with cameras (it holds no target_encoder)")
        self.target_encoder.load_state_dict(state["target_encoder"])
        self.policy.encoder.load_state_dict({k[len("encoder."):]: v for k, v in state["policy"].items()
                                             if k.startswith("encoder.")})
        if self.feature_cache is not None:
            self.feature_cache.clear()

    def _optimizers_from(self, state: dict, keep_lr: bool) -> None:
        """Load the Adam states of ``state``; ``keep_lr``: keep this agent's configured learning rates
        (a warm start under another config) instead of the saved ones (a resume).

        Raises:
            ValueError: the checkpoint has no optimizer state for a network of this agent.
        """
        pairs = [(self.actor_opt, "actor_opt", self.lrs["actor"]), (self.critic_opt, "critic_opt", self.lrs["critic"]),
                 (self.alpha_opt, "alpha_opt", self.lrs["alpha"])]
        if self.value_opt is not None:
            pairs.append((self.value_opt, "value_opt", self.lrs["value"]))
        for opt, key, lr in pairs:
            if key not in state:
                raise ValueError(f"the checkpoint has no {key!r} (optimizer state) for part 'optimizers'")
            opt.load_state_dict(state[key])
            if keep_lr:
                for group in opt.param_groups:
                    group["lr"] = lr
