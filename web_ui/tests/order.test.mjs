// order.js: the browser's copy of the order-key comparison (the one home: ordering/keys.py; tests/web_ui/test_web_order_keys.py compares the two).

import assert from "node:assert/strict";
import { test } from "node:test";

import { compareEntries, compareOrder, insertIndex } from "../static/js/order.js";

test("order keys compare as the server compares them", () => {
  assert.equal(compareOrder([9, "A"], [10, "A"]), -1);           // numbers by value, not as text
  assert.equal(compareOrder([4, "B"], [4, "A"]), 1);             // then the origin
  assert.equal(compareOrder([4], [4, "A"]), -1);                 // a prefix first
  assert.equal(compareOrder([4, "A"], [4, "A"]), 0);
  assert.equal(compareOrder([1, 2], [1, "x"]), -1);              // numbers before strings
  assert.equal(compareOrder(["\u{1F600}"], ["\uFFFF"]), 1);      // strings by code point
  assert.equal(compareOrder(undefined, [1]), -1);                // a missing key first
});

test("entries: messages and notices by order key, pending ones after them in the order typed", () => {
  const m = (t, o) => ({ kind: "message", group: 0, sub: 0, seq: 0, id: `${o}:${t}`, order: [t, o] });
  const entries = [m(1, "A"), { kind: "notice", group: 0, sub: 1, seq: 1, order: [1, "A"] }, m(3, "A"),
                   { kind: "pending", group: 1, sub: 0, seq: 2, order: [] }];
  assert.equal(insertIndex(entries, m(2, "B")), 2);               // after the notice anchored to [1, A]
  assert.equal(insertIndex(entries, m(9, "B")), 3);               // before our pending message
  assert.equal(insertIndex(entries, { kind: "pending", group: 1, sub: 0, seq: 3, order: [] }), 4);
  assert.equal(compareEntries(m(3, "A"), m(3, "A")), 0);
});
