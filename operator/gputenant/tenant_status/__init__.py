"""A GpuTenant's status: its conditions, the fields each writer owns, and every write of it."""
