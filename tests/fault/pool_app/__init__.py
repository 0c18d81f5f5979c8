"""A Django app of `def` tasks that keep the fault ledger (app.note), for runworker pools
(test_graceful_pools.py) and time limits (test_time_limits.py); pool_settings.py installs it."""
