"""Several actors on one learner (issue 42, item 7): one actor's event ends only its own episode.

A real ``robotrl learner`` process serves three actors over real authenticated sockets (the actors' link,
:class:`ActorLink`, driven from this process with rows whose observations name their actor, episode and step).
Actor ``a0`` is killed mid-episode (its link dies, a new ``a0`` starts its next episode without ending the old
one); ``a1`` and ``a2`` are taken over by a human for stretches that overlap, and their takeovers end at
different times. Afterwards, in the learner's checkpoint: every episode of every actor is one linked chain of
exactly its steps in the online buffer, the cut one included, and every ended episode (and every ended takeover
segment in the demonstration buffer) has its Monte Carlo return-to-go. Before the fix, a0's cut and a1's
takeover end reset every actor's open episode: the others' episodes were split and their first parts never got
MC returns.
"""

from __future__ import annotations

import json

import os
import signal
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from online_procs import start, status, wait

from robotrl.data.returns import discounted_return_to_go
from robotrl.real_robot.factory import make_robot
from robotrl.real_robot.learner_link import ActorLink
from robotrl.real_robot.protocol import load_key, write_key_file

GAMMA = 0.99
ACTORS = ("a0", "a1", "a2")


def _spec() -> dict:
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "robotrl" / "configs" / "robot" / "sim.yaml")
    cfg.realtime = False
    return make_robot(OmegaConf.to_container(cfg, resolve=True)).spec().to_dict()  # type: ignore[arg-type]


def _row(do: int, da: int, actor: int, n: int, episode: int, step: int, *, end: str = "", takeover: bool = False) -> dict:
    obs = np.zeros(do, np.float32)
    obs[:3] = (actor, episode, step)
    return {"n": n, "episode": episode, "step": step, "obs": obs, "next_obs": obs + np.float32(0.5),
            "action": np.full(da, 0.25, np.float32), "requested": np.full(da, 0.25, np.float32),
            "policy_action": np.full(da, 0.25, np.float32), "reward": 0.1 * step + actor,
            "terminated": end == "terminated", "truncated": end == "truncated", "success": end == "terminated",
            "intervention": takeover, "safety_modified": False, "held": False, "learner_connected": True,
            "weights_version": 0, "time": time.time(), "rtt_s": 0.001, "jitter_s": 0.0}


def _chains(buf: dict) -> dict[tuple[int, int], list[int]]:
    """``{(actor, episode): slots in step order}`` of a saved buffer, read from the observations."""
    obs = buf["observations"].numpy()[: int(buf["size"])]
    out: dict = {}
    for s in np.argsort(obs[:, 2], kind="stable"):
        out.setdefault((int(obs[s, 0]), int(obs[s, 1])), []).append(int(s))
    return out


def _check_whole(buf: dict, slots: list[int], steps: list[int], what: str) -> None:
    """``slots`` are exactly ``steps`` of one episode, linked in order, with their MC returns."""
    obs, nxt, prv = buf["observations"].numpy(), buf["next_idx"].numpy(), buf["prev_idx"].numpy()
    assert [int(obs[s, 2]) for s in slots] == steps, what
    assert prv[slots[0]] == -1 and nxt[slots[-1]] == -1, f"{what}: linked to another episode"
    for a, b in zip(slots[:-1], slots[1:]):
        assert nxt[a] == b and prv[b] == a, f"{what}: split between steps {int(obs[a, 2])} and {int(obs[b, 2])}"
    assert len(set(buf["episode_id"].numpy()[slots].tolist())) == 1, what
    mc = buf["mc_returns"].numpy()[slots]
    want = discounted_return_to_go(buf["rewards"].numpy()[slots], GAMMA)
    assert np.isfinite(mc).all(), f"{what}: ended but has no MC return"
    np.testing.assert_allclose(mc, want, rtol=1e-5, err_msg=what)


def test_one_actor_killed_and_two_taken_over_leave_every_other_episode_whole(tmp_path):
    from robotrl.checkpoint import load_checkpoint

    spec = _spec()
    do, da = len(spec["observation"]["names"]), len(spec["action"]["names"])
    key_file = write_key_file(tmp_path / "online.key")
    key = load_key(key_file)
    run_dir, ready = tmp_path / "learner", tmp_path / "learner.ready"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = tmp_path / "learner.log"
    # port 0 and a ready file: a port picked here beforehand can be taken by another test's server in between
    learner = start(["learner", f"key_file={key_file}", "robot.realtime=false", "endpoint=tcp://127.0.0.1:0",
                     f"ready_file={ready}",
                     f"run_dir={run_dir}", "agent=sac", "agent.gamma=0.99", "agent.reward_scale=1.0",
                     "agent.reward_bias=0.0", "agent.model.num_critics=2", "agent.model.hidden=[16,16]",
                     "agent.model.critic_hidden=[16,16]", "trainer.online_warmup_steps=100000", "trainer.offline_ratio=0",
                     "max_actors=3", "push_period_s=5", "checkpoint_every_s=60"], log, env)
    links: dict[str, ActorLink] = {}
    n = dict.fromkeys(ACTORS, 0)

    endpoint = ""

    def link(a: str, spill: str) -> ActorLink:
        links[a] = ActorLink(endpoint, key, a, spec, tmp_path / spill, batch_size=4, flush_s=0.01, ack_timeout_s=0.5,
                             link_timeout_s=5.0)
        return links[a]

    def send(a: str, episode: int, steps: range, end_at: int | None = None, end: str = "", takeover=()) -> None:
        for s in steps:
            links[a].submit(_row(do, da, ACTORS.index(a), n[a], episode, s, end=end if s == end_at else "",
                                 takeover=s in takeover))
            n[a] += 1

    def settled() -> None:  # the learner holds every row sent so far
        wait(lambda: all(status(run_dir).get("have", {}).get(a, -1) == n[a] - 1 for a in ACTORS if n[a]),
             "the learner to take every row sent", [(learner, log)], timeout=180,  # the first includes its start
             state=lambda: json.dumps({"sent": n, "learner": status(run_dir),
                                       "links": {a: lk.status() for a, lk in links.items()}}, default=str))

    try:
        endpoint = wait(lambda: ready.is_file() and json.loads(ready.read_text())["endpoint"], "the learner to start",
                        [(learner, log)], timeout=180)
        for a in ACTORS:
            link(a, f"spill_{a}")
        send("a2", 0, range(0, 5), takeover=(3, 4))          # a2's takeover opens (steps 3..6)
        settled()
        send("a0", 0, range(0, 7))                           # a0's episode 0: never ends
        send("a1", 0, range(0, 10), takeover=range(3, 8))    # a1's takeover 3..7 ends at step 8, a2's still open
        settled()
        links.pop("a0").close()                              # a0 is killed mid-episode ...
        link("a0", "spill_a0_new")                           # ... and its replacement starts episode 1
        send("a0", 1, range(0, 5), end_at=4, end="truncated")
        settled()
        send("a2", 0, range(5, 10), end_at=9, end="truncated", takeover=(5, 6))
        send("a1", 0, range(10, 15), end_at=14, end="terminated")
        send("a1", 1, range(0, 4), end_at=3, end="truncated", takeover=(0, 1))
        settled()
    finally:
        for lk in links.values():
            lk.close()
        if learner.poll() is None:
            learner.send_signal(signal.SIGTERM)
        rc = learner.wait(timeout=60)
    assert rc == 0, log.read_text()[-3000:]

    ck = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    online, demos = ck["online"], ck["demos"]
    episodes = {(0, 0): range(0, 7), (0, 1): range(0, 5), (1, 0): range(0, 15), (1, 1): range(0, 4), (2, 0): range(0, 10)}
    chains = _chains(online)
    assert sorted(chains) == sorted(episodes) and int(online["size"]) == sum(map(len, episodes.values()))
    for (a, e), steps in episodes.items():
        _check_whole(online, chains[(a, e)], list(steps), f"online: actor a{a} episode {e}")
    cuts = [(x["actor"], x["episode"]) for x in ck["episode_log"] if x.get("cut")]
    assert cuts == [("a0", 0)]  # the only cut: a0's killed episode

    segments = {(1, 0): range(3, 8), (2, 0): range(3, 7), (1, 1): range(0, 2)}  # takeovers, in the demonstration buffer
    chains = _chains(demos)
    assert sorted(chains) == sorted(segments) and int(demos["size"]) == ck["interventions"] == 11
    for (a, e), steps in segments.items():
        _check_whole(demos, chains[(a, e)], list(steps), f"demos: actor a{a} takeover of episode {e}")


def test_ending_one_envs_episode_leaves_the_others_open_and_gives_it_mc_returns():
    """The buffer itself: ending env 0's episode closes it with its MC returns; env 1's episode keeps linking."""
    import pytest

    from robotrl.data.replay import ReplayBuffer

    buf = ReplayBuffer(32, 1, 1, gamma=GAMMA, num_envs=2)
    for t in range(3):
        buf.add(np.full((2, 1), t), np.zeros((2, 1)), [1.0, 2.0], np.full((2, 1), t + 1), [False, False], [False, False])
    ended = buf.end_open_episodes([0])
    assert ended.tolist() == [int(buf.episode_id[0])]
    env0, env1 = np.arange(0, 6, 2), np.arange(1, 6, 2)
    np.testing.assert_allclose(buf.mc_returns[env0], discounted_return_to_go(np.ones(3, np.float32), GAMMA), rtol=1e-6)
    assert np.isneginf(buf.mc_returns[env1]).all()  # still running: no bound yet
    buf.add(np.full((2, 1), 9), np.zeros((2, 1)), [1.0, 2.0], np.full((2, 1), 10), [False, True], [False, False])
    assert buf.prev_idx[6] == -1 and buf.next_idx[4] == -1  # env 0 starts a new episode
    assert buf.prev_idx[7] == 5 and buf.next_idx[5] == 7  # env 1's episode went on and has now ended whole
    np.testing.assert_allclose(buf.mc_returns[[1, 3, 5, 7]], discounted_return_to_go(np.full(4, 2.0, np.float32), GAMMA),
                               rtol=1e-6)
    assert buf.end_open_episodes([1]).size == 0  # nothing open there
    with pytest.raises(ValueError, match="num_envs"):
        buf.end_open_episodes([2])
