"""Rendering: tenant + decision + config -> host objects and vCluster values, pure (no IO)."""

from gputenant.render.errors import RenderError
from gputenant.render.parent_queues import parent_queue_labels, render_parent_queues
from gputenant.render.tenant import RenderedTenant, render_tenant

__all__ = ["RenderError", "RenderedTenant", "parent_queue_labels", "render_parent_queues", "render_tenant"]
