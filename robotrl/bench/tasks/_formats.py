"""The result formats of the benchmark scripts, converted to the suite's one form (:mod:`robotrl.bench.schema`).

Every suite script writes the normalised form (``rows`` for throughput, ``runs`` for learning), with its own raw
figures kept under ``details``: the throughput scripts convert their measurements here as they write them
(:func:`as_result`), the learning scripts build the learning form themselves (``_common.learning_result``).
The installed package reads only that form.

Older files, written before the scripts converted their own output (studies in ``benchmarks/results/studies/``),
convert in place with ``python benchmarks/_formats.py FILE ...`` (:func:`detect` tells the format; every number is
moved, none recomputed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from robotrl.bench.schema import _row, command_of, validate_learning, validate_throughput


def _meta(doc: dict, benchmark: str) -> dict:
    return {"benchmark": benchmark, "command": command_of(doc), "environment": doc.get("environment", {})}


def _replay(doc: dict, name: str) -> list[dict]:
    s = doc["sampling"]
    mh = next((v for k, v in s.items() if k.startswith("minari sample_episodes") and "[hdf5]" in k
               and f"({doc['config']['minari_n_matched']})" in k), None)
    sb3 = s.get("sb3 ReplayBuffer.sample(256)")
    rows = []
    for k, v in s.items():
        if not k.startswith("robotrl"):
            continue
        unit = "windows/s" if "sequences" in k else "transitions/s"
        target = doc.get("target", {}).get("x_minari_required") if k == "robotrl sample(256)" else None
        rows.append(_row(f"{k[len('robotrl '):]} vs Minari sample_episodes (hdf5)", v["items_per_s_median"],
                         "minari", mh and mh["items_per_s_median"], unit, v.get("x_minari_hdf5_matched"), target))
        rows.append(_row(f"{k[len('robotrl '):]} vs SB3 ReplayBuffer.sample", v["items_per_s_median"],
                         "stable-baselines3", sb3 and sb3["items_per_s_median"], unit, v.get("x_sb3")))
    return [{**_meta(doc, name), "rows": rows}]


def _bridge(doc: dict, name: str) -> list[dict]:
    b, z = doc["bridge_step"], doc["bare_zmq_req_rep"]
    rows = [_row("bridge round trip p50", b["p50_ms"], "pyzmq", z["p50_ms"], "ms", b["p50_ms"] / z["p50_ms"], higher=False),
            _row("bridge round trip p99", b["p99_ms"], "pyzmq", z["p99_ms"], "ms", b["p99_ms"] / z["p99_ms"],
                 target=2.0, higher=False, target_on="ours", check=False)]  # tails: set by the OS scheduler
    for key in sorted(k for k in doc if k.startswith("flood_") and isinstance(doc[k], dict) and "step" in doc[k]):
        f = doc[key]
        what = f"{f['mode']} junk{', flooder at nice ' + str(f['flooder_nice']) if f.get('flooder_nice') else ''}"
        if f.get("pinned"):
            what += ", flooder pinned to its own CPU"
        elif key.endswith("_rt"):
            what += ", server and client at SCHED_FIFO (rt_priority)"
        rows.append(_row(f"bridge round trip p99 under an unauthenticated flood ({what})", f["step"]["p99_ms"],
                         "pyzmq (no flood)", z["p99_ms"], "ms", f["step"]["p99_ms"] / z["p99_ms"],
                         target=2.0, higher=False, target_on="ours", check=False))
    for hz in (50, 100):
        loop = doc.get(f"loop_{hz}hz")
        if loop:
            rows.append(_row(f"control-loop jitter p99 at {hz} Hz", loop["jitter"]["p99_ms"], None, None, "ms", None,
                             target=1.0, higher=False, target_on="ours"))
    return [{**_meta(doc, name), "rows": rows}]


def _bridge_compare(doc: dict, name: str) -> list[dict]:
    """``bench_bridge.py --baseline``: the current bridge against an older checkout, alternated in one session."""
    rows = []
    for key, label in (("bridge_step", "bridge round trip"), ("bare_zmq_req_rep", "bare pyzmq round trip")):
        for q in ("p50_ms", "p99_ms"):
            v = doc["side_by_side"][key][q]
            rows.append(_row(f"{label} {q[:3]}, this code vs the baseline checkout (median of rounds)",
                             v["median_current"], "baseline checkout", v["median_baseline"], "ms",
                             v["ratio_current_over_baseline"], higher=False, check=False))
    return [{**_meta(doc, name), "rows": rows}]


def _reinflow_latency(doc: dict, name: str) -> list[dict]:
    """``bench_reinflow.py latency``: flow chunk latency at 1/2/4 Euler steps vs DDIM-5, eager and traced, the
    1-step flow vs DDIM-5 as ``real_robot`` deploys a TorchScript file (``flow_1_deployed``) and in ONNX Runtime
    (``flow_1_onnx``; each row present when the result has it), and the 1-step
    shortcut policy vs the 1-step flow (rows present when the result has ``shortcut_1``)."""
    lat, rows = doc["latency"], []
    for kind in ("", "_traced"):
        ddim = lat[f"ddim_5{kind}"]["ms_median"]
        for k in (1, 2, 4):
            v = lat[f"flow_{k}{kind}"]["ms_median"]
            rows.append(_row(f"flow {k}-step chunk latency{' (traced)' if kind else ''}, batch 1", v,
                             f"DDIM-5{' (traced)' if kind else ''}", ddim, "ms", v / ddim, higher=False,
                             target=0.5 if k == 1 else None, target_on="ours"))
    for kind, path, detail in (("_deployed", "TorchScript as deployed", ": frozen, optimised on this machine"),
                               ("_onnx", "ONNX Runtime", "")):  # rows present when measured
        if f"flow_1{kind}" in lat and f"ddim_5{kind}" in lat:
            v, ddim = lat[f"flow_1{kind}"]["ms_median"], lat[f"ddim_5{kind}"]["ms_median"]
            rows.append(_row(f"flow 1-step chunk latency ({path}{detail}), batch 1", v, f"DDIM-5 ({path})", ddim, "ms",
                             v / ddim, higher=False, target=0.5, target_on="ours"))
    for kind, label in (("", ""), ("_traced", " (traced)"), ("_onnx", " (ONNX Runtime)")):  # shortcut rows, if measured
        if f"shortcut_1{kind}" in lat and f"flow_1{kind}" in lat:
            v, f = lat[f"shortcut_1{kind}"]["ms_median"], lat[f"flow_1{kind}"]["ms_median"]
            rows.append(_row(f"shortcut 1-step chunk latency{label}, batch 1", v, f"flow 1-step{label}", f, "ms", v / f,
                             higher=False))
    return [{**_meta(doc, name), "rows": rows}]


def _shortcut_quality(doc: dict, name: str) -> list[dict]:
    """``bench_reinflow.py shortcut``: per sampling-step count K, the shortcut policy's mean return and success over
    seeds vs the plain flow policy's at the same K (same BC budget), and its 1-step return vs flow's largest K.
    Learning-quality rows, not regression-checked (one short budget, few seeds)."""
    sm, rows = doc["summary"], []
    steps = doc["setting"]["steps"]
    for k in steps:
        for m, unit in (("return", "return"), ("success_rate", "success")):
            v, f = sm[f"shortcut_{k}"][m]["mean"], sm[f"flow_{k}"][m]["mean"]
            rows.append(_row(f"shortcut {k}-step {unit}, mean over seeds", v, f"flow {k}-step", f, unit,
                             v / f if f else None, check=False))
    v, f = sm["shortcut_1"]["return"]["mean"], sm[f"flow_{max(steps)}"]["return"]["mean"]
    rows.append(_row("shortcut 1-step return, mean over seeds", v, f"flow {max(steps)}-step", f, "return",
                     v / f if f else None, check=False))
    return [{**_meta(doc, name), "rows": rows}]


def _online_link(doc: dict, name: str) -> list[dict]:
    """``bench_online_link.py``: actor -> learner transitions/s and weight-push latency vs bare pyzmq."""
    link, bare = doc["link"], doc["bare_pyzmq"]
    rows = [_row("actor -> learner transitions (acknowledged, spilled to disk)", link["transitions_per_s"], "pyzmq",
                 bare["transitions_per_s"], "transitions/s", link["transitions_per_s"] / bare["transitions_per_s"])]
    for q in ("p50_ms", "p99_ms"):
        a, b = link["weights_push"][q], bare["weights_push"][q]
        rows.append(_row(f"weight push {q[:3]}", a, "pyzmq", b, "ms", a / b, higher=False, check=q == "p50_ms"))
    return [{**_meta(doc, name), "rows": rows}]


def _dppo_throughput(doc: dict, name: str) -> list[dict]:
    d, s = doc["dppo"], doc["sb3_ppo"]
    rows = [_row(f"DPPO iteration env steps/s ({doc.get('envs')} envs) vs SB3 PPO", d["env_steps_per_s"],
                 "stable-baselines3", s["env_steps_per_s"], "env steps/s", doc.get("dppo_over_sb3_env_steps_per_s")),
            _row("chunk inference, batch 1, DDIM 5 steps", doc["latency"]["ddim_ms"], None, None, "ms", None,
                 target=5.0, higher=False, target_on="ours")]
    return [{**_meta(doc, name), "rows": rows}]


def _qlearning_throughput(doc: dict, name: str) -> list[dict]:
    rows = []
    for label, res in (("", doc["results"]), (" (run 2)", (doc.get("repeat_threads_1") or {}).get("results", {}))):
        for algo, r in res.items():
            ours32, peer = r.get(f"robotrl {algo} fp32"), r.get(f"d3rlpy {algo}")
            pr = peer and peer["items_per_s_median"]
            rows.append(_row(f"{algo.upper()} updates/s fp32{label}", ours32 and ours32["items_per_s_median"], "d3rlpy",
                             pr, "updates/s", r.get("ratio_fp32_over_d3rlpy"), r.get("target")))
            bf = r.get(f"robotrl {algo} bf16")
            rows.append(_row(f"{algo.upper()} updates/s bf16 matmuls{label}", bf and bf["items_per_s_median"], "d3rlpy",
                             pr, "updates/s", r.get("ratio_bf16_over_d3rlpy"), r.get("target")))
            extra = ((f"robotrl {algo} fp32 unfused critic (previous)", "fp32, module-by-module critic (before fusion)",
                      r.get("ratio_fp32_unfused_over_d3rlpy")),
                     (f"robotrl {algo} N=10 LN (WSRL net) fp32", "fp32, WSRL net: 10 heads + LayerNorm (not matched)", None))
            for key, what, ratio in extra:
                c = r.get(key)
                if c and pr:
                    rows.append(_row(f"{algo.upper()} updates/s {what}{label}", c["items_per_s_median"], "d3rlpy", pr,
                                     "updates/s", ratio if ratio is not None else c["items_per_s_median"] / pr, None,
                                     check=False))  # informational rows: not regression-checked
    return [{**_meta(doc, name), "rows": rows}]


# --------------------------------------------------------------------------- learning adapters
def _dppo_learning(doc: dict, name: str) -> list[dict]:
    budget = int(doc["setting"]["env_steps"])
    labels = {"dppo": ("DPPO", "dppo", False), "ppo": ("Gaussian PPO", "ppo", False),
              "sb3_ppo": ("SB3 PPO (from scratch)", "ppo", True)}
    runs = []
    for r in doc["runs"]:
        method, family, peer = labels.get(r["method"], (r["method"], r["method"], False))
        pre, fin = r.get("pretrained"), r["finetuned"]
        start = r.get("untrained") if pre is None else pre  # from scratch: the untrained policy at step 0
        runs.append({"method": method, "family": family, "peer": peer, "seed": r["seed"],
                     "offline_score": pre and pre["return"],
                     "curve": ([[0, start["return"]]] if start else []) + [[budget, fin["return"]]],
                     "success_curve": ([[0, start["success_rate"]]] if start else []) + [[budget, fin["success_rate"]]],
                     "wall_s": r.get("finetune_wall_s")})
    return [{**_meta(doc, name), "task": doc["setting"]["env"], "metric": "return", "budgets": [budget], "runs": runs}]


def _residual(doc: dict, name: str) -> list[dict]:
    a = doc["args"]
    budget = int(a["budget"])
    per = doc["runs"]
    base = {r["seed"]: r["success"] for r in per.get("base", [])}
    labels = {"base": "base (frozen BC)", "residual_ppo": "residual PPO", "residual_offpolicy": "off-policy residual",
              "full_ppo": "full fine-tuning (Gaussian PPO)"}
    runs = []
    for m, rs in per.items():
        for r in rs:
            if m == "base":
                runs.append({"method": labels[m], "family": "bc", "peer": False, "seed": r["seed"],
                             "offline_score": r["success"], "curve": [], "wall_s": r.get("wall_s")})
                continue
            start = r.get("start_success", base.get(r["seed"]))
            runs.append({"method": labels.get(m, m), "family": m, "peer": False, "seed": r["seed"],
                         "offline_score": start, "curve": ([[0, start]] if start is not None else []) +
                         [[budget, r["success"]]], "wall_s": r.get("wall_s")})
    return [{**_meta(doc, name), "task": f"fetch-{a['task']} ({a['demos']} noisy demos, BC base)", "metric": "success",
             "budgets": [budget], "runs": runs}]


QL_LABELS = {"robotrl-wsrl": ("robotrl WSRL", "wsrl", False),
             "robotrl-calql-online": ("robotrl Cal-QL online", "calql", False),
             "d3rlpy-calql": ("d3rlpy Cal-QL", "calql", True), "sb3-sac": ("SB3 SAC (from scratch)", "sac", True),
             "robotrl-offline-calql": ("robotrl Cal-QL (offline only)", "calql", False)}


def _qlearning_learning(doc: dict, name: str) -> list[dict]:
    a = doc.get("args", {})
    seeds = a.get("seeds") or []
    per = doc["per_seed"]
    runs, steps = [], set()
    for m, rs in per.items():
        label, family, peer = QL_LABELS.get(m, (m, m, m.split("-")[0] in ("d3rlpy", "sb3")))
        for i, r in enumerate(rs):
            seed = seeds[i] if i < len(seeds) else i
            if "curve" not in r:  # offline-only score
                runs.append({"method": label, "family": family, "peer": peer, "seed": seed,
                             "offline_score": r.get("return_mean"), "curve": [], "wall_s": r.get("seconds")})
                continue
            curve = [[p[0], p[1]] for p in r["curve"]]
            steps.update(p[0] for p in curve if p[0] > 0)
            runs.append({"method": label, "family": family, "peer": peer, "seed": seed,
                         "offline_score": None if m.startswith("sb3") else curve[0][1], "curve": curve,
                         "success_curve": [[p[0], p[2]] for p in r["curve"] if len(p) > 2], "wall_s": r.get("seconds")})
    task = f"{a.get('dataset_id', 'pointmaze')} ({a.get('offline_steps', '?')} offline updates)"
    return [{**_meta(doc, name), "task": task, "metric": "return", "budgets": sorted(int(s) for s in steps), "runs": runs}]


def _online_robot(doc: dict, name: str) -> list[dict]:
    """``bench_online_robot.py``: success before / after a short online run on the twin, per mode (a method each;
    ``(paced)``: the twin kept to wall-clock time). Curves: ``[0, before]`` and ``[robot env steps, after]``."""
    runs = []
    for r in doc["runs"]:
        method = f"{r['mode']}{' (paced)' if r.get('paced') else ''}"
        runs.append({"method": method, "family": r["mode"], "peer": False, "seed": r["seed"],
                     "offline_score": r["success_before"],
                     "curve": [[0, r["success_before"]], [int(r["steps"]), r["success_after"]]], "wall_s": r["wall_s"]})
    return [{**_meta(doc, name), "task": "PointMaze twin, online RL through real actor and learner processes",
             "metric": "success", "budgets": [], "runs": runs}]


#: The converter of each script's raw output (``kind`` of :func:`as_result`).
CONVERTERS = {"replay": _replay, "bridge": _bridge, "bridge_compare": _bridge_compare,
              "reinflow_latency": _reinflow_latency, "shortcut_quality": _shortcut_quality, "online_link": _online_link,
              "dppo_throughput": _dppo_throughput, "qlearning_throughput": _qlearning_throughput,
              "dppo_learning": _dppo_learning, "residual": _residual, "qlearning_learning": _qlearning_learning,
              "online_robot": _online_robot}

#: Keys of a raw document that stay at the top level of the result (what the suite reads besides the form).
TOP = ("command", "argv", "environment", "partial")


def as_result(raw: dict, name: str, kind: str) -> dict:
    """The result document of one run of a script: the normalised form of ``raw`` (by the converter ``kind``),
    named ``name``, with ``command``, ``argv``, ``environment`` and ``partial`` kept at the top level and every other
    raw key under ``details``.

    Raises:
        KeyError: unknown ``kind``; robotrl.bench.schema.BenchFormatError: ``raw`` lacks what the form needs.
    """
    (doc,) = CONVERTERS[kind](raw, name)
    doc = validate_learning(doc) if "runs" in doc else validate_throughput(doc)
    out = {**doc, **{k: raw[k] for k in TOP if k in raw}}
    out["command"] = out.get("command") or command_of(raw)
    out["details"] = {k: v for k, v in raw.items() if k not in TOP and k != "benchmark"}
    return out


def detect(doc: dict) -> str | None:
    """The converter kind of an older raw document; None for the normalised form or an unknown one."""
    if isinstance(doc.get("rows"), list) or (isinstance(doc.get("runs"), list) and "budgets" in doc):
        return None
    if doc.get("benchmark") == "replay" and "sampling" in doc:
        return "replay"
    if "bridge_step" in doc and "bare_zmq_req_rep" in doc:
        return "bridge"
    if isinstance(doc.get("side_by_side"), dict) and "bridge_step" in doc["side_by_side"]:
        return "bridge_compare"
    if isinstance(doc.get("latency"), dict) and "ddim_5" in doc["latency"]:
        return "reinflow_latency"
    if doc.get("benchmark") == "reinflow_shortcut_quality" and "summary" in doc:
        return "shortcut_quality"
    if "link" in doc and "bare_pyzmq" in doc:
        return "online_link"
    if "dppo" in doc and "sb3_ppo" in doc:
        return "dppo_throughput"
    if isinstance(doc.get("results"), dict) and any("ratio_fp32_over_d3rlpy" in v for v in doc["results"].values()):
        return "qlearning_throughput"
    if "setting" in doc and isinstance(doc.get("runs"), list):
        return "dppo_learning"
    if "args" in doc and isinstance(doc.get("runs"), dict) and "base" in doc["runs"]:
        return "residual"
    if "per_seed" in doc:
        return "qlearning_learning"
    if str(doc.get("benchmark", "")).startswith("online_robot") and isinstance(doc.get("runs"), list):
        return "online_robot"
    return None


def main(paths: list[str]) -> int:
    """Convert older result files in place (atomically); files already in the form are left alone."""
    from robotrl.bench.runner import write_json

    for p in map(Path, paths):
        raw = json.loads(p.read_text())
        kind = detect(raw)
        if kind is None:
            print(f"{p}: already in the suite's form, or in no known format: left alone")
            continue
        write_json(p, as_result(raw, p.stem, kind))
        print(f"{p}: converted ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
