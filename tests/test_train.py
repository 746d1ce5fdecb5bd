"""End-to-end tests of `robotrl train` / `robotrl eval` on a real generated PointMaze dataset.

Real processes, real MuJoCo, real Minari files; small budgets so the file runs in about a minute.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.checkpoint import load_checkpoint
from robotrl.experiment import build_trainer

DATASET_ID = "robotrl/pointmaze/umaze-test-v0"
TINY = [
    "agent=bc",
    "dataset=pointmaze-umaze-planner",
    f"dataset.id={DATASET_ID}",
    "dataset.recipe_args.num_steps=3000",
    "+dataset.recipe_args.ref_episodes=3",
    "trainer.eval_episodes=2",
    "trainer.eval_envs=2",
    "trainer.log_every=50",
    "trainer.progress=false",
    "torch_threads=1",
]




def _env(minari_module_root: Path) -> dict:
    return {**os.environ, "MINARI_DATASETS_PATH": str(minari_module_root), "PYTHONUNBUFFERED": "1"}


def _robotrl(args: list[str], minari_module_root: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robotrl.cli", *args], env=_env(minari_module_root), capture_output=True,
                          text=True, timeout=timeout)


def _compose(overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


@pytest.fixture(scope="module")
def bc_cli_run(minari_module_root, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One real ``robotrl train`` process (BC, 300 updates, evaluations and checkpoints at 150 and 300), its output
    piped, with the progress summary lines on (log_every 10); the end-to-end test and the piped-output test read it."""
    run_dir = tmp_path_factory.mktemp("bc-cli") / "run"
    res = _robotrl(["train", *TINY[:-2], "trainer.progress=true", "trainer.log_every=10", "torch_threads=1",
                    "trainer.offline_steps=300", "trainer.eval_every=150", "trainer.checkpoint_every=150",
                    f"run_dir={run_dir}"], minari_module_root)
    return res, run_dir


@pytest.mark.slow
def test_train_generates_dataset_evaluates_reports_and_eval_cli(bc_cli_run, minari_module_root, tmp_path):
    res, run_dir = bc_cli_run
    assert res.returncode == 0, res.stderr[-3000:]
    # the dataset was generated on first use and cached under the Minari root
    assert (minari_module_root / DATASET_ID / "data" / "metadata.json").is_file()
    assert "generating it with recipe pointmaze-umaze" in res.stdout
    report = json.loads((run_dir / "report.json").read_text())
    assert [h["step"] for h in report["history"]] == [150, 300]
    assert report["summary"]["gradient_updates"] == 300
    assert 0.0 <= report["summary"]["final_success_rate"] <= 1.0
    # the normalised score is D4RL's, from the reference scores the generated dataset recorded
    meta = json.loads((minari_module_root / DATASET_ID / "data" / "metadata.json").read_text())
    lo, hi = float(meta["ref_min_score"]), float(meta["ref_max_score"])
    assert hi > lo
    assert report["summary"]["final_normalized_score"] == pytest.approx(
        100.0 * (report["summary"]["final_return"] - lo) / (hi - lo), rel=1e-6, abs=1e-6)
    assert (run_dir / "report.md").read_text().startswith("# robotrl run report")
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any((run_dir / "tb").iterdir()), "no TensorBoard event file"
    assert str(run_dir / "report.json") in res.stdout  # the path is printed

    ckpt = load_checkpoint(run_dir)
    assert ckpt["step"] == 300
    assert ckpt["config"]["derived"]["obs_dim"] == 8 and ckpt["config"]["derived"]["action_dim"] == 2
    assert set(ckpt["policy"]["state_dict"]) >= {"obs_normalizer.mean", "obs_normalizer.std",
                                                  "action_scaler.low", "action_scaler.high"}

    from robotrl.envs import osmesa_available

    video = ["video_dir=" + str(tmp_path / "videos")] if osmesa_available() else []
    ev = _robotrl(["eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2", *video], minari_module_root)
    assert ev.returncode == 0, ev.stderr[-3000:]
    metrics = json.loads((run_dir / "eval.json").read_text())
    assert metrics["episodes"] == 2 and metrics["step"] == 300
    # D4RL's score of the evaluated return, against the same dataset's reference scores as the training report
    assert metrics["normalized_score"] == pytest.approx(100.0 * (metrics["return_mean"] - lo) / (hi - lo), rel=1e-6, abs=1e-6)
    if video:  # headless rendering present (Debian libosmesa6): env 0's episode was recorded
        gifs = list((tmp_path / "videos").glob("*.gif"))
        assert gifs and gifs[0].read_bytes()[:3] == b"GIF"


@pytest.mark.slow
def test_killed_run_resumes_from_its_checkpoint(minari_module_root, tmp_path, kill_after_checkpoint):
    run_dir = tmp_path / "killed"
    args = [sys.executable, "-m", "robotrl.cli", "train", *TINY, "trainer.offline_steps=1000000",
            "trainer.eval_every=1000000", "trainer.checkpoint_every=100", f"run_dir={run_dir}"]
    killed_at = kill_after_checkpoint(args, _env(minari_module_root), run_dir)
    assert killed_at >= 200 and killed_at % 100 == 0
    res = _robotrl(["train", *TINY, f"trainer.offline_steps={killed_at + 100}", "trainer.eval_every=1000000",
                    "trainer.checkpoint_every=100", f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["resumed"] is True
    assert summary["gradient_updates"] == killed_at + 100


def test_resumed_run_equals_uninterrupted_run(minari_module_root, tmp_path):
    """Checkpoints hold weights, optimizer, RNG and sampler state: 100+100 steps == 200 steps."""
    base = [*TINY, "trainer.eval_every=100000", "trainer.checkpoint_every=100", "device=cpu"]
    straight = build_trainer(_compose([*base, "trainer.offline_steps=200"]), tmp_path / "a")
    straight.fit()
    first = build_trainer(_compose([*base, "trainer.offline_steps=100"]), tmp_path / "b")
    first.fit()
    second = build_trainer(_compose([*base, "trainer.offline_steps=200"]), tmp_path / "b")
    second.fit()
    a, b = straight.agent.policy.state_dict(), second.agent.policy.state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_second_runner_on_a_run_dir_in_use_is_refused_and_the_first_keeps_it(minari_module_root, tmp_path):
    """One live trainer per run directory: a second one (here in the same process, the kernel's flock sees two
    holders) is refused before it reads or writes anything; the first's run is untouched and frees the lock."""
    from robotrl.errors import RunDirInUseError

    base = [*TINY, "trainer.eval_every=100000", "trainer.checkpoint_every=100", "device=cpu", "trainer.offline_steps=100"]
    first = build_trainer(_compose(base), tmp_path / "run")
    first.prepare()
    second = build_trainer(_compose(base), tmp_path / "run")
    with pytest.raises(RunDirInUseError, match=rf"in use by pid {os.getpid()} .*another run_dir="):
        second.fit()
    assert not (tmp_path / "run" / "checkpoints").exists()  # the refused one wrote nothing
    assert first.fit()["gradient_updates"] == 100
    assert build_trainer(_compose([*base[:-1], "trainer.offline_steps=150"]), tmp_path / "run").fit()["resumed"] is True


def test_robotrl_train_on_a_run_dir_a_live_process_holds_says_so_and_a_killed_holder_frees_it(minari_module_root,
                                                                                              tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from robotrl.files import DirLock; "
                               "lock = DirLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(600)", str(run_dir)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        args = ["train", *TINY, "trainer.offline_steps=50", "trainer.eval_every=100000", "trainer.checkpoint_every=50",
                f"run_dir={run_dir}"]
        res = _robotrl(args, minari_module_root)
        assert res.returncode != 0
        last = res.stderr.strip().splitlines()[-1]
        assert f"is in use by pid {holder.pid} (since " in last and "another run_dir=" in last, res.stderr[-2000:]
        assert not (run_dir / "checkpoints").exists() and not (run_dir / "provenance.json").exists()
    finally:
        holder.kill()  # SIGKILL: the kernel drops its lock
        holder.wait()
    res = _robotrl(args, minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((run_dir / "report.json").read_text())["summary"]["gradient_updates"] == 50


def test_online_phase_collects_into_online_buffer_and_updates_at_utd(minari_module_root, tmp_path):
    cfg = _compose([*TINY, "trainer.offline_steps=50", "trainer.online_steps=120", "trainer.online_warmup_steps=20",
                    "trainer.utd=2", "trainer.num_envs=2", "trainer.eval_every=100000",
                    "trainer.checkpoint_every=100000", "trainer.offline_ratio=0.5", "trainer.batch_size=32",
                    # opt out of the data's MDP on purpose: a continuing task, so every episode is cut at 50 steps
                    "env.match_dataset=false", "+env.kwargs.continuing_task=true", "env.max_episode_steps=50",
                    "device=cpu"])
    trainer = build_trainer(cfg, tmp_path / "online")
    summary = trainer.fit()
    online = trainer.online
    # per env: truncations at steps 50 and 101, each followed by a reset-only step that is not stored
    assert int(online.truncated[: online.size].sum()) == 4
    assert int(online.terminated[: online.size].sum()) == 0
    assert online.size == 2 * (120 - 2)
    assert summary["gradient_updates"] == 50 + (120 - 20) * 2
    # every stored online transition is a real env step: consecutive links stay within one env's episode
    linked = np.flatnonzero(online.next_idx[: online.size] >= 0)
    nxt = online.next_idx[linked]
    np.testing.assert_allclose(online.next_observations[linked], online.observations[nxt], atol=1e-6)
    assert json.loads((tmp_path / "online" / "report.json").read_text())["history"][-1]["phase"] == "online"


def test_bc_learns_the_planner_actions(minari_module_root, tmp_path):
    """A short BC run lowers the action MSE on held data well below the untrained policy's."""
    cfg = _compose([*TINY, "trainer.offline_steps=400", "trainer.eval_every=100000",
                    "trainer.checkpoint_every=100000", "device=cpu"])
    trainer = build_trainer(cfg, tmp_path / "learn")
    batch = trainer.offline.sample(1024)
    scaler = trainer.agent.policy.action_scaler

    def mse():
        with torch.no_grad():
            pred = scaler.normalize(trainer.agent.policy(batch.observations))
            return float(((pred - scaler.normalize(batch.actions).clamp(-1, 1)) ** 2).mean())

    before = mse()
    trainer.fit()
    assert mse() < 0.6 * before


def test_cli_reports_missing_dataset_clearly(minari_module_root, tmp_path):
    res = _robotrl(["train", "dataset.id=robotrl/nothing/here-v0", "dataset.generate=false",
                    f"run_dir={tmp_path / 'x'}"], minari_module_root)
    assert res.returncode == 2
    assert "robotrl: error: dataset 'robotrl/nothing/here-v0' is not present" in res.stderr
    assert "robotrl collect" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "x" / "checkpoints").exists()


def test_cli_rejects_corrupt_checkpoint(minari_module_root, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    res = _robotrl(["eval", f"checkpoint={bad}"], minari_module_root)
    assert res.returncode == 2
    assert "cannot be read safely" in res.stderr and "Traceback" not in res.stderr


def test_cli_rejects_dataset_of_another_env(minari_module_root, tmp_path):
    res = _robotrl(["train", *TINY, "env=hopper", "dataset=pointmaze-umaze", f"run_dir={tmp_path / 'y'}"],
                   minari_module_root)
    assert res.returncode == 2
    assert "robotrl: error: env 'hopper' (Hopper-v5) is not the MDP dataset" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "y" / "checkpoints").exists()


@pytest.mark.slow
def test_ppo_fine_tunes_a_bc_checkpoint_through_robotrl_train(minari_module_root, tmp_path):
    """`robotrl train agent=ppo trainer.init_from=<bc run>` runs the on-policy loop from the BC weights."""
    bc_dir = tmp_path / "bc"
    build_trainer(_compose([*TINY, "trainer.offline_steps=100", "trainer.eval_every=100000",
                            "trainer.checkpoint_every=100000", "device=cpu"]), bc_dir).fit()
    res = _robotrl(["train", *TINY, "agent=ppo", f"trainer.init_from={bc_dir}", "agent.onpolicy.iterations=2",
                    "agent.onpolicy.steps_per_iter=20", "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_every=1",
                    "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2", "agent.model.batch_size=20",
                    "env.match_dataset=false", "env.max_episode_steps=30", f"run_dir={tmp_path / 'ppo'}"],
                   minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = load_checkpoint(tmp_path / "ppo")
    assert ckpt["policy"]["target"].startswith("robotrl.agents.ppo.")
    # env steps: iterations x steps_per_iter x num_envs, less one reset-only step per env after its
    # 30-step episode ends (gymnasium's next-step autoreset)
    assert ckpt["step"] == 2 * 20 * 2 - 2
    assert (tmp_path / "ppo" / "report.json").exists()


def test_default_main_job_is_offline_to_online():
    cfg = _compose([])
    assert cfg.agent.name == "bc-ppo" and cfg.agent.onpolicy.pretrain_steps > 0 and cfg.agent.onpolicy.iterations > 0
    assert cfg.dataset.recipe == "pointmaze-umaze-slow"  # the sub-optimal demonstrator: room to improve online


def test_bc_then_ppo_in_one_run_pretrains_evaluates_then_fine_tunes(minari_module_root, tmp_path):
    """`robotrl train agent=bc-ppo`: BC on the data, the offline evaluation (the gain's reference),
    a checkpoint, then PPO iterations from the pretrained actor; a restart resumes online."""
    over = [*(o for o in TINY[2:] if not o.startswith("dataset.id=")), "dataset.id=robotrl/pointmaze/umaze-slow-test-v1",
            "agent=bc-ppo", "agent.onpolicy.pretrain_steps=300", "agent.onpolicy.iterations=2",
            "agent.onpolicy.steps_per_iter=40", "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_every=1",
            "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2", "agent.model.batch_size=40",
            "device=cpu"]
    trainer = build_trainer(_compose(over), tmp_path / "run")
    init = copy.deepcopy(trainer.agent.policy.actor.state_dict())
    batch = trainer.offline.sample(512, indices=np.arange(512))

    def bc_mse(policy) -> float:
        with torch.no_grad():
            mean = policy.actor(policy.obs_normalizer(batch.observations))[0]
            return float((mean - policy.action_scaler.normalize(batch.actions).clamp(-1, 1)).pow(2).mean())

    loss0 = bc_mse(trainer.agent.policy)
    trainer.cfg.iterations = 0  # stop after pretraining: the offline evaluation and its checkpoint
    summary = trainer.fit()
    after = trainer.agent.policy
    loss1 = bc_mse(after)
    assert loss1 < 0.7 * loss0, (loss0, loss1)  # the data's N(0, 0.1²) action noise floors the MSE near 0.01
    assert [h["phase"] for h in trainer.history] == ["offline"] and summary["online_steps"] == 0
    pretrained = copy.deepcopy(after.actor.state_dict())
    assert any(not torch.equal(init[k], pretrained[k]) for k in init)
    # the same run dir goes on online from the pretrained checkpoint (no second pretraining)
    resumed = build_trainer(_compose(over), tmp_path / "run")
    summary = resumed.fit()
    assert summary["resumed"] and [h["phase"] for h in resumed.history] == ["offline", "online", "online"]
    assert summary["online_steps"] == 2 * 40 * 2


def test_killed_on_policy_run_resumes_exactly(minari_module_root, tmp_path, kill_after_checkpoint):
    """A `robotrl train agent=ppo` process killed after a checkpoint and resumed equals the
    uninterrupted run: the checkpoint holds the agent, every RNG, the running reward scaler and
    the envs (30-step Pendulum episodes end exactly at each 31-step iteration)."""
    base = ["agent=ppo", "env=gym", "env.name=Pendulum-v1", "env.max_episode_steps=30", "trainer.offline_steps=0",
            "trainer.offline_ratio=0.0", "trainer.progress=false", "agent.onpolicy.steps_per_iter=31",
            "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_every=1000", "agent.onpolicy.checkpoint_every=1",
            "agent.onpolicy.eval_episodes=1", "agent.onpolicy.eval_envs=1", "agent.model.batch_size=31",
            "agent.model.hidden=[16,16]", "agent.model.critic_hidden=[16,16]", "agent.model.n_epochs=2",
            "device=cpu", "torch_threads=1"]
    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "robotrl.cli", "train", *base, "agent.onpolicy.iterations=100000", f"run_dir={run_dir}"]
    killed_at = kill_after_checkpoint(cmd, _env(minari_module_root), run_dir, min_step=120)
    iterations = killed_at // 60 + 2  # 60 env steps per iteration: the resumed run does two more
    res = _robotrl(["train", *base, f"agent.onpolicy.iterations={iterations}", f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    straight = build_trainer(_compose([*base, f"agent.onpolicy.iterations={iterations}"]), tmp_path / "straight")
    straight.fit()
    resumed = load_checkpoint(run_dir)
    assert resumed["step"] == straight.step == iterations * 60
    for part in ("policy", "critic"):
        a, b = straight.agent.state_dict()[part], resumed["agent"][part]
        for k in a:
            assert torch.equal(a[k], b[k]), (part, k)
    assert resumed["collector"]["scaler"]["count"] == straight.loop.collector.scaler.count
    assert json.loads((run_dir / "report.json").read_text())["summary"]["resumed"] is True
    assert any((run_dir / "tb").iterdir()), "on-policy runs write TensorBoard events"


def test_piped_output_prints_summary_lines_not_a_bar(bc_cli_run):
    """With stdout/stderr piped (a log file), progress is one summary line per 5 % of the
    budget, not a tqdm refresh per update (the end-to-end run's own output: 300 updates)."""
    res, _ = bc_cli_run
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("[bc on ")]
    assert len(lines) == 20, lines
    assert lines[0].startswith("[bc on ") and " 15/300 (5%) step 15 · " in lines[0] and "loss" in lines[0]
    assert " 300/300 (100%) step 300 · " in lines[-1]
    assert "\r" not in res.stderr and "it/s]" not in res.stderr  # no bar refreshes


def test_keep_best_keeps_the_policy_of_the_best_evaluation(minari_module_root, tmp_path):
    """trainer.keep_best: checkpoints/best.pt is the policy of the first best evaluation (success rate here), the
    very weights a run stopped at that step holds (training is deterministic), and the summary names it."""
    from robotrl.policy import load_policy

    base = [*TINY, "trainer.eval_every=50", "trainer.checkpoint_every=100000", "device=cpu", "trainer.eval_episodes=4",
            "trainer.eval_envs=2"]
    trainer = build_trainer(_compose([*base, "trainer.offline_steps=200", "trainer.keep_best=true"]), tmp_path / "a")
    summary = trainer.fit()
    hist = trainer.history
    scores = [h["success_rate"] for h in hist]
    step = hist[scores.index(max(scores))]["step"]
    best = load_checkpoint(tmp_path / "a" / "checkpoints" / "best.pt")
    assert best["best"] == {"metric": "success_rate", "score": max(scores), "step": step} and best["step"] == step
    assert summary["best"]["step"] == step and summary["best"]["checkpoint"].endswith("best.pt")
    stopped = build_trainer(_compose([*base, f"trainer.offline_steps={step}"]), tmp_path / "b")
    stopped.fit()
    pol, want = load_policy(str(tmp_path / "a" / "checkpoints" / "best.pt")).state_dict(), stopped.agent.policy.state_dict()
    for k in want:
        assert torch.equal(pol[k], want[k]), k
    assert not (tmp_path / "b" / "checkpoints" / "best.pt").exists()  # off by default
