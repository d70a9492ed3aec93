"""The node's HTTP surface (aiohttp): a REST API in Confluent REST Proxy v3
shape, Prometheus ``/metrics`` with Kafka's names, ``/healthz`` and the
``/ui`` dashboard. A shell (STYLE.md section 1): it reads the node's state
and talks the Kafka protocol; it makes no protocol decisions.

Modules: ``app`` (routes, errors, server), ``rest`` (``/v3``), ``backend``
(`ClusterBackend` and the node's implementation), ``metrics``, ``openapi``,
``node_http`` (wiring into `data_plane.node`), ``testing`` (an in-memory
backend), ``static/`` (the dashboard).
"""
