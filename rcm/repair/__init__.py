"""The repair layer (docs/rcm.md, "Repair"): what a site keeps of its deliveries (``retention``), the
anti-entropy exchange that fetches what it missed (``antientropy``), and the service the stack talks to
(``service``)."""
