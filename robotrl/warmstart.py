"""One warm-start path for every agent: which parts of which checkpoint to load.

``trainer.init_from`` (a checkpoint file or a run directory) and ``trainer.init_parts``
(``None``: the whole agent) select the source; :func:`warm_start` loads it into a fresh
agent before the first step of a run (never on resume), for off- and on-policy agents alike:

- ``parts`` given: the agent's ``load_parts(state, parts)`` (agents that can,
  :class:`robotrl.agent.PartLoader`: e.g. ``[policy]`` for PORL, ``[policy, critic, temperature]``
  for WSRL);
- no ``parts``: the agent's ``load_pretrained(path)`` (:class:`robotrl.agent.AgentBase`): by
  default the whole agent state of its own kind; agents that convert another policy's checkpoint
  (a BC actor into PPO, a diffusion policy into DPPO, a base policy under a residual) override it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from robotrl.agent import PartLoader, agent_device
from robotrl.checkpoint import load_checkpoint
from robotrl.errors import CheckpointError


def warm_start(agent, source: str | Path, parts: Sequence[str] | None = None) -> None:
    """Load a pretrained checkpoint's state into ``agent`` (module doc).

    Args:
        agent: an off- or on-policy agent (:mod:`robotrl.agent`).
        source: a checkpoint file or a run directory (its ``checkpoints/latest.pt``).
        parts: names of parts to load through ``agent.load_parts``; ``None``: everything.

    Raises:
        CheckpointError: missing or unreadable checkpoint, a state that does not fit the
            agent, or ``parts`` for an agent that loads whole checkpoints only.
    """
    if parts is None:
        agent.load_pretrained(str(source))
        return
    if not isinstance(agent, PartLoader):
        raise CheckpointError(f"init_parts={list(parts)}: this agent ({type(agent).__name__}) loads whole "
                              "checkpoints only; drop trainer.init_parts")
    state = load_checkpoint(source, map_location=agent_device(agent))
    try:
        agent.load_parts(state["agent"], list(parts))
    except (KeyError, RuntimeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"init_from {source}: its agent state does not fit this agent ({exc})") from exc


def pretrained_policy(path: str | Path, device, *, own: str, base: type, spec: dict, what: str) -> tuple[str, dict]:
    """Read the checkpoint a fine-tuning agent converts from (DPPO from diffusion, ReinFlow from flow).

    Args:
        path: a checkpoint file; device: where its tensors go.
        own: class-name suffix of the agent's own policy (a checkpoint to resume whole).
        base: the pretrained policy's class; its ``ARCH_KEYS`` (declared once per policy class,
            :class:`~robotrl.vision.frontend.ObservationFrontend`: sizes, horizons, networks, cameras and
            encoder) must match between the checkpoint and ``spec``, keys a checkpoint leaves out read as
            its ``ARCH_DEFAULTS``, so a camera run refuses a state checkpoint and the reverse.
        spec: the agent's policy constructor kwargs.
        what: how the refusal names what is expected (e.g. ``"DPPO fine-tunes a diffusion-policy checkpoint"``).

    Returns:
        ``("own", checkpoint)`` or ``("base", the pretrained policy's state dict)``.

    Raises:
        CheckpointError: another policy class, or an architecture key that differs (checkpoint, config).
    """
    state = load_checkpoint(path, map_location=device)
    pol = state.get("policy", {})
    target = pol.get("target", "")
    if target.endswith(own):
        return "own", state
    if not target.endswith(f".{base.__name__}"):
        raise CheckpointError(f"{path}: {what}, not {target!r}")
    defaults = base.ARCH_DEFAULTS
    theirs, mine = {**defaults, **pol["kwargs"]}, {**defaults, **spec}
    diff = {k: (theirs.get(k), mine.get(k)) for k in base.ARCH_KEYS if theirs.get(k) != mine.get(k)}
    if diff:
        raise CheckpointError(f"{path}: pretrained policy differs from the config in {diff} (checkpoint, config)")
    return "base", pol["state_dict"]
