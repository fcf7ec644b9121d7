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

The chat half, the same way:

* ``chat_requests``: every client frame of the chat protocol, every payload a
  peer chat server sends through RCM, and the RCM events a peer can cause at
  the chat server (``Missing`` ranges, deliveries' order keys and sequence
  numbers, statuses), each field at and around its bounds or of the wrong type;
* ``chat_probe`` (with ``chat_site``, what surrounds the site): a real chat
  server, sans sockets, on a virtual clock, taking those inputs from a
  signed-in user and a peer site while the honest user alice is served; per
  input, nothing escapes, the Python calls, SQLite pages and journal bytes are
  linear in its size, a search stays within its budget, nothing hangs, memory
  stays bounded.

The chat server's IRC and TAK front ends are kinds of the chat probe too:

* ``irc_lines`` and ``tak_events``: a hostile client's writes, every IRC command
  and the line's limits and bytes; CoT XML, attacks on the XML parser, TAK
  protocol v1 and the stream framing;
* ``chat_fronts``: the front ends' own reader and request worker, fed those
  writes without sockets, while the honest user is on both front ends too.

``bench/fuzz_bounds.py`` runs a million inputs per kind of both halves; the
tests run a few hundred per kind on every ``make test``.
"""
