"""The routing layer (docs/relay.md): link-state among sites (``linkstate``), routes and each channel's path
(``router``), ROUTED frames and relay-side stream state (``relay``), and relaying others' frames
(``forwarding``)."""
