"""The TAK front end of a chat server: ATAK, WinTAK, iTAK and pytak clients chat and report positions through RCM.

Theory of operation
-------------------
``[sites.A] tak = "host:port"`` makes a site's chat server a TAK streaming
endpoint (docs/tak.md). Split by concern, I/O at the edge only:

* cot.py: CoT events decoded once (XML with defusedxml, TAK protocol v1 with
  takproto) into small bounded frozen types, and encoded both ways;
* stream.py: the TCP byte stream cut into events, XML or protobuf, sans-IO;
* rooms.py: GeoChat chatrooms to rooms (``[chat.tak_rooms]``) and back;
* marks.py: the marks a GeoChat's text carries (precedence, late, label), both ways;
* session.py: one client translated to and from chat protocol frames, sans-IO;
* server.py: the asyncio listener; each connection is a chat ``Session`` whose
  requests take the WebSocket handlers and limits;
* certs.py: a TAK user's client certificate from the mission CA.
"""
