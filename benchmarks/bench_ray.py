"""Ray rollout workers against local vector envs: measured collection rates and a projected scaling curve.

Measured side by side in one run, round-robin (one iteration of each contender per repeat,
medians reported), for PPO (Gaussian MLP, 256×256) and DPPO (MLP denoiser, K denoising steps,
chunks of ``Te`` env steps) on Hopper-v5, ``N`` envs, ``T`` collection steps per iteration:

- local SyncVectorEnv (robotrl's default collector),
- gymnasium ``AsyncVectorEnv`` (one process per env; the peer),
- ``collector=ray`` with 1 and 2 workers (``N`` envs split over them).

Only collection is timed (the PPO/DPPO update runs on the learner and costs the same whichever
collector fed it). Transport is measured on the real objects: the policy weights sent per
iteration and one worker's rollout (bytes, and serialisation + deserialisation time with
pickle protocol 5, the format of Ray's object store).

Projection to ``W`` = 8…64 workers (one node each, ``n`` envs per worker, weak scaling): one
iteration takes ``t_worker + t_fixed + W · t_per_worker`` where ``t_worker`` is a worker's own
collection time for its ``n`` envs (measured: local sync collection of ``n`` envs), ``t_fixed`` the
per-iteration overhead of the Ray path measured here (Ray with 1 worker minus local collection of
the same envs: the remote calls, the weights' put, the reward scaling over all envs), and
``t_per_worker`` what the learner's node spends per worker: the returned rollout's deserialisation
and bytes, and one copy of the weights sent out (an upper bound: Ray's object manager also lets
nodes fetch the weights from each other), over its link at an assumed bandwidth (``--gbit``,
default 10 Gbit/s; 1 Gbit/s also reported).
Env steps/s = ``W · n · T · Te / iteration time``; it ignores stragglers and the network latency of
the calls (milliseconds), so it is an upper bound.

Usage (small, as run on the shared 2-core machine)::

    python benchmarks/bench_ray.py --envs 4 --steps 32 --repeats 3 --out studies/ray/collection.json
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, set_threads, write_json  # noqa: E402

from robotrl.distributed import init_ray, loopback_only, state_to_arrays  # noqa: E402

ENV = "Hopper-v5"
MODELS = {
    "ppo": {"_target_": "robotrl.agents.ppo.PPOAgent", "hidden": [256, 256]},
    "dppo": {"_target_": "robotrl.agents.dppo.DPPOAgent", "action_horizon": 4, "act_steps": 4, "denoising_steps": 10,
             "ft_denoising_steps": 5, "denoiser_kwargs": {"hidden": [256, 256, 256]}},
}


def _spec(name: str) -> dict:
    from robotrl.envs import env_info

    info = env_info(ENV)
    return {"model": MODELS[name], "obs_dim": info.obs_dim, "action_dim": info.action_dim, "seed": 0}


def _local(agent, n: int, vectorization: str):
    from robotrl.envs import make_env
    from robotrl.onpolicy import RolloutCollector

    envs = make_env(ENV, num_envs=n, seed=0, vectorization=vectorization, action_chunk=int(agent.policy.Te))
    col = RolloutCollector(envs, agent.policy.To, gamma=agent.gamma, seed=0)
    col.close = envs.close
    return col


def _ray(agent, name: str, n: int, workers: int):
    from robotrl.distributed.collector import RayCollectorConfig, RayRolloutCollector

    return RayRolloutCollector(agent, agent_spec=_spec(name), env_args={"name": ENV, "env_kwargs": {}, "max_episode_steps": None},
                               num_envs=n, cfg=RayCollectorConfig(workers=workers), seed=0, reset_seed=0)


def _transport(agent, col, steps: int) -> dict:
    """Bytes and pickle-5 round-trip seconds of the weights and of one worker's rollout."""
    w = state_to_arrays(agent.policy.state_dict())
    part = col.ray.get(col.shards[0].actor.collect.remote(col.ray.put(w), steps, None))
    out = {}
    for what, obj in (("weights", w), ("rollout_per_worker", part)):
        t0 = time.perf_counter()
        blob = pickle.dumps(obj, protocol=5)
        t1 = time.perf_counter()
        pickle.loads(blob)
        t2 = time.perf_counter()
        out[what] = {"bytes": len(blob), "serialize_s": t1 - t0, "deserialize_s": t2 - t1}
    out["rollout_per_worker"]["envs"] = int(part["rewards"].shape[1])
    return out


def measure(name: str, n: int, steps: int, repeats: int) -> dict:
    from robotrl.distributed.collector import build_worker_agent

    agent = build_worker_agent(_spec(name))
    cols = {"local sync": _local(agent, n, "sync"), "gymnasium AsyncVectorEnv": _local(agent, n, "async"),
            "ray 1 worker": _ray(agent, name, n, 1), "ray 2 workers": _ray(agent, name, n, 2),
            f"local sync, {n // 2} envs (one worker's share)": _local(agent, n // 2, "sync")}
    rates: dict[str, list[float]] = {k: [] for k in cols}
    secs: dict[str, list[float]] = {k: [] for k in cols}
    try:
        for c in cols.values():  # warm-up: worker imports, first calls
            c.collect(agent, 2)
        for _ in range(repeats):
            for k, c in cols.items():
                t0 = time.perf_counter()
                ro = c.collect(agent, steps)
                dt = time.perf_counter() - t0
                rates[k].append(ro.env_steps / dt)
                secs[k].append(dt)
        transport = _transport(agent, cols["ray 1 worker"], steps)
    finally:
        for c in cols.values():
            c.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    med_s = {k: statistics.median(v) for k, v in secs.items()}
    return {"agent": name, "envs": n, "steps_per_iter": steps, "action_chunk": int(agent.policy.Te),
            "env_steps_per_s": med, "seconds_per_iter": med_s, "rates_all": rates, "transport": transport,
            "fixed_overhead_s": max(0.0, med_s["ray 1 worker"] - med_s["local sync"])}


def project(m: dict, gbits: tuple[float, ...], workers=(8, 16, 32, 64)) -> list[dict]:
    """Projected env steps/s for ``W`` workers with ``n = envs/2`` envs each (module doc)."""
    n = m["envs"] // 2
    t_worker = m["seconds_per_iter"][f"local sync, {n} envs (one worker's share)"]
    per_worker_steps = m["env_steps_per_s"][f"local sync, {n} envs (one worker's share)"] * t_worker
    tr, wt = m["transport"]["rollout_per_worker"], m["transport"]["weights"]
    rows = []
    for gbit in gbits:
        bw = gbit * 1e9 / 8  # bytes/s of the learner's link
        # per worker: its rollout's deserialisation and bytes in, and (upper bound) one copy of the weights out
        per = tr["deserialize_s"] * n / tr["envs"] + tr["bytes"] * n / tr["envs"] / bw + wt["bytes"] / bw
        for w in workers:
            t = t_worker + m["fixed_overhead_s"] + w * per
            rows.append({"workers": w, "envs": w * n, "gbit_per_s": gbit, "iteration_s": t,
                         "env_steps_per_s": w * per_worker_steps / t, "ideal_env_steps_per_s": w * per_worker_steps / t_worker,
                         "efficiency": t_worker / t})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--agents", nargs="+", default=["ppo", "dppo"])
    p.add_argument("--gbit", type=float, nargs="+", default=[10.0, 1.0])
    p.add_argument("--out", default=None)
    p.add_argument("--reproject", default=None, help="recompute the projection of a results file (no measuring)")
    a = p.parse_args()
    if a.reproject:
        doc = json.loads(Path(a.reproject).read_text())
        for m in doc["results"]:
            m["projection"] = project(m, tuple(a.gbit))
        write_json(Path(a.reproject).resolve(), doc)
        print(f"written: {a.reproject}")
        return
    set_threads(1)
    loopback_only()
    init_ray(num_cpus=4)  # logical CPUs: the 1- and 2-worker collectors (3 actors) live side by side; timed in turn
    results = []
    for name in a.agents:
        m = measure(name, a.envs, a.steps, a.repeats)
        m["projection"] = project(m, tuple(a.gbit))
        results.append(m)
        print(f"\n{name}: env steps/s (median of {a.repeats}), {a.envs} envs x {a.steps} steps x Te={m['action_chunk']}")
        for k, v in m["env_steps_per_s"].items():
            print(f"  {k:44s} {v:9.0f}  ({m['seconds_per_iter'][k] * 1e3:.0f} ms/iter)")
        t = m["transport"]
        print(f"  weights {t['weights']['bytes'] / 1e6:.2f} MB (pickle {t['weights']['serialize_s'] * 1e3:.1f} ms); rollout/worker "
              f"{t['rollout_per_worker']['bytes'] / 1e6:.2f} MB (unpickle {t['rollout_per_worker']['deserialize_s'] * 1e3:.1f} ms); "
              f"fixed Ray overhead {m['fixed_overhead_s'] * 1e3:.0f} ms/iter")
        for r in m["projection"]:
            print(f"  projected W={r['workers']:2d} @ {r['gbit_per_s']:g} Gbit/s: {r['env_steps_per_s']:9.0f} env steps/s "
                  f"(efficiency {r['efficiency']:.2f})")
    doc = {"benchmark": "ray_collection", "env": ENV, "results": results,
           "rows": [{"what": f"{m['agent']} collection, {k}", "ours": v, "unit": "env steps/s",
                     "peer_name": "gymnasium AsyncVectorEnv", "peer": m["env_steps_per_s"]["gymnasium AsyncVectorEnv"],
                     "ratio": v / m["env_steps_per_s"]["gymnasium AsyncVectorEnv"], "regression_check": False}
                    for m in results for k, v in m["env_steps_per_s"].items()],
           "command": "python " + " ".join(sys.argv), "environment": environment(("ray",)),
           "note": "shared 2-core machine (other agents' jobs running): one small run; compare ratios, not absolutes"}
    if a.out:
        write_json(a.out, doc)
        print(f"written: {a.out}")


if __name__ == "__main__":
    main()
