"""What ``runworker`` and ``runscheduler`` run beside their loop: companions (threads
beside the worker), the ``--reload`` restarter and the process pool's set-up."""
