"""Admission guard for tenant pods: pure rules (``rules``), kopf webhook handlers (``webhook``),
the serving certificates (``certs``) and the webhook configurations the operator keeps in sync."""
