"""The one error rendering raises: a tenant or config value it cannot turn into objects."""


class RenderError(ValueError):
    """Bad input for rendering. The message starts with the field's path (``spec.quotas.cpu: ...``)
    and says what to write instead, so it can go straight into a status condition or a CLI error."""
