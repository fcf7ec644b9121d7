"""Latest wins: a traffic class where only the newest report of each (origin site, key) matters (positions).

``table`` holds the entries and the per-neighbour dirty sets (the bounds and the LATEST frame:
``rcm.wire.latest``);
``layer`` writes LATEST frames on the neighbours' connections and hands entries up. Docs: docs/rcm.md,
"Latest wins (positions)"."""
