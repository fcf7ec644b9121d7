"""The vocabulary every package of the suite shares, each concept in one home (DESIGN.md, package map).

* ``contracts.precedence``: message precedence, its one spelling per level and one integer code;
* ``contracts.status``: a site's connection status as RCM reports it, and ``unknown`` before it has;
* ``contracts.labels``: security labels and clearances (levels, caveats, dominance, both spellings);
* ``contracts.mission``: the mission file's reader (Contract 1), and ``contracts.mission_writer`` its one writer;

(the journal record joins them as it moves here). Nothing of ours is imported
here: every other package may import it.
"""
