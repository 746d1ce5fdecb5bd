"""robotrl: offline-to-online robot learning.

Importing robotrl changes nothing process-wide: the glibc allocator tuning
(:func:`robotrl._alloc.tune_malloc`) runs in the ``robotrl`` command line only; library users
call it themselves if they want it.
"""
__version__ = "0.1.0"

from robotrl._resolvers import register as _register_resolvers  # noqa: E402

_register_resolvers()  # ${robotrl.or:...}, ${robotrl.slug:...} in the Hydra configs
