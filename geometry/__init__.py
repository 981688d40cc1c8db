"""Tactical geometry of battle maps: spaces, sight lines, crossings, flanking geometry.

Rule of this package: pure geometry in canvas pixels, numpy for the hot kernels and Shapely
for polygons; it imports nothing from `rulesets` or `server`.
"""
