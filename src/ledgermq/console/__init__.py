"""The web console (``ledgermq console``): what RocketMQ Dashboard shows and does, served by
aiohttp with Jinja2 templates and a vendored uPlot for charts (no CDN at run time).

It reaches the cluster only through the public admin client (``ledgermq.admin``), the
producer of ``ledgermq.client`` (test messages) and, in controller mode, the controller's
client. Pages render on the server; the parts that change (cluster roles, lag) refresh
themselves from small HTML fragments, and charts from one JSON document.
"""

from ledgermq.console.app import ConsoleServer, build_app
from ledgermq.console.settings import ConsoleSettings, ConsoleSettingsError

__all__ = ["ConsoleServer", "ConsoleSettings", "ConsoleSettingsError", "build_app"]
