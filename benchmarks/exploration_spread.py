"""How much an on-policy chunk agent explores in the executed action, before and after fine-tuning (issue 15).

For DPPO and ReinFlow runs (``bench_fetch_chunked.py``'s run directories), on ``--states`` dataset observations:

* ``rollout_std``: per-entry std of the executed chunk ``(Te, Da)`` over ``--draws`` calls of the agent's
  ``rollout_act`` (the exploratory chain the PPO update scores), normalised action units ``[-1, 1]``;
* ``eval_std``: the same for the deployable policy's ``sample_normalized`` (its own chunk-to-chunk spread, from the
  random start noise ``x_0``; no exploration noise);
* ``added_std``: ``sqrt(rollout_var - eval_var)``, the spread exploration adds on top of the policy's own;
* ``mean_shift``: RMS distance between the two samplers' mean chunks.

Each quantity is averaged over states and entries, for the fine-tuning's starting policy (``start``: the warm start
``trainer.init_from``) and its last checkpoint (``end``). Sampling only, no env steps::

    MINARI_DATASETS_PATH=... python benchmarks/exploration_spread.py RUN_DIR [RUN_DIR ...] --out studies/fetch-push-chunked/exploration_spread.json
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, set_threads, write_json  # noqa: E402


def spread(agent, hist: np.ndarray, draws: int) -> dict[str, float]:
    """Spread statistics of ``agent`` on histories ``(N, To, Do)`` (see the module docstring)."""
    p = agent.policy
    roll = np.stack([p.action_scaler.normalize(torch.as_tensor(agent.rollout_act(hist)[0], dtype=torch.float32))
                     .cpu().numpy().reshape(len(hist), p.Te, -1) for _ in range(draws)])  # (R, N, Te, Da)
    cond = p.condition(torch.as_tensor(hist, device=agent.device))
    with torch.no_grad():
        ev = np.stack([p.sample_normalized(cond)[:, : p.Te].cpu().numpy() for _ in range(draws)])
    var_r, var_e = float(roll.var(0).mean()), float(ev.var(0).mean())
    return {"rollout_std": var_r ** 0.5, "eval_std": var_e ** 0.5, "added_std": max(var_r - var_e, 0.0) ** 0.5,
            "mean_shift": float(np.sqrt(((roll.mean(0) - ev.mean(0)) ** 2).mean()))}


def measure(run: Path, states: int, draws: int, seed: int) -> dict:
    """``{"run", "agent", "start", "end"}`` for one run directory (its ``.hydra/config.yaml`` and last checkpoint)."""
    from omegaconf import OmegaConf

    from robotrl.checkpoint import load_checkpoint
    from robotrl.data import load_dataset
    from robotrl.experiment import build_trainer
    from robotrl.warmstart import warm_start

    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    source = cfg.trainer.init_from
    cfg.agent.onpolicy.num_envs = 1
    cfg.trainer.init_from = None
    with tempfile.TemporaryDirectory() as tmp:  # the trainer's run directory: nothing is trained or written to it
        agent = build_trainer(cfg, Path(tmp), overrides=[]).loop.agent
    obs = load_dataset(cfg.dataset.id).observations
    idx = np.random.default_rng(seed).choice(len(obs), states, replace=False)
    hist = obs[idx][:, None].astype(np.float32)  # (N, To=1, Do)
    warm_start(agent, source)
    out = {"run": str(run), "agent": str(cfg.agent.name), "start": spread(agent, hist, draws)}
    agent.load_state_dict(load_checkpoint(run)["agent"])
    out["end"] = spread(agent, hist, draws)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="DPPO / ReinFlow run directories")
    ap.add_argument("--states", type=int, default=128)
    ap.add_argument("--draws", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="studies/fetch-push-chunked/exploration_spread.json")
    args = ap.parse_args()
    set_threads(1)
    rows = []
    for run in args.runs:
        r = measure(run, args.states, args.draws, args.seed)
        rows.append(r)
        print(run.name, *(f"{k}: " + " ".join(f"{n} {v:.3f}" for n, v in r[k].items()) for k in ("start", "end")))
    print("wrote", write_json(args.out, {"benchmark": "exploration_spread", "command": command_line(),
                                         "states": args.states, "draws": args.draws, "runs": rows}))


if __name__ == "__main__":
    main()
