from django.contrib import admin
from django.urls import path

from stator.django import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("stator/run/", views.run_batch),
]
