from django.urls import path

from . import views

app_name = "shop"
urlpatterns = [
    path("orders/<int:pk>/", views.order_detail, name="order"),
    path("orders/<int:pk>/confirm/", views.confirm_order, name="confirm"),
    path("orders/<int:pk>/confirm-async/", views.confirm_order_async, name="confirm-async"),
    path("export/", views.export, name="export"),
]
