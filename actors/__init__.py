"""The worker side of the pipeline.

`dramatiq actors` imports this package: it installs the `RedisListBroker` (built from
REDIS_URL) as Dramatiq's global broker and declares the actors. The web tier only uses
`actors.producer` and `actors.monitor`.
"""

from actors.configure import install
from actors.signals import debounce_worker_sigterm

install()
debounce_worker_sigterm()

from actors import report  # noqa: E402  (actors are declared on the broker installed above)

__all__ = ["report"]
