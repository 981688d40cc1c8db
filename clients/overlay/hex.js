// Covercast overlay: Foundry's hex grids, ported from geometry/hex.py (which follows
// Foundry's foundry.grid.HexagonalGrid and BaseToken formula for formula). Each function
// names the Python function it mirrors; a change there must be made here too
// (tests/test_overlay_browser.py compares the two on every layout and token shape).
//
// Cells are Foundry offsets {i: row, j: column} written [i, j]; points are canvas pixels.
// Only what the overlay draws is ported: cell centres and corners, the cell holding a point,
// a token's occupied cells and its centre.
'use strict';

window.CovercastHex = (function () {
  const SQRT3 = Math.sqrt(3);
  const ELLIPSE_1 = 0, ELLIPSE_2 = 1, TRAPEZOID_1 = 2, RECTANGLE_1 = 4, RECTANGLE_2 = 5;
  // Foundry's grid types: 2 HEXODDR, 3 HEXEVENR, 4 HEXODDQ, 5 HEXEVENQ.
  const TYPES = { 2: [false, false], 3: [false, true], 4: [true, false], 5: [true, true] };

  /** HexLayout.of: the layout of a scene's grid document, or null on a non-hex grid. */
  function layout(grid) {
    const t = TYPES[grid && grid.type];
    if (!t) return null;
    const size = grid.size || 100;
    const [columns, even] = t;
    return { columns, even, size,
             sizeX: columns ? size * 2 / SQRT3 : size,    // HexLayout.size_x
             sizeY: columns ? size : size * 2 / SQRT3 };  // HexLayout.size_y
  }

  // An odd row (column) in two's complement, so negative offsets work as in numpy.
  const isOdd = (n) => (n & 1) === 1;

  /** centre_point: the centre of cell [i, j]. */
  function centre(L, i, j) {
    const s = L.size;
    if (L.columns) {
      return [2 / SQRT3 * ((0.75 * j + 0.5) * s), (i + (L.even === isOdd(j) ? 0 : 0.5)) * s];
    }
    return [(j + (L.even === isOdd(i) ? 0 : 0.5)) * s, 2 / SQRT3 * ((0.75 * i + 0.5) * s)];
  }

  /** vertices: the six corners of cell [i, j], clockwise on screen. Computed from integers,
   *  so neighbouring cells share bit-identical corners. */
  function vertices(L, i, j) {
    const sx = L.sizeX / 4, sy = L.sizeY / 4;
    let pts;
    if (L.columns) {
      const x = 3 * j, y = 4 * i - (L.even === isOdd(j) ? 2 : 0);
      pts = [[x, y + 2], [x + 1, y], [x + 3, y], [x + 4, y + 2], [x + 3, y + 4], [x + 1, y + 4]];
    } else {
      const y = 3 * i, x = 4 * j - (L.even === isOdd(i) ? 2 : 0);
      pts = [[x + 2, y], [x + 4, y + 1], [x + 4, y + 3], [x + 2, y + 4], [x, y + 3], [x, y + 1]];
    }
    return pts.map(([px, py]) => [px * sx, py * sy]);
  }

  /** point_to_offset (point_to_cube, cube_round, cube_to_offset): the cell holding (x, y). */
  function cellAt(L, x, y) {
    x /= L.size; y /= L.size;
    const shift = L.even ? 1 : 0;
    let q, r;
    if (L.columns) {
      q = 2 / SQRT3 * x - 2 / 3;
      r = -0.5 * (q + shift) + y;
    } else {
      r = 2 / SQRT3 * y - 2 / 3;
      q = -0.5 * (r + shift) + x;
    }
    const s = -q - r;
    let iq = Math.round(q), ir = Math.round(r);
    const is = Math.round(s);
    const dq = Math.abs(iq - q), dr = Math.abs(ir - r), ds = Math.abs(is - s);
    if (dq > dr && dq > ds) iq = -ir - is;
    else if (dr > ds) ir = -iq - is;
    const sign = L.even ? 1 : -1;
    if (L.columns) return [ir + ((iq + sign * (iq & 1)) >> 1), iq];
    return [ir, iq + ((ir + sign * (ir & 1)) >> 1)];
  }

  // -- token shapes (BaseToken#getHexagonalShape, row layout; columns transpose) ------------

  /** _ellipse_or_trapezoid: cells for even and odd first rows, and the outline's centroid. */
  function ellipseOrTrapezoid(width, height, shape) {
    if (!Number.isInteger(width) || !Number.isInteger(height)) return null;
    const w = width, h = height;
    let top, bottom;
    if (shape === ELLIPSE_1 || shape === ELLIPSE_2) {
      if (h >= 2 * w) return null;
      top = shape === ELLIPSE_1 ? h >> 1 : (h - 1) >> 1;
      bottom = shape === ELLIPSE_1 ? (h - 1) >> 1 : h >> 1;
    } else {
      if (h > w) return null;
      top = shape === TRAPEZOID_1 ? h - 1 : 0;
      bottom = shape === TRAPEZOID_1 ? 0 : h - 1;
    }
    const even = [], odd = [];
    const rowCells = (row, k) => {
      for (let j = 0; j < w - k; j++) {
        even.push([row, j + (((bottom & 1) + k + 1) >> 1)]);
        odd.push([row, j + (((bottom & 1) + k) >> 1)]);
      }
    };
    for (let k = bottom; k > 0; k--) rowCells(bottom - k, k);
    for (let k = 0; k <= top; k++) rowCells(bottom + k, k);
    // The outline, walked as Foundry walks it, only for its centroid (the token's centre).
    const pts = [];
    let x = 0.5 * bottom, y = 0.25;
    const put = () => pts.push([x, y]);
    for (let n = 0; n < w - bottom; n++) { put(); x += 0.5; y -= 0.25; put(); x += 0.5; y += 0.25; }
    put();
    for (let n = 0; n < bottom; n++) { y += 0.5; put(); x += 0.5; y += 0.25; put(); }
    y += 0.5;
    for (let n = 0; n < top; n++) { put(); x -= 0.5; y += 0.25; put(); y += 0.5; }
    for (let n = 0; n < w - top; n++) { put(); x -= 0.5; y += 0.25; put(); x -= 0.5; y -= 0.25; }
    put();
    for (let n = 0; n < top; n++) { y -= 0.5; put(); x -= 0.5; y -= 0.25; put(); }
    y -= 0.5;
    for (let n = 0; n < bottom; n++) { put(); x += 0.5; y -= 0.25; put(); y -= 0.5; }
    return { even, odd, anchor: bottom % 2 ? [0, 0.5] : [0.5, 0.5], center: centroid(pts) };
  }

  /** Shapely's Polygon.centroid (the shoelace formula). */
  function centroid(pts) {
    let a = 0, cx = 0, cy = 0;
    for (let k = 0; k < pts.length; k++) {
      const [x0, y0] = pts[k], [x1, y1] = pts[(k + 1) % pts.length];
      const cross = x0 * y1 - x1 * y0;
      a += cross; cx += (x0 + x1) * cross; cy += (y0 + y1) * cross;
    }
    return [cx / (3 * a), cy / (3 * a)];
  }

  /** _rectangle. */
  function rectangle(width, height, shape) {
    if (width < 1 || !Number.isInteger(height)) return null;
    if (width === 1 && height > 1) return null;
    if (!Number.isInteger(width) && height === 1) return null;
    const evenShape = shape === RECTANGLE_1 || height === 1;
    const even = [], odd = [];
    for (let i = 0; i < height; i++) {
      const j0 = evenShape ? 0 : (i + 1) & 1;
      const j1 = Math.trunc(width + (i & 1) * 0.5) - (evenShape ? i & 1 : 0);
      for (let j = j0; j < j1; j++) { even.push([i, j + (i & 1)]); odd.push([i, j]); }
    }
    const center = [width / 2, (0.75 * Math.floor(height) + 0.5 * (height % 1) + 0.25) / 2];
    return { even, odd, anchor: evenShape ? [0.5, 0.5] : [0, 0.5], center };
  }

  /** _row_shape. */
  function rowShape(width, height, shape) {
    if (!Number.isInteger(width * 2) || !Number.isInteger(height * 2)) return null;
    if (width === 0.5 && height === 0.5) {
      return { even: [[0, 0]], odd: [[0, 0]], anchor: [0.25, 0.25], center: [0.25, 0.25] };
    }
    if (width === 1 && height === 1) {
      return { even: [[0, 0]], odd: [[0, 0]], anchor: [0.5, 0.5], center: [0.5, 0.5] };
    }
    if (shape <= 3) return ellipseOrTrapezoid(width, height, shape);
    if (shape <= RECTANGLE_2) return rectangle(width, height, shape);
    return null;
  }

  /** _hex_shape: column layouts transpose the row shape. */
  function hexShape(width, height, shape, columns) {
    if (!columns) return rowShape(width, height, shape);
    const row = rowShape(height, width, shape);
    if (!row) return null;
    const flip = (cells) => cells.map(([i, j]) => [j, i]);
    return { even: flip(row.even), odd: flip(row.odd), anchor: [row.anchor[1], row.anchor[0]],
             center: row.center && [row.center[1], row.center[0]] };
  }

  /** token_offsets: with Foundry's fallback (a rectangle shape, anchor a quarter hex off). */
  function tokenOffsets(width, height, shape, columns) {
    const data = hexShape(width, height, shape, columns);
    if (data) return data;
    let w = width, h = height;
    if (columns) {
      h += 0.5; w = Math.floor(w + 0.5);
      if (w === 1) h = Math.floor(h); else if (h === 1) h += 0.5;
    } else {
      w += 0.5; h = Math.floor(h + 0.5);
      if (h === 1) w = Math.floor(w); else if (w === 1) w += 0.5;
    }
    const fb = hexShape(w, h, RECTANGLE_1, columns);
    return { even: fb.even, odd: fb.odd, anchor: [fb.anchor[0] - 0.25, fb.anchor[1] - 0.25],
             center: null };
  }

  const half = (v) => Math.floor(v * 2 + 0.5) / 2; // _half

  /** token_cells: the cells a token at (x, y) (its top-left) occupies. */
  function tokenCells(L, x, y, width, height, shape) {
    const data = tokenOffsets(half(width), half(height), shape, L.columns);
    const px = Math.floor(x + 0.5) + L.sizeX * data.anchor[0];
    const py = Math.floor(y + 0.5) + L.sizeY * data.anchor[1];
    const [i0, j0] = cellAt(L, px, py);
    const first = L.columns ? j0 : i0;
    const isEven = ((first & 1) === 0) === L.even;
    return (isEven ? data.even : data.odd).map(([di, dj]) => [i0 + di, j0 + dj]);
  }

  /** token_size: the token's bounding rectangle [w, h] in pixels. */
  function tokenSize(L, width, height) {
    if (L.columns) width = 0.75 * Math.floor(width) + 0.5 * (width % 1) + 0.25;
    else height = 0.75 * Math.floor(height) + 0.5 * (height % 1) + 0.25;
    return [width * L.sizeX, height * L.sizeY];
  }

  /** token_centre: Foundry's token centre (the shape's centre, or the rectangle's). */
  function tokenCentre(L, x, y, width, height, shape) {
    const data = hexShape(width, height, shape, L.columns);
    if (data && data.center) return [x + data.center[0] * L.sizeX, y + data.center[1] * L.sizeY];
    const [w, h] = tokenSize(L, width, height);
    return [x + w / 2, y + h / 2];
  }

  /** _footprint: a token's cells and centre; under a quarter hex it is a point stand-in, the
   *  one cell holding its centre. */
  function footprint(L, x, y, width, height, shape) {
    if (half(width) === 0 || half(height) === 0) {
      const c = [x + width * L.sizeX / 2, y + height * L.sizeY / 2];
      return { cells: [cellAt(L, c[0], c[1])], centre: c };
    }
    return { cells: tokenCells(L, x, y, width, height, shape),
             centre: tokenCentre(L, x, y, width, height, shape) };
  }

  return Object.freeze({ layout, centre, vertices, cellAt, tokenCells, tokenSize, tokenCentre,
                         footprint });
})();
