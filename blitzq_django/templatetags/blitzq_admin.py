"""Template tags of blitzq's admin pages."""

from __future__ import annotations

from django import template
from django.template.loader import get_template
from django.template.loader_tags import BlockNode

register = template.Library()


@register.simple_tag
def object_tools_beside_title() -> bool:
    """Whether the admin's base template places the object tools itself, beside the page
    title (Django 6.1 and later: its "object-tools" block is outside "content"), rather
    than at the top of the content (Django 5.2: inside "content", where its change form
    and change list put them): a page that replaces the change form's content draws its
    tools in the one place its Django version expects. Read from the template in use, not
    from the version number, so a later change follows."""
    base = get_template("admin/base.html").template  # type: ignore[attr-defined]
    blocks = base.nodelist.get_nodes_by_type(BlockNode)
    in_content = {inner.name for block in blocks if block.name == "content"
                  for inner in block.nodelist.get_nodes_by_type(BlockNode)}
    return any(node.name == "object-tools" for node in blocks) and "object-tools" not in in_content
