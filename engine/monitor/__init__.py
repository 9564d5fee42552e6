"""Watching a directory of stores: ``engine top`` (a terminal), ``engine dashboard``
(a web page), over :class:`~engine.monitor.track.Tracker`; Prometheus metrics are
:mod:`engine.metrics`."""
