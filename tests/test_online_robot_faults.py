"""Both online processes killed (issue 16): each resumes from what it kept on disk.

Real learner and actor processes (the twin in the actor's process). kill -9 the learner,
then kill -9 the actor; a new actor with the same work dir and no learner running acts with
the last weights it kept (``work_dir/weights.npz``), records, and keeps its transitions; a
learner started again resumes from its checkpoint; in the end every recorded transition is
in the learner's buffer exactly once and in the Minari recording.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch
from online_procs import SMALL_SAC, episode_lines, free_port, start, status, stop_all, wait


@pytest.mark.slow
@pytest.mark.parametrize("lost_mode", ["continue", "hold"])
def test_both_killed_the_actor_acts_with_its_last_weights_and_nothing_is_lost(tmp_path, lost_mode):
    """``lost_mode``: what the first actor does once the learner is killed (act with its last
    weights, or hold the robot); the restarted actor always acts with the weights it kept."""
    from robotrl.checkpoint import load_arrays, load_checkpoint
    from robotrl.data.dataset import load_dataset
    from robotrl.real_robot.learner_link import load_weights
    from robotrl.real_robot.online_eval import pushed_policy
    from robotrl.real_robot.protocol import write_key_file

    torch.set_num_threads(1)
    key = write_key_file(tmp_path / "online.key")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    port = free_port()
    run_dir, work, wdir = tmp_path / "learner", tmp_path / "actor", tmp_path / "pushed"
    common = [f"key_file={key}", "robot.realtime=false"]
    learner_args = ["learner", *common, f"endpoint=tcp://127.0.0.1:{port}", f"run_dir={run_dir}", *SMALL_SAC,
                    "trainer.offline_ratio=0", "push_period_s=0.3", "checkpoint_every_s=1.0", f"pushed_weights_dir={wdir}"]
    actor_args = ["actor", *common, f"learner=tcp://127.0.0.1:{port}", "max_steps=40", "rate_hz=100",
                  "explore=false", f"work_dir={work}", "link_timeout_s=1.0", "ack_timeout_s=0.5",
                  "dataset_id=robot/test/faults-v0", "drain_timeout_s=120"]
    logs = {n: tmp_path / f"{n}.log" for n in ("learner1", "actor1", "learner2", "actor2")}
    learner = start(learner_args, logs["learner1"], env)
    actor = start([*actor_args, "episodes=100000", f"on_learner_lost={lost_mode}"], logs["actor1"], env)
    learner2 = actor2 = None
    kept = work / "weights.npz"

    def kept_version() -> int:
        try:
            w = load_weights(kept)
        except Exception:  # noqa: BLE001  (being replaced this instant: look again)
            return -1
        return -1 if w is None else w.version

    try:
        wait(lambda: kept_version() >= 3 and status(run_dir).get("ingested", 0) >= 100
             and (run_dir / "checkpoints" / "latest.pt").exists(), "trained weights at the actor",
             [(learner, logs["learner1"]), (actor, logs["actor1"])])
        learner.send_signal(signal.SIGKILL)
        learner.wait()
        wait(lambda: any(e["lost"] for e in episode_lines(logs["actor1"])), "an episode without the learner",
             [(actor, logs["actor1"])])
        actor.send_signal(signal.SIGKILL)
        actor.wait()
        v_kept = load_weights(kept).version
        n_before = len(list((work / "episodes").glob("ep_*.npz")))
        # a new actor, no learner: it acts with the weights it kept
        actor2 = start([*actor_args, "episodes=3", "on_learner_lost=continue"], logs["actor2"], env)
        wait(lambda: len(episode_lines(logs["actor2"])) >= 2, "the new actor's episodes without a learner",
             [(actor2, logs["actor2"])])
        learner2 = start(learner_args, logs["learner2"], env)
        wait(lambda: actor2.poll() is not None, "the new actor to drain", [(learner2, logs["learner2"])], timeout=180)
        assert actor2.returncode == 0, logs["actor2"].read_text()[-3000:]
        learner2.send_signal(signal.SIGTERM)
        assert learner2.wait(timeout=60) == 0, logs["learner2"].read_text()[-3000:]
    finally:
        stop_all(learner, actor, learner2, actor2)
    assert "resumed run" in logs["learner2"].read_text()
    lost1 = [e for e in episode_lines(logs["actor1"]) if e["lost"]]
    assert lost1 and all((e["held"] == e["lost"]) == (lost_mode == "hold") for e in lost1)
    eps2 = episode_lines(logs["actor2"])
    assert eps2[0]["lost"] == eps2[0]["steps"] and eps2[0]["versions"] == [v_kept]  # no learner, its kept weights

    numbers = sorted(int(p.stem[3:]) for p in (work / "episodes").glob("ep_*.npz"))
    assert numbers == list(range(len(numbers))) and len(numbers) >= n_before + 3
    eps = {i: load_arrays(work / "episodes" / f"ep_{i:06d}.npz") for i in numbers}
    # the first episode after the restart: acted with the kept version, exactly that policy's actions
    z = eps[eps2[0]["episode"]]
    ck = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    pol = pushed_policy(wdir, v_kept, ck["policy"]["target"], ck["policy"]["kwargs"])
    rows = np.flatnonzero(z["info_weights_version"][1:] == v_kept)
    assert rows.size and not z["info_learner_connected"][1:][rows].any()
    with torch.no_grad():
        out = pol(torch.from_numpy(z["observations"][:-1][rows])).numpy()
    np.testing.assert_allclose(out, z["info_policy_action"][1:][rows], rtol=0, atol=1e-5)

    # exactly once in the learner's buffer and in the Minari recording
    rec_keys = [(i, int(s)) for i in numbers for s in eps[i]["info_step"][1:]]
    size = int(ck["online"]["size"])
    keys = [tuple(map(int, k)) for k in ck["online_keys"].numpy()[:size]]
    assert len(keys) == len(set(keys)) == len(rec_keys) and sorted(keys) == sorted(rec_keys)
    data = load_dataset(str(tmp_path / "minari" / "robot" / "test" / "faults-v0"))
    assert data.num_transitions == len(rec_keys)
    assert json.loads((work / "summary.json").read_text())["drained"]
