// The positions panel: a plot of the units (plot.js's geometry, drawn as SVG) and a table beside it, the report
// form's messages, and the top bar's Positions button.
//
// Theory of operation
// -------------------
// `render(s)` draws `state.positions` (positions.js) and nothing else; it is called
// when the slice, the sites or the user changed, and again when the plot's box
// changes size (the plot is laid out in the box's own pixels, so its text is never
// scaled). Every unit is a dot with its callsign, coloured by its site (eight
// colours, `site-c0`..`site-c7`, in the order of the site strip, then by name) and
// faded as its report ages toward expiry (the `opacity` attribute, from 1 down to
// FADED); the table lists unit, site, user, latitude, longitude and age, by unit.
// Dots and the table's unit buttons are in the Tab order and pick a unit (Enter or
// Space on a dot, a click on either): the picked one is ringed in the plot and
// marked in the table. The panel is redrawn every second (ages), so the element
// that had the focus is found again by its `data-focus` and focused, and the
// table's scroll position is kept. Strings reach the page as text nodes or
// attribute values (dom.js); there is no style attribute (the CSP allows none).

import { clear, h, svg } from "./dom.js";
import { layout, lonLabelsShown } from "./plot.js";
import { ageOf, lifeSpent, unitList } from "./positions.js";
import { siteOrder } from "./state.js";
import { fmtAge, plural } from "./words.js";

const $ = (id) => document.getElementById(id);
const SITE_COLOURS = 8;
const FADED = 0.3;                    // the opacity of a report about to expire
const DEFAULT_BOX = { width: 640, height: 400 };
const FIELDS = ["lat", "lon", "unit"];
const LABEL_CHAR = 6.5;               // px: about the width of a character of a grid label (11 px)
const CALLSIGN_CHAR = 7.5;            // px: about the width of a character of a callsign (12 px, bold)
const LABEL_HEIGHT = 16;              // px: a grid label closer than this to the top or bottom edge is left out

/** The colour class of every site: the strip's order (this site first), then the sites only positions named. */
export function siteColours(s) {
  const sites = siteOrder(s);
  const more = [...new Set([...s.positions.units.values()].map((p) => p.site))].filter((x) => !s.sites.has(x)).sort();
  return new Map([...sites, ...more].map((site, i) => [site, `site-c${i % SITE_COLOURS}`]));
}

const deg = (v) => v.toFixed(5);

function describe(p, now) {
  const age = ageOf(p, now);
  return `${p.unit} at site ${p.site}${p.user ? ` (${p.user})` : ""}: ${deg(p.lat)}, ${deg(p.lon)}` +
         `${typeof p.alt === "number" ? `, altitude ${Math.round(p.alt)} m` : ""}` +
         `${age === null ? "" : `, ${fmtAge(age)} old`}`;
}

export function createPositionsView(dispatch) {
  let last = null;
  const plotBox = $("positions-plot");
  if (typeof ResizeObserver === "function") {
    let size = "";
    new ResizeObserver(() => {
      const now = `${plotBox.clientWidth}x${plotBox.clientHeight}`;
      if (now !== size && last) { size = now; drawPlot(last); }
    }).observe(plotBox);
  }

  function render(s) {
    last = s;
    const ps = s.positions;
    const n = ps.units.size;
    const toggle = $("positions-toggle");
    toggle.setAttribute("aria-pressed", ps.shown ? "true" : "false");
    $("positions-toggle-count").textContent = n ? String(n) : "";
    toggle.title = ps.shown ? "Hide the units' positions" : `Show the units' positions (${plural(n, "unit")})`;
    document.body.classList.toggle("positions-open", ps.shown);
    $("positions-panel").hidden = !ps.shown;
    renderForm(ps);
    if (!ps.shown) return;
    const focused = document.activeElement && $("positions-panel").contains(document.activeElement)
      ? document.activeElement.getAttribute("data-focus") : null;
    $("positions-count").textContent = `(${n})`;
    $("positions-status").textContent = status(ps);
    drawPlot(s);
    drawTable(s);
    if (focused) {
      const again = [...$("positions-panel").querySelectorAll("[data-focus]")].find((el) => el.getAttribute("data-focus") === focused);
      if (again) again.focus({ preventScroll: true });
    }
  }

  function status(ps) {
    const parts = [];
    if (ps.unavailable) parts.push(`Positions are not available from this server: ${ps.unavailable}`);
    else if (!ps.units.size) parts.push("No positions yet: units appear when they report (TAK clients, the terminal, this form).");
    if (ps.rejected) parts.push(`${plural(ps.rejected, "report")} not shown: malformed.`);
    return parts.join(" ");
  }

  function drawPlot(s) {
    const ps = s.positions;
    if (!ps.shown) return;
    const width = plotBox.clientWidth || DEFAULT_BOX.width;
    const height = plotBox.clientHeight || DEFAULT_BOX.height;
    const units = unitList(s);
    const colours = siteColours(s);
    const g = layout(units, { width, height, pad: 28 });
    const lonLabelled = lonLabelsShown(g.lons, { width, charWidth: LABEL_CHAR });
    const at = new Map(g.points.map((p) => [p.key, p]));
    const pick = (key) => dispatch({ type: "position-select", key });
    const plot = svg("svg", { class: "plot", viewBox: `0 0 ${width} ${height}`, width, height, role: "group",
                              "aria-label": units.length ? `Plot of ${plural(units.length, "unit")}, north up` : "Plot: no units" },
      svg("rect", { class: "plot-bg", x: 0, y: 0, width, height }),
      g.lats.map((l) => svg("g", { class: "grid" },
        svg("line", { x1: 0, y1: l.y, x2: width, y2: l.y }),
        l.y > LABEL_HEIGHT && l.y < height - LABEL_HEIGHT ? svg("text", { x: 4, y: l.y - 3, class: "grid-label" }, l.label) : null)),
      g.lons.map((l, i) => svg("g", { class: "grid" },
        svg("line", { x1: l.x, y1: 0, x2: l.x, y2: height }),
        lonLabelled[i] ? svg("text", { x: l.x + 3, y: height - 5, class: "grid-label" }, l.label) : null)),
      g.scale ? svg("g", { class: "scale", "aria-hidden": "true" },
        svg("line", { x1: width - 14 - g.scale.px, y1: 16, x2: width - 14, y2: 16 }),
        svg("line", { x1: width - 14 - g.scale.px, y1: 11, x2: width - 14 - g.scale.px, y2: 21 }),
        svg("line", { x1: width - 14, y1: 11, x2: width - 14, y2: 21 }),
        svg("text", { x: width - 14 - g.scale.px / 2, y: 34, "text-anchor": "middle", class: "scale-label" }, g.scale.label)) : null,
      units.map((p) => {
        const pt = at.get(p.key);
        const picked = ps.selected === p.key;
        const right = pt.x + 10 + p.unit.length * CALLSIGN_CHAR < width || pt.x < width / 2;   // the side with room for it
        return svg("g", {
          class: `pos-unit ${colours.get(p.site) || "site-c0"}${picked ? " picked" : ""}`, tabindex: 0, role: "button",
          "data-focus": `dot\n${p.key}`, "data-unit": p.unit, "data-site": p.site, "aria-pressed": picked ? "true" : "false",
          "aria-label": describe(p, ps.now), opacity: (1 - (1 - FADED) * lifeSpent(p, ps.now)).toFixed(2),
          onclick: () => pick(p.key),
          onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); pick(p.key); } },
        }, svg("title", {}, describe(p, ps.now)),
           picked ? svg("circle", { class: "pick-ring", cx: pt.x, cy: pt.y, r: 11 }) : null,
           svg("circle", { class: "dot", cx: pt.x, cy: pt.y, r: 6 }),
           svg("text", { class: "callsign", x: right ? pt.x + 10 : pt.x - 10, y: pt.y + 4, "text-anchor": right ? "start" : "end" },
             p.unit));
      }));
    clear(plotBox);
    plotBox.append(plot);
  }

  function drawTable(s) {
    const ps = s.positions;
    const body = $("positions-rows");
    const box = $("positions-table-box");
    const top = box.scrollTop;
    const colours = siteColours(s);
    clear(body);
    for (const p of unitList(s)) {
      const picked = ps.selected === p.key;
      const age = ageOf(p, ps.now);
      body.append(h("tr", { "data-unit": p.unit, "data-site": p.site, class: picked ? "picked" : null },
        h("th", { scope: "row" },
          h("button", { type: "button", class: "unit-button", "data-focus": `row\n${p.key}`, "aria-pressed": picked ? "true" : "false",
                        title: `${p.unit}: pick it in the plot`, onclick: () => dispatch({ type: "position-select", key: p.key }) },
            h("span", { class: `swatch ${colours.get(p.site) || "site-c0"}`, "aria-hidden": "true" }),
            h("span", { class: "unit-name" }, p.unit))),
        h("td", { class: "pos-site" }, p.site),
        h("td", { class: "pos-user", title: p.user || null }, p.user || ""),
        h("td", { class: "num" }, deg(p.lat)),
        h("td", { class: "num" }, deg(p.lon)),
        h("td", { class: "num pos-age", "data-age": age === null ? "" : Math.floor(age) }, fmtAge(age))));
    }
    box.scrollTop = top;
  }

  function renderForm(ps) {
    const errors = FIELDS.map((f) => ps.errors[f]).filter(Boolean);
    $("position-error").textContent = errors.join(" ");
    for (const f of FIELDS) {
      const input = $(`position-${f}`);
      if (ps.errors[f]) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
    const note = $("position-note");
    note.textContent = ps.note ? ps.note.text : "";
    note.dataset.kind = ps.note ? ps.note.kind : "";
    const locate = $("position-locate");
    locate.disabled = ps.locating;
    locate.textContent = ps.locating ? "Locating…" : "Use my location";
  }

  return { render };
}
