"""What the background processes run on: `leased_loop`, the one skeleton of a leased periodic
loop (the hot path's four loops, the reconciler's pass) and of the process that runs them
until SIGTERM.

Below the processes (hotpath/, reconciler/), above observability (the heartbeat) and the
Redis adapters (the lease).
"""
