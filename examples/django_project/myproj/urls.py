from django.contrib import admin
from django.urls import path

from orders import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", views.create_order),
    path("orders/<int:pk>/", views.order_detail),
    path("orders/<int:pk>/receipt/", views.send_receipt_view),
    path("receipts/<str:result_id>/", views.receipt_result),
]
