"""Loading the jinja2 YAML templates (top-level ``templates/`` of the repository).

The templates ship inside the installed package as ``gputenant/templates`` (pyproject maps the
directory there as package data), so a wheel or the Docker image finds them without the source
tree; an editable install reads them from the source tree. Rendering is pure: templates are
read once and every value goes through the ``json`` filter, so no tenant-supplied string can
change the YAML structure.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

PACKAGED_TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
SOURCE_TREE_TEMPLATES = Path(__file__).resolve().parents[3] / "templates"


def templates_dir() -> Path:
    """``gputenant/templates`` in a wheel or the image; the repository's ``templates/`` in an
    editable install (which maps only the Python packages)."""
    return PACKAGED_TEMPLATES if PACKAGED_TEMPLATES.is_dir() else SOURCE_TREE_TEMPLATES


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    environment.filters["json"] = lambda value: json.dumps(value)
    return environment


def render_documents(template: str, **context: Any) -> list[dict]:
    """Render one template and return its non-empty YAML documents in order."""
    text = _environment().get_template(template).render(**context)
    return [document for document in yaml.safe_load_all(text) if document]
