"""Imported once by the fork server of `--workers` (lis_tui.bench.workers.pool; `env serve`'s
workers too), before it forks each worker: everything a worker runs is imported here, then frozen out of the garbage
collector's sight (`gc.freeze`), so its passes never write to those objects and the workers
share their pages instead of each copying them."""
import gc

import lis_tui.bench.workers.host  # noqa: F401
import lis_tui.model.client  # noqa: F401
import lis_tui.rl.worker_main  # noqa: F401
import openai  # noqa: F401
import tools.shell  # noqa: F401

gc.freeze()
