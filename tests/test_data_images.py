"""Camera observations in the data layer: env -> recording -> Minari -> buffer -> batch, bit-exact.

Frames are real MuJoCo renders (gymnasium's InvertedPendulum-v5, 32x32, OSMesa) of
episodes driven by random actions; observations are ``{"state": float32 (4,),
"front": uint8 (32, 32, 3)}``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

import gymnasium as gym  # noqa: E402

from robotrl.data import Episode, ReplayBuffer, load_dataset, write_dataset  # noqa: E402

S = 32
LENGTHS = (12, 6, 9)


def _space():
    return gym.spaces.Dict({"front": gym.spaces.Box(0, 255, (S, S, 3), np.uint8),
                            "state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)})


@pytest.fixture(scope="module")
def recording():
    """Episodes recorded from the env: observations (T+1) dicts, actions, rewards, terminations, truncations."""
    env = gym.make("InvertedPendulum-v5", render_mode="rgb_array", width=S, height=S)
    rng = np.random.default_rng(0)
    eps = []
    for e, n in enumerate(LENGTHS):
        o, _ = env.reset(seed=e)
        states, frames, acts, rews, terms = [o.astype(np.float32)], [env.render().copy()], [], [], []
        for t in range(n):
            a = rng.uniform(-0.5, 0.5, 1).astype(np.float32)
            o, r, term, _, _ = env.step(a)
            states.append(o.astype(np.float32))
            frames.append(env.render().copy())
            acts.append(a)
            rews.append(r)
            terms.append(term)
            if term:
                break
        T = len(acts)
        trunc = np.zeros(T, bool)
        trunc[-1] = not terms[-1]
        eps.append(Episode(observations={"state": np.stack(states), "front": np.stack(frames)}, actions=np.stack(acts),
                           rewards=np.array(rews), terminations=np.array(terms), truncations=trunc))
    env.close()
    assert all(ep.observations["front"].std() > 0 for ep in eps)  # real renders, not blank
    assert all(len(ep) >= 5 for ep in eps)
    return eps


def _expected(eps):
    """Per transition: (obs frame, next frame, state, next state) in dataset order."""
    f, nf, s, ns = [], [], [], []
    for ep in eps:
        f.append(ep.observations["front"][:-1])
        nf.append(ep.observations["front"][1:])
        s.append(ep.observations["state"][:-1])
        ns.append(ep.observations["state"][1:])
    return [np.concatenate(x) for x in (f, nf, s, ns)]


def test_env_recording_minari_buffer_batch_bit_exact(tmp_path, recording):
    write_dataset("pend/pixels-v0", recording, observation_space=_space(),
                  action_space=gym.spaces.Box(-3, 3, (1,), np.float32), root=tmp_path)
    data = load_dataset(tmp_path / "pend/pixels-v0")
    M, E = data.num_transitions, data.num_episodes
    assert data.obs_dim == 4 and data.obs_layout.keys == ("state",)  # the camera stays out of the flat vector
    assert data.images["front"].dtype == np.uint8 and data.images["front"].shape == (M + E, S, S, 3)
    frames, nframes, states, nstates = _expected(recording)
    np.testing.assert_array_equal(data.images["front"][data.image_index], frames)
    np.testing.assert_array_equal(data.images["front"][data.image_index + 1], nframes)

    buf = ReplayBuffer.from_offline(data)
    batch = buf.sample(M, indices=np.arange(M))
    assert batch.images()["front"].dtype.is_floating_point is False
    np.testing.assert_array_equal(batch.images()["front"].numpy(), frames)
    np.testing.assert_array_equal(batch.next_images()["front"].numpy(), nframes)
    np.testing.assert_array_equal(batch.observations.numpy(), states)
    np.testing.assert_array_equal(batch.next_observations.numpy(), nstates)

    # n-step: the next frame is the one after the last summed step (here: 3 steps or the episode's end)
    b3 = buf.sample(M, indices=np.arange(M), n_step=3)
    ends = np.cumsum([len(ep) for ep in recording])
    after = np.minimum(np.arange(M) + 2, ends[np.searchsorted(ends, np.arange(M), side="right")] - 1)
    np.testing.assert_array_equal(b3.next_images()["front"].numpy(), nframes[after])

    # sequences: frames stacked by index, the first frame repeated before an episode's start
    s1 = len(recording[0])  # first transition of episode 1
    seq = buf.sample_sequences(4, obs_horizon=2, action_horizon=3, indices=np.array([0, 1, s1, s1 + 1]))
    img = seq.images()["front"].numpy()
    assert img.shape == (4, 2, S, S, 3)
    np.testing.assert_array_equal(img[0], frames[[0, 0]])
    np.testing.assert_array_equal(img[1], frames[[0, 1]])
    np.testing.assert_array_equal(img[2], frames[[s1, s1]])
    np.testing.assert_array_equal(img[3], frames[[s1, s1 + 1]])
    np.testing.assert_array_equal(seq.next_images()["front"].numpy()[3], nframes[[s1 + 1, s1 + 2, s1 + 3]])


def test_bytes_per_transition_against_a_naive_copy(tmp_path, recording):
    write_dataset("pend/pixels-v0", recording, observation_space=_space(),
                  action_space=gym.spaces.Box(-3, 3, (1,), np.float32), root=tmp_path)
    data = load_dataset(tmp_path / "pend/pixels-v0")
    buf = ReplayBuffer.from_offline(data)
    M, E, frame = data.num_transitions, data.num_episodes, S * S * 3
    per = buf.image_bytes() / M
    assert buf.image_bytes() == (M + E) * frame  # one frame per transition + the final frame of each episode
    naive_uint8, naive_float32 = 2 * frame, 2 * 4 * frame  # obs and next obs copied (as uint8 / flattened float32)
    assert per <= 0.5 * naive_uint8 * (1 + E / M) + 1e-9
    assert naive_float32 / per > 6.5
    print(f"camera bytes per transition: {per:.0f} (naive uint8 copy {naive_uint8}, float32 copy {naive_float32})")


def test_online_add_stores_frames_once_and_survives_wraparound(recording):
    """Step-by-step adds from 2 interleaved envs into a small ring: every live transition keeps exact frames."""
    cap = 15
    buf = ReplayBuffer(cap, 4, 1, num_envs=2, image_shapes={"front": (S, S, 3)})
    # env 0 plays episodes 0 and 2, env 1 plays episode 1, interleaved step by step
    streams = [[(0, t) for t in range(len(recording[0]))] + [(2, t) for t in range(len(recording[2]))],
               [(1, t) for t in range(len(recording[1]))]]
    added = []
    for k in range(max(map(len, streams))):
        for env in (0, 1):
            if k >= len(streams[env]):
                continue
            e, t = streams[env][k]
            ep = recording[e]
            o, no = ep.observations, ep.observations
            buf.add(o["state"][t], ep.actions[t], ep.rewards[t], no["state"][t + 1], ep.terminations[t], ep.truncations[t],
                    env_ids=[env], images={"front": o["front"][t][None]}, next_images={"front": no["front"][t + 1][None]})
            added.append((e, t))
    live = added[-cap:]
    slots = (np.arange(len(added) - cap, len(added))) % cap
    b = buf.sample(cap, indices=slots)
    for j, (e, t) in enumerate(live):
        np.testing.assert_array_equal(b.images()["front"][j].numpy(), recording[e].observations["front"][t])
        np.testing.assert_array_equal(b.next_images()["front"][j].numpy(), recording[e].observations["front"][t + 1])
    # next frames kept apart: only the episodes' last steps (and none for linked steps)
    assert len(buf.cameras.pending) <= 3
    assert buf.image_bytes() <= (cap + 3) * S * S * 3

    # checkpoint round trip keeps the frames
    buf2 = ReplayBuffer(cap, 4, 1, num_envs=2, image_shapes={"front": (S, S, 3)})
    buf2.load_state_dict(buf.state_dict())
    b2 = buf2.sample(cap, indices=slots)
    np.testing.assert_array_equal(b2.images()["front"].numpy(), b.images()["front"].numpy())
    np.testing.assert_array_equal(b2.next_images()["front"].numpy(), b.next_images()["front"].numpy())


def test_camera_errors_name_the_problem(tmp_path, recording):
    buf = ReplayBuffer(10, 4, 1, image_shapes={"front": (S, S, 3)})
    ep = recording[0]
    with pytest.raises(ValueError, match="pass images="):
        buf.add(ep.observations["state"][0], ep.actions[0], 0.0, ep.observations["state"][1], False, False)
    with pytest.raises(ValueError, match="must be uint8"):
        buf.add(ep.observations["state"][0], ep.actions[0], 0.0, ep.observations["state"][1], False, False,
                images={"front": ep.observations["front"][:1].astype(np.float32)}, next_images={"front": ep.observations["front"][1:2]})
    write_dataset("pend/pixels-v0", recording, observation_space=_space(),
                  action_space=gym.spaces.Box(-3, 3, (1,), np.float32), root=tmp_path)
    data = load_dataset(tmp_path / "pend/pixels-v0")
    with pytest.raises(ValueError, match="differ from the buffer's image_shapes"):
        ReplayBuffer(100, 4, 1).add_offline(data)
