"""Area-effect templates (Foundry MeasuredTemplate) as Shapely polygons, and who is inside.

Rule of this module: Foundry's template geometry in canvas pixels (direction in degrees,
0 = east, clockwise because y points down; distances in scene units); a creature is in an
area when the area contains the centre of any square of its space, the way Foundry
highlights grid squares under a template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np
import shapely

from geometry.model import CreatureGeom, Grid
from geometry.square import centre, squares

_ARC_STEPS = 64


class TemplateKind(Enum):
    CIRCLE = "circle"
    CONE = "cone"
    RECT = "rect"
    RAY = "ray"


@dataclass(frozen=True, slots=True)
class Template:
    kind: TemplateKind
    x: float
    y: float
    distance: float  # scene units: radius, length, or (rect) the diagonal
    direction: float = 0.0  # degrees
    angle: float = 53.13  # cone aperture, degrees (Foundry's default)
    width: float | None = None  # ray width, scene units (default: one square)


def shape(t: Template, grid: Grid) -> shapely.Polygon:
    """The template's area in pixels."""
    px = grid.size / grid.distance
    r = t.distance * px
    theta = math.radians(t.direction)
    if t.kind is TemplateKind.CIRCLE:
        return shapely.Point(t.x, t.y).buffer(r, quad_segs=_ARC_STEPS // 4)
    if t.kind is TemplateKind.CONE:
        half = math.radians(t.angle) / 2
        steps = np.linspace(theta - half, theta + half, _ARC_STEPS)
        arc = np.column_stack([t.x + r * np.cos(steps), t.y + r * np.sin(steps)])
        return shapely.Polygon(np.vstack([[t.x, t.y], arc]))
    if t.kind is TemplateKind.RECT:
        dx, dy = r * math.cos(theta), r * math.sin(theta)
        return shapely.box(min(t.x, t.x + dx), min(t.y, t.y + dy),
                           max(t.x, t.x + dx), max(t.y, t.y + dy))
    width = (t.width if t.width is not None else grid.distance) * px
    ux, uy = math.cos(theta), math.sin(theta)
    nx, ny = -uy * width / 2, ux * width / 2
    return shapely.Polygon([(t.x + nx, t.y + ny), (t.x + r * ux + nx, t.y + r * uy + ny),
                            (t.x + r * ux - nx, t.y + r * uy - ny), (t.x - nx, t.y - ny)])


def inside(area: shapely.Polygon, creature: CreatureGeom, grid: Grid) -> bool:
    """Whether the area holds the centre of any square the creature occupies."""
    pts = np.array([centre(sq) for sq in squares(creature, grid)], dtype=np.float64)
    return bool(np.any(shapely.intersects_xy(area, pts[:, 0], pts[:, 1])))
