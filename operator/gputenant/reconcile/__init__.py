"""Turning a GpuTenant into applied state and status: the pipeline, conditions, status."""
