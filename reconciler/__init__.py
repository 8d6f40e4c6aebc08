"""The reconciler process (the Procfile's `reconciler`): every record in status 3 has a report job.

`loop`: the pass (jobs queued again for records that lost theirs, status 5 completed for jobs
dead-lettered while the database was down); `__main__` (``python -m reconciler``): the process,
running the pass on background/leased_loop.py.
"""
