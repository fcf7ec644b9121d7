"""The chat server of a site: chat protocol v1 over WebSocket, on top of the site's RCM server.

Modules: ``server`` (the aiohttp application and the RCM link), ``protocol``
(frame validation, sans-IO), ``payload`` (what chat servers send each other
through RCM), ``store`` (SQLite: accounts, rooms, history), ``journal``
(Contract 3), ``accounts`` (scrypt, login rate limit), ``config`` (the
``[chat]`` table), ``client`` (async client library). See docs/chat-protocol.md.
"""
