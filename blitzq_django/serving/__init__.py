"""Running processes beside the web server: the worker's process pool, companions
started with runworker, autoreloading."""
