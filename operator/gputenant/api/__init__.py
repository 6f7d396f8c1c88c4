"""The GpuTenant API: pydantic models that are the single source of ``crds/tenant.yaml``."""
