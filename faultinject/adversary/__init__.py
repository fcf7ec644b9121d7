"""A hostile peer and a hostile user, and a probe that measures what each of their inputs costs.

The security reviews kept finding one shape of bug: a number from a peer or a
user (a range, a version, a clock, a count, a prefix) drives work or memory
that nothing bounds. This package makes the class checkable rather than the
instances:

* ``rcm_frames``: every inter-site frame kind (and every kind a ROUTED frame
  carries), with each number drawn at and around the bounds that matter
  (0, 2^31, 2^53, 2^63, 2^64 - 1, negative, NaN, the honest ceiling) and
  each field now and then of the wrong type, stream checks mostly right so
  the frames get past the first test;
* ``probe``: a site (a real ``SiteStack``, sans-IO, on a virtual clock) that
  takes those frames from peer B while peer C is honest, and checks for each
  frame that no exception escapes, that the work done (Python calls, counted
  with a profile hook) stays within a budget linear in the frame's size, that
  no frame runs for seconds (a watchdog), that memory stays bounded, and that
  C is still served (its messages delivered, its link up).

``bench/fuzz_bounds.py`` runs a million frames per kind; the tests run a few
hundred per kind on every ``make test``.
"""
