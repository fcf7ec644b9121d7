"""Latest wins: a traffic class where only the newest report of each (origin site, key) matters (positions).

``table`` holds the entries, the per-neighbour dirty sets and the bounds, and decodes the LATEST frame;
``layer`` writes LATEST frames on the neighbours' connections and hands entries up. Docs: docs/rcm.md,
"Latest wins (positions)"."""
