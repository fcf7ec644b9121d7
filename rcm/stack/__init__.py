"""The site's protocol stack, sans-IO: ``SiteStack`` composes the layers (``site``), which meet in its
junction (``junction``), the inbound path hands decoded frames to them (``inbound``), and the ordering layer
numbers sends and runs the global order (``multicast``). Docs: docs/rcm.md, "Layers"."""
from rcm.stack.site import SiteStack

__all__ = ["SiteStack"]
