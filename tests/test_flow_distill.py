"""One-step distillation (agents/flow/distill.py): the diffusion teacher's map is its own DDIM (η = 0)
sampling, a 1-step student learns a 4-step flow teacher's noise-to-chunk map, the teacher survives
the agent's state round trip, and bad set-ups are clear errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from robotrl.agents.diffusion import DiffusionPolicy
from robotrl.agents.flow import FlowPolicy
from robotrl.agents.flow.distill import FlowDistillAgent, teacher_chunk
from robotrl.checkpoint import save_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.policy import policy_state

NET = dict(obs_horizon=1, action_horizon=2, act_steps=2, denoiser="mlp", denoiser_kwargs={"hidden": [64, 64], "time_dim": 8})


def _student(**kw) -> FlowDistillAgent:
    return FlowDistillAgent(3, 2, obs_normalizer=ObservationNormalizer.identity(3),
                            action_scaler=ActionScaler(-np.ones(2), np.ones(2)), **{**NET, "lr": 3e-3, "ema_start": 10**6,
                                                                                     "max_grad_norm": None, **kw})


def test_diffusion_teacher_map_is_its_ddim_eta0_sampling_from_the_same_start_noise():
    torch.manual_seed(0)
    teacher = DiffusionPolicy(3, 2, denoising_steps=10, sampler="ddim", ddim_steps=5, **NET)
    cond = torch.randn(5, 1, 3)
    x0 = torch.randn((5, 2, 2), generator=torch.Generator().manual_seed(4))
    got = teacher_chunk(teacher, cond, x0)
    want = teacher.sample_normalized(cond, sampler="ddim", generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(got, want)
    assert not torch.allclose(teacher_chunk(teacher, cond, -x0), got)


@pytest.mark.slow
def test_one_step_student_learns_a_four_step_flow_teacher_and_keeps_it_in_its_state(tmp_path, one_thread):
    torch.manual_seed(0)
    teacher = FlowPolicy(3, 2, flow_steps=4, **NET)
    with torch.no_grad():
        for p in teacher.velocity.parameters():
            p.mul_(2.0)  # a curved flow: its 1-step and 4-step maps differ
    save_checkpoint(tmp_path / "teacher.pt", {"policy": policy_state(teacher)})
    agent = _student(lr=1e-2)
    with pytest.raises(ConfigError, match="init_from"):
        agent.loss(SimpleNamespace(observations=torch.randn(4, 1, 3)))
    agent.load_pretrained(str(tmp_path / "teacher.pt"))
    cond, x0 = torch.randn(256, 1, 3), torch.randn(256, 2, 2)
    target = teacher_chunk(teacher, cond, x0)

    def error() -> float:
        return float((agent.policy.sample_normalized(cond, x0=x0) - target).abs().mean())

    before = error()  # the student starts as the teacher's own 1-step sampler; distilled, it beats it
    torch.testing.assert_close(agent.policy.sample_normalized(cond, x0=x0), teacher.sample_normalized(cond, steps=1, x0=x0))
    assert before > 0.05
    for u in range(400):
        agent.update(SimpleNamespace(observations=torch.randn(128, 1, 3)), u)
    after = error()
    assert after < 0.6 * before, (before, after)  # measured: 0.114 -> 0.058
    assert agent.policy.K == 1
    again = _student()
    again.load_state_dict(agent.state_dict())
    assert isinstance(again.teacher, FlowPolicy) and again.teacher.K == 4
    torch.testing.assert_close(teacher_chunk(again.teacher, cond, x0), target)
    torch.testing.assert_close(again.policy.sample_normalized(cond, x0=x0), agent.policy.sample_normalized(cond, x0=x0))


def test_a_teacher_with_other_chunk_sizes_is_refused(tmp_path):
    teacher = FlowPolicy(3, 2, **{**NET, "action_horizon": 4, "act_steps": 4})
    save_checkpoint(tmp_path / "t.pt", {"policy": policy_state(teacher)})
    with pytest.raises(CheckpointError, match="differs from the student"):
        _student().load_pretrained(str(tmp_path / "t.pt"))


def test_dppo_teacher_runs_its_fine_tuned_chain_and_its_fine_tuned_copy_reaches_the_student(tmp_path):
    """A DPPO teacher (DDPM K=10, K'=4) gives the chunk of the chain DPPO fine-tuned (its evaluation sampler
    from the same start noise); resetting its fine-tuned copy to the pretrained weights changes that chunk,
    so the fine-tuned weights are what the student learns."""
    from robotrl.agents.dppo import DPPOPolicy

    torch.manual_seed(0)
    teacher = DPPOPolicy(3, 2, denoising_steps=10, ft_denoising_steps=4, **NET)
    with torch.no_grad():
        for w in teacher.denoiser_ft.parameters():
            w.add_(torch.randn_like(w) * 0.5)
    cond = torch.randn(16, 1, 3)
    x0 = torch.randn((16, 2, 2), generator=torch.Generator().manual_seed(4))
    tuned = teacher_chunk(teacher, cond, x0, generator=torch.Generator().manual_seed(5))
    want = teacher.sample_normalized(cond, generator=torch.Generator().manual_seed(5), x_init=x0)
    torch.testing.assert_close(tuned, want)
    # through the agent: the warm-started teacher is the fine-tuned one
    save_checkpoint(tmp_path / "dppo.pt", {"policy": policy_state(teacher)})
    agent = _student()
    agent.load_pretrained(str(tmp_path / "dppo.pt"))
    assert isinstance(agent.teacher, DPPOPolicy)
    torch.testing.assert_close(teacher_chunk(agent.teacher, cond, x0, generator=torch.Generator().manual_seed(5)),
                               tuned)
    agent.teacher.sync_ft_from_base()
    frozen = teacher_chunk(agent.teacher, cond, x0, generator=torch.Generator().manual_seed(5))
    assert float((frozen - tuned).abs().max()) > 1e-2
    with pytest.raises(ConfigError, match="teacher_steps"):
        teacher_chunk(teacher, cond, x0, steps=5)
