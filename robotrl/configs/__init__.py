"""Hydra configs shipped with the package."""
