from django.contrib import admin

from .models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("reference", "amount_cents", "status", "created_at")
    search_fields = ("reference",)
