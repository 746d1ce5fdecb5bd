"""robotrl: offline-to-online robot learning."""
__version__ = "0.1.0"

from robotrl._alloc import tune_malloc as _tune_malloc

_tune_malloc()  # glibc only: large temporaries stay in the heap (no page faults per update); ROBOTRL_MALLOC_TUNE=0 opts out

from robotrl._resolvers import register as _register_resolvers  # noqa: E402  (after the malloc tuning)

_register_resolvers()  # ${robotrl.or:...}, ${robotrl.slug:...} in the Hydra configs
