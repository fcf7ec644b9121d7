// The positions plot's geometry: units' latitudes and longitudes placed in a box of pixels, with a grid and a scale.
//
// Theory of operation
// -------------------
// No map tiles (a cut-off site cannot fetch them): the plot is a plain
// equirectangular projection around the units' middle latitude, x = lon·cos(lat₀),
// y = lat, so that near the units a kilometre east is as long as a kilometre north
// (the aspect is kept: one scale for both axes, the box is filled along the tighter
// one and centred along the other). The extent is the units' bounding box with a
// margin, at least MIN_SPAN degrees (one unit alone is shown with a few hundred
// metres around it). Units on both sides of the antimeridian are plotted the short
// way round (longitudes shifted by 360°), and labelled in -180..180.
//
// Grid lines fall on round values (1, 2 or 5 times a power of ten) about
// GRID_LINES apart across the box; the scale bar is a round distance (metres or
// kilometres) about a quarter of the box wide, at 111.32 km per degree of latitude.
// `layout` is pure (numbers in, numbers and label strings out); view_positions.js
// draws its result.

export const MIN_SPAN = 0.005;        // degrees: the smallest extent shown (about 550 m of latitude)
const MARGIN = 0.12;                  // of the units' extent, on each side
const GRID_LINES = 5;
const KM_PER_DEGREE = 111.32;

/** A round step (1, 2 or 5 times a power of ten) near `raw`. */
export function niceStep(raw) {
  if (!(raw > 0) || !Number.isFinite(raw)) return 1;
  const p = 10 ** Math.floor(Math.log10(raw));
  const f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

const decimalsFor = (step) => Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
const wrapLon = (lon) => ((((lon + 180) % 360) + 360) % 360) - 180;

/** "51.50° N", "0.125° W", "0° E" (`decimals` places). */
export function degreeLabel(value, kind, decimals) {
  const v = kind === "lon" ? wrapLon(value) : value;
  const text = Math.abs(v).toFixed(decimals);
  const zero = Number(text) === 0;
  const hemi = kind === "lat" ? (zero || v > 0 ? "N" : "S") : (zero || v > 0 ? "E" : "W");
  return `${text}° ${hemi}`;
}

/** "500 m", "2 km". */
export function distanceLabel(km) {
  return km < 1 ? `${Math.round(km * 1000)} m` : `${Number(km.toPrecision(6))} km`;
}

/**
 * Which longitude lines get their label along the bottom edge, left to right: a label (drawn from x + 3,
 * `label.length * charWidth` wide) is shown when it ends inside the box and starts `gap` pixels past the end of
 * the last one shown. Longitude labels are wider than the grid's spacing at high zoom ("0.206° W" every 40 px:
 * they ran into one another), latitude labels stack and never do.
 */
export function lonLabelsShown(lons, { width, charWidth, gap = 8 }) {
  let end = -Infinity;
  return lons.map((l) => {
    const from = l.x + 3;
    const to = from + l.label.length * charWidth;
    const shown = from >= end + gap && to < width;
    if (shown) end = to;
    return shown;
  });
}

/**
 * Place `units` ([{key, lat, lon}]) in a `width` x `height` box (pixels) with `pad` pixels kept clear at the edges.
 * Returns {points: [{key, x, y}], lats: [{value, y, label}], lons: [{value, x, label}], scale: {km, px, label}}.
 */
export function layout(units, { width, height, pad = 24 }) {
  if (!units.length) return { points: [], lats: [], lons: [], scale: null };
  const crosses = Math.max(...units.map((u) => u.lon)) - Math.min(...units.map((u) => u.lon)) > 180;
  const lonOf = (u) => (crosses && u.lon < 0 ? u.lon + 360 : u.lon);
  const lats = units.map((u) => u.lat);
  const lons = units.map(lonOf);
  let [lat0, lat1] = [Math.min(...lats), Math.max(...lats)];
  let [lon0, lon1] = [Math.min(...lons), Math.max(...lons)];
  const midLat = (lat0 + lat1) / 2;
  const k = Math.max(0.05, Math.cos((midLat * Math.PI) / 180));      // east-west shrink at that latitude
  const spanLat = Math.max(MIN_SPAN, (lat1 - lat0) * (1 + 2 * MARGIN));
  const spanLon = Math.max(MIN_SPAN / k, (lon1 - lon0) * (1 + 2 * MARGIN));
  const cLat = (lat0 + lat1) / 2;
  const cLon = (lon0 + lon1) / 2;
  const w = Math.max(1, width - 2 * pad);
  const h = Math.max(1, height - 2 * pad);
  const scale = Math.min(w / (spanLon * k), h / spanLat);            // pixels per degree of latitude
  const x = (lon) => width / 2 + (lon - cLon) * k * scale;
  const y = (lat) => height / 2 - (lat - cLat) * scale;
  // What the whole box shows (beyond the units' extent along the looser axis).
  [lat0, lat1] = [cLat - height / 2 / scale, cLat + height / 2 / scale];
  [lon0, lon1] = [cLon - width / 2 / (k * scale), cLon + width / 2 / (k * scale)];
  const step = niceStep(Math.min(lat1 - lat0, (lon1 - lon0) * k) / GRID_LINES);
  const lonStep = niceStep(step / k);
  const lines = (from, to, by) => {
    const out = [];
    for (let i = Math.ceil(from / by); i * by <= to && out.length < 100; i++) out.push(i * by);
    return out;
  };
  const km = niceStep((width / 4 / scale) * KM_PER_DEGREE);
  return {
    points: units.map((u) => ({ key: u.key, x: x(lonOf(u)), y: y(u.lat) })),
    lats: lines(Math.max(-90, lat0), Math.min(90, lat1), step)
      .map((v) => ({ value: v, y: y(v), label: degreeLabel(v, "lat", decimalsFor(step)) })),
    lons: lines(lon0, lon1, lonStep).map((v) => ({ value: v, x: x(v), label: degreeLabel(v, "lon", decimalsFor(lonStep)) })),
    scale: { km, px: (km / KM_PER_DEGREE) * scale, label: distanceLabel(km) },
  };
}
