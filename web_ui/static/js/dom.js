// Building DOM without HTML: every string becomes a text node, never markup.
// (Nothing in the client hands a string to the HTML parser; tests/web_ui checks the sources.)

/**
 * h("li", {class: "msg", "data-id": id, onclick: fn}, child, "text", ...)
 * Attributes are set with setAttribute (values are never parsed as markup);
 * "on*" keys add event listeners; children may be nodes, strings, numbers, arrays, null.
 */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** The same for SVG elements (svg("circle", {cx, cy, r, class}), svg("text", {x, y}, "label"), ...). */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.append(c);
    else el.append(document.createTextNode(String(c)));
  }
}

/** Remove every child of `el`. */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}
