"""Success conventions (issue 11 item 8): Fetch counts success at the episode's final step, the
mazes at any step; evaluation reports both and says which one ``success_rate`` is; reports
and bench tables name it."""

import gymnasium as gym
import numpy as np
import pytest

from robotrl.bench.tables import learning_table, success_metric
from robotrl.envs import make_env
from robotrl.envs.wrappers import SuccessInfo
from robotrl.evaluation import evaluate
from robotrl.report import write_report


class _Toggle(gym.Env):
    """Succeeds at steps 3-5 of a 10-step episode only (reached, then pushed away): any-step 1, final-step 0.

    ``key``: "is_success" (a gymnasium-robotics goal env, e.g. Fetch) or "success" (a maze)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, key: str):
        self.key, self.t = key, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        hit = 3 <= self.t <= 5
        return np.zeros(2, np.float32), float(hit), False, self.t >= 10, {self.key: float(hit) if self.key == "is_success" else hit}


def _eval(key, wrap=True):
    make = (lambda: SuccessInfo(_Toggle(key))) if wrap else (lambda: _Toggle(key))
    return evaluate(lambda o: np.zeros((len(o), 1), np.float32), make, 4, num_envs=2)


@pytest.mark.parametrize("wrap", [True, False])
def test_goal_env_success_is_the_final_step(wrap):
    res = _eval("is_success", wrap)
    assert res["success_metric"] == "final-step"
    assert res["success_rate"] == 0.0 and res["success_final_rate"] == 0.0 and res["success_any_rate"] == 1.0


def test_maze_success_is_any_step():
    res = _eval("success")
    assert res["success_metric"] == "any-step"
    assert res["success_rate"] == 1.0 and res["success_any_rate"] == 1.0 and res["success_final_rate"] == 0.0


def test_convention_override_and_real_families():
    res = evaluate(lambda o: np.zeros((len(o), 1), np.float32), lambda: SuccessInfo(_Toggle("success"), "final"), 2)
    assert res["success_metric"] == "final-step" and res["success_rate"] == 0.0
    for name, conv in (("fetch-reach", "final"), ("pointmaze-umaze", "any")):
        env = make_env(name)
        env.reset(seed=0)
        env.step(env.action_space.sample())
        assert env.get_wrapper_attr("success_convention") == conv, name
        env.close()


def test_report_names_the_metric_and_shows_both(tmp_path):
    h = [{"phase": "online", "step": 10, "return_mean": 1.0, "return_std": 0.0, "normalized_score": float("nan"),
          "episodes": 4.0, **{k: v for k, v in _eval("is_success").items() if k.startswith("success")}}]
    write_report(tmp_path, summary={"title": "t"}, history=h, config={})
    md = (tmp_path / "report.md").read_text()
    assert "success rate (final-step) | success rate (any-step) |" in md and "| 0.000 | 1.000 |" in md


def _doc(task, **extra):
    runs = [{"method": "residual", "family": "residual", "peer": False, "seed": s, "offline_score": 0.2,
             "curve": [[1000, 0.3], [2000, 0.5]], "wall_s": 1.0} for s in range(2)]
    return {"benchmark": "b", "task": task, "metric": "success", "budgets": [1000, 2000], "runs": runs, **extra}


def test_bench_tables_state_which_success():
    now = {"environment": {"success_convention": "..."}}
    assert "Metric: success rate (final-step)" in learning_table(_doc("fetch-push (20 noisy demos)", **now))
    assert "Metric: success rate (any-step)" in learning_table(_doc("pointmaze-umaze", **now))
    assert success_metric(_doc("fetch-push")) == "any-step"    # recorded before the convention: any step counted
    assert success_metric(_doc("fetch-push", success_metric="final-step")) == "final-step"
