"""Real-time scheduling of the bridge's processes (Linux ``SCHED_FIFO``).

On a robot computer the control path (the robot server, and the deploy or actor process
that drives it) runs at a real-time priority, as ROS 2 control and most robot drivers do: a
runnable ``SCHED_FIFO`` thread preempts every ordinary (``SCHED_OTHER``) process at once,
so a busy or hostile process on the same machine (a training job, a flood of junk from the
network being read) cannot delay a control step by a scheduler time slice (several ms).
The server's loop sleeps in ``poll`` between requests, so it does not hog the CPU; the
kernel's real-time throttling (``/proc/sys/kernel/sched_rt_runtime_us``, 95 % by default)
keeps the machine usable even if it did.

Call :func:`set_rt_priority` first thing in the process, before ZeroMQ contexts exist: it
sets every thread the process already has (a BLAS pool started at import, say), and threads
created later inherit the policy of their creator, so libzmq's I/O threads run at the same
priority.
"""

from __future__ import annotations

import os
import threading

from robotrl.errors import ConfigError

RT_MIN, RT_MAX = 1, 99


def _threads() -> list[int]:
    """Thread ids of this process (Linux ``/proc``), the calling thread last; ``[0]`` (this thread) without ``/proc``."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]
    me = threading.get_native_id()
    return [t for t in tids if t != me] + [me]


def set_rt_priority(priority: int | None) -> str:
    """Run every thread of this process, and every thread created from now on, under ``SCHED_FIFO`` at ``priority``.

    Args:
        priority: 1–99 (higher preempts lower); ``None`` leaves scheduling alone.

    Returns:
        what was done, for the process's start-up line (``"SCHED_OTHER"`` when ``priority`` is None).

    Raises:
        ConfigError: ``priority`` outside 1–99, a platform without ``SCHED_FIFO``, or the process may not
            raise its priority (it needs root or ``CAP_SYS_NICE``; the message names the ways out).
    """
    if priority is None:
        return "SCHED_OTHER"
    p = int(priority)
    if not RT_MIN <= p <= RT_MAX:
        raise ConfigError(f"rt_priority={priority} is outside {RT_MIN}-{RT_MAX}; pick e.g. 80, or rt_priority=null for "
                          "ordinary scheduling")
    if not hasattr(os, "sched_setscheduler"):
        raise ConfigError("rt_priority needs Linux's SCHED_FIFO, which this platform lacks; set rt_priority=null")
    try:
        for tid in _threads():  # the threads libraries started at import (e.g. a BLAS pool), then this one
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(p))
    except PermissionError as exc:
        raise ConfigError(f"rt_priority={p}: this process may not use real-time scheduling ({exc}): it needs root "
                          "or CAP_SYS_NICE. Run it as root, give the interpreter the capability (`sudo setcap cap_sys_nice+ep <python>`), raise the "
                          "user's `rtprio` limit in /etc/security/limits.conf, or set rt_priority=null") from exc
    return f"SCHED_FIFO {p}"
