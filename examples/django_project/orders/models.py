from django.db import models


class Order(models.Model):
    email = models.EmailField()
    status = models.CharField(max_length=20, default="new")
    receipt_sent_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"
