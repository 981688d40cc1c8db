"""Area-effect templates (Foundry MeasuredTemplate) as Shapely polygons, and who is inside.

Rule of this module: Foundry's template geometry in canvas pixels (direction in degrees,
0 = east, clockwise because y points down; distances in scene units); a creature is in an
area when the area contains the centre of any square of its space, the way Foundry
highlights grid squares under a template. In three dimensions (`in_area_3d`) the flat shape
is turned about its horizontal axis (the line from its origin along its direction, at its
elevation): a circle becomes a sphere, a cone a cone, a ray a cylinder as wide as the ray;
a rect is a box standing on the template's elevation, as high as its shorter side. Each
square centre is tested at the height of the creature's cube nearest the axis (or the box),
so with the creature's cube at the template's elevation the test is the flat one exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np
import shapely

from geometry.model import CreatureGeom, Grid
from geometry.square import centre, squares, vertical_side

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
    elevation: float = 0.0  # feet: the height of the origin (and of the shape's axis)


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


def in_area_3d(t: Template, area: shapely.Polygon, creature: CreatureGeom,
               grid: Grid) -> bool:
    """Whether the template's solid (`area`: its flat shape, `shape(t, grid)`) holds the
    centre of any square of the creature's space at some height of its cube.

    Circle, cone and ray are solids of revolution about the horizontal axis through the
    origin along the direction: a point at horizontal offset (along, across) from the origin
    and height gap dz is in the solid exactly when the flat point (along, ±sqrt(across² +
    dz²)) is in the flat shape (the point turned about the axis down into the map's plane).
    The height tested is the cube's nearest to the axis: the solids only shrink away from
    it. A rect is the box from the template's elevation up by its shorter side: in when the
    cube meets that span and a square centre is in the rect."""
    lo, hi = creature.elevation, creature.elevation + vertical_side(creature)
    pts = np.array([centre(sq) for sq in squares(creature, grid)], dtype=np.float64)
    if t.kind is TemplateKind.RECT:
        theta = math.radians(t.direction)
        side = t.distance * min(abs(math.cos(theta)), abs(math.sin(theta)))
        top = t.elevation + grid.units_to_feet(side)
        if hi < t.elevation or lo > top:
            return False
        return bool(np.any(shapely.intersects_xy(area, pts[:, 0], pts[:, 1])))
    dz = max(0.0, lo - t.elevation, t.elevation - hi) * grid.px_per_foot
    if dz > 0:
        theta = math.radians(t.direction)
        ux, uy = math.cos(theta), math.sin(theta)
        dx, dy = pts[:, 0] - t.x, pts[:, 1] - t.y
        along = dx * ux + dy * uy
        across = -dx * uy + dy * ux
        turned = np.where(across < 0, -1.0, 1.0) * np.hypot(across, dz)
        pts = np.column_stack([t.x + along * ux - turned * uy, t.y + along * uy + turned * ux])
    return bool(np.any(shapely.intersects_xy(area, pts[:, 0], pts[:, 1])))
