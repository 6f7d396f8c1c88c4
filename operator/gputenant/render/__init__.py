"""Rendering: tenant + decision + config -> host objects and vCluster values, pure (no IO)."""

from gputenant.render.errors import RenderError
from gputenant.render.tenant import RenderedTenant, render_tenant

__all__ = ["RenderError", "RenderedTenant", "render_tenant"]
