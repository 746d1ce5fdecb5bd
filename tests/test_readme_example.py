"""The README's Python API example runs as written (tiny budget through its ``STEPS`` variable)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _api_example() -> str:
    text = README.read_text()
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API section has exactly one python block"
    return blocks[0]


def test_readme_python_example_trains_evaluates_saves_and_loads(tmp_path, monkeypatch, capsys):
    from robotrl.agent import OffPolicyAgent

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEPS", "300")
    scope: dict = {}
    exec(compile(_api_example(), str(README), "exec"), scope)
    runner, summary, result = scope["runner"], scope["summary"], scope["result"]
    assert isinstance(runner.agent, OffPolicyAgent)
    assert summary["online_steps"] == 300 and runner.step == 300
    assert [h["step"] for h in runner.history] == [300, 300]  # fit's evaluation, then the example's own
    assert (tmp_path / "runs/api-example/report.json").is_file()
    assert (tmp_path / "runs/api-example/checkpoints/latest.pt").is_file()
    assert result["episodes"] == 5 and result["return_mean"] < 0  # Pendulum pays costs
    assert "report.json" in capsys.readouterr().out


def test_on_policy_agents_satisfy_their_protocol_and_have_no_explore():
    import torch

    from robotrl.agent import OffPolicyAgent, OnPolicyAgent
    from robotrl.agents.ppo import PPOAgent
    from robotrl.data import ActionScaler, ObservationNormalizer

    agent = PPOAgent(obs_dim=3, action_dim=1, obs_normalizer=ObservationNormalizer.identity(3),
                     action_scaler=ActionScaler(torch.tensor([-2.0]), torch.tensor([2.0])), device="cpu", seed=0,
                     hidden=[8], critic_hidden=[8])
    assert isinstance(agent, OnPolicyAgent) and not isinstance(agent, OffPolicyAgent)
    assert not hasattr(agent, "explore")  # on-policy agents act through their rollout policy
