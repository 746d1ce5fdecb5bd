"""Gymnasium environment layer (installed as robotrl.envs)."""
