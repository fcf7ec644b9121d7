"""The channel layer: each peer's robust point-to-point channel (``p2p``, what acknowledged frames carried:
``released``) and its connection (``connections``, ``sessions``: the handshake), written on its path
(``layer``), paced on slow links (``lanes`` for the primitives, ``pacing`` for the decisions). ``peer``
holds what is kept per connection and per peer."""
