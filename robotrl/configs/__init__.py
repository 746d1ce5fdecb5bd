"""Hydra configs shipped with the package; importing it registers the structured configs
(:func:`robotrl.schema.register`) that ``train.yaml`` and the on-policy agent configs extend."""

from robotrl.schema import register as _register

_register()
