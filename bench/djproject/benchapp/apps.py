from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "bench.djproject.benchapp"
    label = "benchapp"
