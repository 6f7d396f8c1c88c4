"""The operator's background loops beside kopf's handlers, one module each (GPU pools, usage,
isolation attestation), run by a small supervisor that restarts a loop that dies and stops them
all at cleanup. The Lease renewal (kube/lease.py) runs under the same supervisor."""

from gputenant.loops.supervisor import Supervisor

__all__ = ["Supervisor"]
