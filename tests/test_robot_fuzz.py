"""Property fuzz of the server's request handling through a real socket (hypothesis, bounded for CI).

Authenticated requests (valid MAC) of every type, with arbitrary bodies and envelopes, are
sent to a server thread serving the MuJoCo twin whose e-stop is latched. Properties: every
request the protocol says is answered gets a well-formed answer (never a crash, never
silence); the latched robot never moves; afterwards the server still answers a valid request.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_robot_hardening import KEY, dealer, sim_server

from robotrl.real_robot.client import RobotClient
from robotrl.real_robot.protocol import Authenticator, encode, mac

TYPES = ["hello", "acquire", "release", "reset", "step", "observe", "status", "heartbeat", "estop"]  # rearm: see below
KINDS = {"bad_request", "expired", "clock", "epoch", "no_lease", "lease_held", "estopped", "internal"}

_arrays = hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_]),
                     hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(), st.text(max_size=12),
                  st.binary(max_size=16), _arrays)
_value = st.recursive(_leaf, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                      max_leaves=8)
_actions = st.one_of(st.none(), _value, hnp.arrays(st.sampled_from([np.float32, np.float64]), st.sampled_from([(2,), (1,), (3,), (2, 1)]),
                                                  elements=st.floats(width=32)))
_known = st.fixed_dictionaries({}, optional={"action": _actions, "seed": _value, "force": _value, "operator": _value,
                                            "reason": _value, "re": _value})
_bodies = st.builds(lambda a, b: {**b, **a}, _known, st.dictionaries(st.text(max_size=8), _value, max_size=2))


@pytest.fixture(scope="module")
def latched():
    srv = sim_server(log=lambda m: None)
    owner = RobotClient(srv.endpoint, KEY)
    owner.reset(0)
    owner.estop(reason="fuzz")
    time.sleep(0.05)
    pos = owner.observe().state[4:6].copy()
    sock = dealer(srv.endpoint)
    auth = Authenticator(KEY, ident="fuzzer")
    yield srv, owner, sock, auth, pos
    sock.close(0)
    owner.close()
    srv.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(type_=st.one_of(st.sampled_from(TYPES + ["step"] * 6 + ["acquire", "reset"]), st.text(max_size=10)), body=_bodies,
       envelope=st.sampled_from(["ok", "no_epoch", "no_dst", "old_ts", "future_ts", "late_ts"]),
       deadline=st.one_of(st.none(), st.floats(-1e12, 1e12), st.sampled_from(["now", "soon"])))
def test_fuzzed_requests_are_answered_cleanly_and_a_latched_robot_never_moves(latched, type_, body, envelope, deadline):
    srv, _, sock, auth, pos = latched
    s = srv.server
    if type_ == "step" and deadline is not None and "deadline" not in body:
        body = {**body, "deadline": {"now": time.time(), "soon": time.time() + 0.01}.get(deadline, deadline)}
    offset = {"old_ts": -3.0, "future_ts": 0.3, "late_ts": -0.05}.get(envelope, 0.0)
    seq = auth.next_seq()
    msg = {"v": 2, "type": type_, "dir": "req", "src": auth.ident, "dst": "" if envelope == "no_dst" else s.robot_id,
           "epoch": "" if envelope == "no_epoch" else s.epoch, "seq": seq, "ts": time.time() + offset, "body": body}
    try:
        payload = encode(msg)
    except Exception:  # not representable in msgpack (e.g. an int beyond 64 bits): nothing to send
        return
    if len(payload) > s.auth.limits.max_request_bytes:
        return
    sock.send_multipart([payload, mac(KEY, payload)])
    answered = envelope != "old_ts" and (envelope != "no_dst" or type_ == "hello")
    if answered:
        assert sock.poll(5000), f"no answer to {type_!r} {body!r}"
        ans = Authenticator(KEY, ident=auth.ident).open(sock.recv_multipart())["body"]
        assert ans["re"] == seq and isinstance(ans["ok"], bool)
        if not ans["ok"]:
            assert ans["kind"] in KINDS and isinstance(ans["error"], str) and ans["error"], ans
            assert ans["kind"] != "internal", ans  # no request reaches a server bug
    else:
        assert not sock.poll(20)
    assert srv.alive and s.supervisor.estopped and s.holding
    assert np.array_equal(srv.robot.get_observation().state[4:6], pos)  # the latched robot has not moved


def test_after_the_fuzz_the_server_still_answers_and_the_robot_is_still_stopped(latched):
    srv, owner, sock, _, pos = latched
    sock.send_multipart([b"\x00" * 10, b"junk"])
    owner.acquire(force=True)
    st = owner.status()
    assert srv.alive and srv.error is None and st["estopped"] and st["internal_errors"] == 0
    ans = owner.step(np.array([0.8, 0.8], np.float32))
    assert ans["flags"] == ["estop"] and np.array_equal(ans["applied"], [0, 0])
    assert np.array_equal(owner.observe().state[4:6], pos)
    with pytest.raises(zmq.ZMQError):
        sock.recv_multipart(zmq.NOBLOCK)  # the junk got no answer
