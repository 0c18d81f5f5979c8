"""The live dashboard: an aggregator per process reading the events streams
(``aggregator``), a WebSocket consumer for staff (``consumers``, ``routing``) and the admin
page with its HTTP fallback (``views``). docs/dashboard.md tells the whole story."""
