"""Episodes in local worker processes (`--workers N` of bench, rollout and env serve).

pool (the parent's side: start workers from a fork server, hand them episodes, merge what comes
back, and survive a worker's death), host (a worker's side: `CallHost` answers its parent's
calls on a pipe; `WorkerHost` runs episodes as the single-process runner does), preload (what
the fork server imports once, before it forks each worker).

May import: lis_tui.bench.episode and .scoring, what a worker runs (the model, tools), lis_tui.ray's
`ClusterRun` (the local pool is scheduled as a cluster's is), and for the preload lis_tui.rl's
worker host, which reuses `CallHost` and `start_worker`.
"""
