from django.db import models


class Order(models.Model):
    """An order placed in the example shop; tasks create and update these."""

    reference = models.CharField(max_length=64, unique=True)
    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=20, default="new")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.reference} ({self.status})"


class Delivery(models.Model):
    """One row per run of a task body that records a delivery: no unique constraint, so a
    body that runs twice leaves two rows (the effectively-once tests count them)."""

    reference = models.CharField(max_length=100, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"delivery {self.reference}"
