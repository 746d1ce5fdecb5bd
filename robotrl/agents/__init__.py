"""Agents (installed as robotrl.agents)."""
