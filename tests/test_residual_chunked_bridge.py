"""A residual policy on a chunked base deployed through the bridge (issue 42 item 3): ``robotrl deploy``'s body
(:func:`robotrl.real_robot.cli.run_deploy`, in this process so the base's chunk predictions can be recorded) on a
real MuJoCo twin server process behind its safety supervisor, over loopback ZeroMQ. The deployed checkpoint wraps
base + residual; the base (robotrl's diffusion policy, action horizon 4, chunks of Te = 3) predicts one chunk
every Te control ticks, restarted at each episode start, and every applied action is that chunk's entry of the
tick plus the residual's correction on (observation, base action)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.agents.diffusion import DiffusionPolicy
from robotrl.agents.residual import ResidualPolicy
from robotrl.checkpoint import save_checkpoint
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.policy import policy_state
from robotrl.real_robot.launch import ServerProcess
from robotrl.real_robot.protocol import write_key_file

TE, EPISODES, STEPS = 3, 2, 20
# a real robot process against the clock (no held tick allowed): the serial realtime pass (tests/conftest.py)
pytestmark = pytest.mark.realtime


def _residual_checkpoint(path) -> ResidualPolicy:
    torch.manual_seed(0)
    base = DiffusionPolicy(8, 2, action_horizon=4, act_steps=TE, denoising_steps=5, denoiser_kwargs={"hidden": [32]},
                           sampler="ddim", ddim_steps=3).eval()
    pol = ResidualPolicy(8, 2, base, hidden=[16], head="tanh", residual_scale=0.2)
    pol.set_normalizers(ObservationNormalizer.identity(8), ActionScaler(-np.ones(2), np.ones(2)))
    with torch.no_grad():  # a trained-looking residual: a correction that depends on the observation
        pol.residual.net[-1].weight.normal_(0, 0.5)
        pol.residual.net[-1].bias.fill_(0.1)
    save_checkpoint(path, {"policy": policy_state(pol.eval())})
    return pol


def _key(o) -> bytes:
    return np.round(np.asarray(o, np.float32), 5).tobytes()


def test_deployed_residual_executes_its_base_chunks_through_the_supervised_bridge(tmp_path, monkeypatch):
    from robotrl.real_robot.cli import run_deploy

    torch.set_num_threads(1)
    pol = _residual_checkpoint(tmp_path / "residual.pt")
    chunks: dict[bytes, np.ndarray] = {}
    predict = DiffusionPolicy.predict_chunk

    def recording(self, obs_hist, *a, **k):
        out = predict(self, obs_hist, *a, **k)
        for o, c in zip(obs_hist[:, -1].numpy(), out.numpy()):
            chunks[_key(o)] = c
        return out

    monkeypatch.setattr(DiffusionPolicy, "predict_chunk", recording)
    key = write_key_file(tmp_path / "robot.key")
    with ServerProcess(key, ["robot.safety.watchdog_s=0.1"]) as srv:
        with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
            cfg = compose(config_name="deploy", overrides=[
                f"checkpoint={tmp_path / 'residual.pt'}", f"endpoint={srv.endpoint}", f"key_file={key}",
                f"episodes={EPISODES}", f"max_steps={STEPS}", "seed=3", "deadline_frac=0.9", "rate_hz=20",
                "dataset_id=robot/pointmaze/chunked-residual-v0", f"dataset_root={tmp_path / 'minari'}"])
        summary = run_deploy(cfg)
    assert summary["episodes"] == EPISODES and summary["stopped"] == "max_steps", summary
    import minari

    ds = minari.load_dataset("robot/pointmaze/chunked-residual-v0")
    checked = 0
    for ep in ds.iterate_episodes():
        obs, actions = ep.observations[:-1], ep.actions
        held = np.asarray(ep.infos["held"]).astype(bool).reshape(-1)[1:]
        assert len(actions) == STEPS and not held.any(), "the supervisor held the robot: the run was too slow"
        for t in range(STEPS):
            if t % TE == 0:  # a chunk predicted from exactly this tick's observation
                chunk = chunks[_key(obs[t])]
            base = torch.as_tensor(chunk[t % TE])[None]
            o = torch.as_tensor(obs[t], dtype=torch.float32)[None]
            with torch.no_grad():
                want = pol.combine(base, pol.deterministic_residual(pol.inputs(o, base)))[0].numpy()
            np.testing.assert_allclose(actions[t], want, rtol=0, atol=1e-5)
            checked += 1
    assert checked == EPISODES * STEPS
    # one chunk per Te ticks per episode (plus the loader's probe and the scheduler's warm-up calls on zeros)
    assert len(chunks) >= EPISODES * -(-STEPS // TE)


@pytest.fixture(autouse=True)
def _minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
