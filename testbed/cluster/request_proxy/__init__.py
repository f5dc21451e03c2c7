"""The request proxy: a Kafka-aware TCP proxy in front of one broker that holds, drops, delays or
duplicates client requests by API key and client id -- the request-level faults.

* ``rules`` -- request frame headers, the rules and the control lines (no I/O);
* ``proxy`` -- the asyncio proxy and its control channel (``python -m testbed.cluster.request_proxy``);
* ``control`` -- starting a proxy process and telling it what to do, from the host.

Standard library only, and this ``__init__`` imports nothing, so the directory is copied into the
node image as it is and the proxy runs next to a broker with nothing else installed.
"""
