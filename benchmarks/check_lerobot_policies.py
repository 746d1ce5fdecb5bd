"""LeRobot-trained policies as robotrl bases, checked against LeRobot itself (issue 42 item 3).

Three phases, because LeRobot pins its own torch (see ``benchmarks/check_lerobot_interop.py`` for the venvs)::

    PYTHONPATH=$PWD python3 benchmarks/check_lerobot_policies.py --lerobot-python /work/venv-lerobot/bin/python

1. robotrl's environment writes a small state-only dataset (PointMaze-sized: ``observation.state`` ``(4,)`` position and velocity,
   ``observation.environment_state`` ``(4,)`` achieved and desired goal (LeRobot's ACT and diffusion need an image or an
   environment state), action ``(2,)``,
   a proportional "human" driving a point mass to its goal, 12 episodes of 30 frames at 10 fps) with
   :func:`robotrl.data.lerobot.write_lerobot`, the writer ``robotrl convert --to lerobot`` uses.
2. Under ``--lerobot-python`` (``--train DATA OUT``): LeRobot's own API trains a tiny ACT policy (and a tiny
   diffusion policy, ``n_obs_steps`` 2, horizon 8, ``n_action_steps`` 4, a 2-level U-Net) on it
   (``ACTPolicy`` + ``make_pre_post_processors`` with the dataset's statistics, ``LeRobotDataset`` with the
   config's ``delta_timestamps``, ``--steps`` Adam steps) and saves it with ``save_pretrained`` (policy, pre-
   and post-processor). ``--save-fixture`` copies the folder to ``tests/data/lerobot_policies/act``, the fixture
   ``tests/test_lerobot_policy.py`` loads.
3. Under ``--lerobot-python`` with robotrl importable (``--check OUT``; robotrl's other dependencies are
   appended to ``sys.path`` after LeRobot's, so LeRobot's torch wins): :class:`robotrl.agents.residual.lerobot.
   LeRobotPolicy` acts on 4 envs for 3 episodes of different lengths; every env's actions must equal those of
   LeRobot's own ``select_action`` loop on that env alone (its action queue, ``reset`` at each episode start),
   and a :class:`~robotrl.agents.residual.ResidualOffPolicyAgent` built on the folder must, at initialisation,
   act exactly as the base; the diffusion base's actions must equal ``select_action``'s (same initial noise and
   global seed per step: LeRobot's DDPM steps draw their noise from the global RNG), its observation queue of
   ``n_obs_steps`` included; an untrained ACT with a camera (``--check-cameras``) must act on the run's uint8 frames
   as ``select_action`` on LeRobot's float frames. One line per check; exit status 1 when any failed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

EPISODES, LENGTH, FPS = 12, 30, 10
ROOT = Path(__file__).resolve().parents[1]


def human(s: np.ndarray) -> np.ndarray:
    """The dataset's demonstrator: a P-D controller to the goal ``s[6:8]`` in ``[-1, 1]``."""
    return np.clip(2.0 * (s[..., 6:8] - s[..., 0:2]) - 0.5 * s[..., 2:4], -1.0, 1.0).astype(np.float32)


def step(s: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A point mass: velocity += 0.1 a, position += 0.1 velocity; ``s[4:6]`` the position again (achieved goal)."""
    s = s.copy()
    s[..., 2:4] = 0.9 * s[..., 2:4] + 0.1 * a
    s[..., 0:2] = np.clip(s[..., 0:2] + 0.1 * s[..., 2:4], -1.5, 1.5)
    s[..., 4:6] = s[..., 0:2]
    return s


def episodes(n: int, length: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s = np.zeros(8, np.float32)
        s[0:2] = rng.uniform(-1, 1, 2)
        s[4:6] = s[0:2]
        s[6:8] = rng.uniform(-1, 1, 2)
        states, actions = [], []
        for _ in range(length):
            a = human(s) + rng.normal(0, 0.05, 2).astype(np.float32)
            states.append(s)
            actions.append(a)
            s = step(s, a)
        out.append((np.stack(states).astype(np.float32), np.stack(actions).astype(np.float32)))
    return out


# ----------------------------------------------------------------------------- phase 1: robotrl writes
def write_dataset(out: Path) -> Path:
    from robotrl.data.lerobot import LeRobotEpisode, LeRobotInfo, write_lerobot

    eps = [LeRobotEpisode({"observation.state": s[:, :4], "observation.environment_state": s[:, 4:]}, a, np.zeros(len(a), np.float32), np.arange(len(a)) == len(a) - 1,
                          np.zeros(len(a), np.int64)) for s, a in episodes(EPISODES, LENGTH, 0)]
    return write_lerobot(out, eps, LeRobotInfo(fps=FPS, features={}, tasks=["reach"], robot_type="pointmass"),
                         overwrite=True)


# ----------------------------------------------------------------------------- phase 2: LeRobot trains
def train(kind: str, data: Path, out: Path, steps: int) -> None:
    """LeRobot's own training recipe (its ``examples/training``): policy, processors with the dataset's statistics,
    ``LeRobotDataset`` with the config's ``delta_timestamps``, Adam on ``policy.forward``'s loss."""
    import torch
    from lerobot.configs.types import FeatureType
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.datasets.utils import dataset_to_policy_features
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    meta = LeRobotDatasetMetadata("robotrl/pointmass", root=data)
    feats = dataset_to_policy_features(meta.features)
    outputs = {k: f for k, f in feats.items() if f.type is FeatureType.ACTION}
    inputs = {k: f for k, f in feats.items() if k in ("observation.state", "observation.environment_state")}
    if kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        cfg = ACTConfig(input_features=inputs, output_features=outputs, chunk_size=4, n_action_steps=4, dim_model=32,
                        n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, use_vae=False,
                        device="cpu", push_to_hub=False)
        policy = ACTPolicy(cfg)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

        cfg = DiffusionConfig(input_features=inputs, output_features=outputs, n_obs_steps=2, horizon=8,
                              n_action_steps=4, drop_n_last_frames=3, down_dims=(16, 32), kernel_size=3, n_groups=4,
                              diffusion_step_embed_dim=16, num_train_timesteps=20, device="cpu", push_to_hub=False)
        policy = DiffusionPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    ds = LeRobotDataset("robotrl/pointmass", root=data, delta_timestamps=resolve_delta_timestamps(cfg, meta))
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    policy.train()
    done, first, last = 0, None, None
    while done < steps:
        for batch in loader:
            loss, _ = policy.forward(pre(batch))
            loss = loss.mean() if loss.ndim else loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            first = float(loss.detach()) if first is None else first
            last, done = float(loss.detach()), done + 1
            if done >= steps:
                break
    policy.eval()
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    print(f"trained {kind} for {steps} steps: loss {first:.4f} -> {last:.4f}; saved to {out}")


# ----------------------------------------------------------------------------- phase 3: robotrl loads, LeRobot checks
def check(folder: Path) -> bool:
    sys.path.append(_main_site_packages())
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from robotrl.agents.residual import ResidualOffPolicyAgent
    from robotrl.agents.residual.lerobot import LeRobotPolicy
    from robotrl.data.normalizer import ActionScaler, ObservationNormalizer

    ok = True

    def report(name: str, passed: bool, detail: str = "") -> None:
        nonlocal ok
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'} {name}{': ' + detail if detail else ''}")

    torch.set_num_threads(1)
    base = LeRobotPolicy(folder)
    report("loads as a base", (base.obs_dim, base.action_dim, base.Te, base.To) == (8, 2, 4, 1),
           f"Do={base.obs_dim} Da={base.action_dim} Te={base.Te} To={base.To}")
    lengths = (7, 10, 5, 9)  # per env: episodes end at different steps, so chunks restart out of phase
    eps = episodes(3 * len(lengths), max(lengths), 1)
    ref = ACTPolicy.from_pretrained(str(folder), local_files_only=True)
    pre, post = make_pre_post_processors(ref.config, pretrained_path=str(folder))
    ours: list[list[np.ndarray]] = [[] for _ in lengths]
    theirs: list[list[np.ndarray]] = [[] for _ in lengths]
    states = [[eps[3 * e + k][0][: lengths[e]] for k in range(3)] for e in range(len(lengths))]
    t_env = [0] * len(lengths)
    predicted = []
    predict = base.predict_chunk
    base.predict_chunk = lambda h, *a, **k: predicted.append(len(h)) or predict(h, *a, **k)
    for _ in range(3 * max(lengths)):
        live = [e for e in range(len(lengths)) if t_env[e] < 3 * lengths[e]]
        if not live:
            break
        rows = []
        for e in range(len(lengths)):
            k, t = divmod(min(t_env[e], 3 * lengths[e] - 1), lengths[e])
            rows.append(states[e][k][t])
            if t == 0 and t_env[e] > 0 and t_env[e] < 3 * lengths[e]:
                base.reset(np.array([e]))
        a = base(torch.as_tensor(np.stack(rows))).numpy()
        for e in live:
            ours[e].append(a[e])
            t_env[e] += 1
    for e, n in enumerate(lengths):
        for k in range(3):
            ref.reset()
            for t in range(n):
                s = torch.as_tensor(states[e][k][t])[None]
                act = ref.select_action(pre({"observation.state": s[:, :4], "observation.environment_state": s[:, 4:]}))
                theirs[e].append(post(act)[0].numpy())
    err = max(float(np.abs(np.stack(o) - np.stack(r)).max()) for o, r in zip(ours, theirs))
    report("per-env chunks equal LeRobot's select_action on each env", err < 1e-5, f"max |diff| {err:.2e}")
    # per env and episode ceil(n / Te) chunks; an env whose 3 episodes are over keeps stepping its last episode
    # (not recorded) until the longest env is done: its chunk starts there are the steps k = n .. n + T - 3n - 1
    # of that episode with k % Te == 0
    T = 3 * max(lengths)
    want = sum(3 * -(-n // base.Te) + sum(k % base.Te == 0 for k in range(n, n + T - 3 * n)) for n in lengths)
    report("one chunk per Te steps per env", sum(predicted) == want,
           f"{sum(predicted)} chunk predictions (expected {want}) for {len(lengths) * T} env steps")
    agent = ResidualOffPolicyAgent(8, 2, obs_normalizer=ObservationNormalizer(np.zeros(8), np.ones(8)),
                                   action_scaler=ActionScaler(-np.ones(2), np.ones(2)), base=str(folder))
    obs = np.stack([s[0][0] for s in states])
    base.reset()
    same = np.allclose(agent.act(obs), np.clip(base(torch.as_tensor(obs)).numpy(), -1, 1), atol=1e-6)
    report("residual agent at init acts as the base", bool(same))
    return ok


def check_diffusion(folder: Path) -> bool:
    """A LeRobot diffusion policy (``n_obs_steps`` 2) as a base: one env's actions equal LeRobot's ``select_action``
    given the same initial noise and global seed per step (its DDPM steps draw their noise from the global RNG)."""
    sys.path.append(_main_site_packages())
    import torch
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from robotrl.agents.residual.lerobot import LeRobotPolicy

    torch.set_num_threads(1)
    base = LeRobotPolicy(folder, seed=3)
    ref = DiffusionPolicy.from_pretrained(str(folder), local_files_only=True)
    pre, post = make_pre_post_processors(ref.config, pretrained_path=str(folder))
    gen = torch.Generator().manual_seed(3)  # the base's noise stream, replayed for the reference
    (s, _), = episodes(1, 11, 2)
    ours, theirs = [], []
    for t in range(len(s)):
        torch.manual_seed(100 + t)
        ours.append(base(torch.as_tensor(s[t : t + 1])).numpy()[0])
    ref.reset()
    for t in range(len(s)):
        torch.manual_seed(100 + t)
        x = torch.as_tensor(s[t : t + 1])
        noise = torch.randn((1, ref.config.horizon, 2), generator=gen) if t % base.Te == 0 else None
        a = ref.select_action(pre({"observation.state": x[:, :4], "observation.environment_state": x[:, 4:]}),
                              noise=noise)
        theirs.append(post(a)[0].numpy())
    err = float(np.abs(np.stack(ours) - np.stack(theirs)).max())
    passed = (base.To, base.Te) == (2, 4) and err < 1e-5
    print(f"{'PASS' if passed else 'FAIL'} diffusion base (To={base.To}, Te={base.Te}) equals LeRobot's select_action "
          f"with its observation queue: max |diff| {err:.2e}")
    return passed


def check_cameras(tmp: Path) -> bool:
    """The camera mapping: an ACT policy with one camera (``observation.images.front``, 32x32; LeRobot's ResNet-18
    backbone, randomly initialised: no weights are downloaded, nothing is trained) saved with ``save_pretrained``;
    the robotrl base fed the run's ``pixels/front`` uint8 frames must act as ``select_action`` fed LeRobot's float
    ``(B, C, H, W)`` frames in ``[0, 1]``."""
    sys.path.append(_main_site_packages())
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from robotrl.agents.residual.lerobot import LeRobotPolicy

    torch.manual_seed(0)
    torch.set_num_threads(1)
    vec = lambda d: PolicyFeature(type=FeatureType.STATE, shape=(d,))  # noqa: E731
    inputs = {"observation.state": vec(4), "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, 32, 32))}
    cfg = ACTConfig(input_features=inputs, output_features={"action": PolicyFeature(FeatureType.ACTION, (2,))},
                    chunk_size=4, n_action_steps=4, dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1,
                    n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None, device="cpu", push_to_hub=False)
    stats = {"observation.state": {"mean": torch.zeros(4), "std": torch.ones(4)},
             "observation.images.front": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
             "action": {"mean": torch.zeros(2), "std": torch.ones(2)}}
    policy = ACTPolicy(cfg).eval()
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    folder = tmp / "act_camera"
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)
    base = LeRobotPolicy(folder)
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
    frames = rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    ours = [base(torch.as_tensor(states[t : t + 1]), {"pixels/front": torch.as_tensor(frames[t : t + 1])}).numpy()[0]
            for t in range(6)]
    ref = ACTPolicy.from_pretrained(str(folder), local_files_only=True)
    rpre, rpost = make_pre_post_processors(ref.config, pretrained_path=str(folder))
    ref.reset()
    theirs = []
    for t in range(6):
        img = torch.as_tensor(frames[t : t + 1]).permute(0, 3, 1, 2).float() / 255.0
        a = ref.select_action(rpre({"observation.state": torch.as_tensor(states[t : t + 1]),
                                    "observation.images.front": img}))
        theirs.append(rpost(a)[0].numpy())
    err = float(np.abs(np.stack(ours) - np.stack(theirs)).max())
    passed = base.image_shapes == {"observation.images.front": (32, 32, 3)} and err < 1e-5
    print(f"{'PASS' if passed else 'FAIL'} camera mapping (pixels/front uint8 HWC -> observation.images.front): "
          f"max |diff| {err:.2e}")
    return passed


def _main_site_packages() -> str:
    out = subprocess.run(["python3", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lerobot-python", help="a Python with LeRobot installed (phases 2 and 3 run under it)")
    ap.add_argument("--train", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--check", metavar="OUT", help=argparse.SUPPRESS)
    ap.add_argument("--check-diffusion", metavar="OUT", help=argparse.SUPPRESS)
    ap.add_argument("--check-cameras", metavar="TMP", help=argparse.SUPPRESS)
    ap.add_argument("--kind", default="act", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=300, help="ACT training steps (default 300)")
    ap.add_argument("--save-fixture", action="store_true", help="copy the trained policy to tests/data/lerobot_policies/act")
    args = ap.parse_args()
    if args.train:
        train(args.kind, Path(args.train[0]), Path(args.train[1]), args.steps)
        return 0
    if args.check:
        return 0 if check(Path(args.check)) else 1
    if args.check_diffusion:
        return 0 if check_diffusion(Path(args.check_diffusion)) else 1
    if args.check_cameras:
        return 0 if check_cameras(Path(args.check_cameras)) else 1
    if not args.lerobot_python:
        ap.error("--lerobot-python is required")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_dataset(Path(tmp) / "pointmass")
        out = Path(tmp) / "act"
        py = args.lerobot_python
        subprocess.run([py, __file__, "--train", str(data), str(out), "--steps", str(args.steps)], check=True)
        rc = subprocess.run([py, __file__, "--check", str(out)]).returncode
        diff = Path(tmp) / "diffusion"
        subprocess.run([py, __file__, "--train", str(data), str(diff), "--steps", str(args.steps), "--kind",
                        "diffusion"], check=True)
        rc = max(rc, subprocess.run([py, __file__, "--check-diffusion", str(diff)]).returncode)
        rc = max(rc, subprocess.run([py, __file__, "--check-cameras", tmp]).returncode)
        if args.save_fixture:
            dst = ROOT / "tests" / "data" / "lerobot_policies" / "act"
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(out, dst)
            print(f"fixture written to {dst}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
