"""Fault injection: grudges as data, network backends, process/clock/disk faults.

- `grudges`: partition shapes as data (Jepsen's grudges).
- `proxy`: per-link asyncio TCP proxies (loopback, no privileges).
- `netns`: network namespaces + nftables (root).
- `process`: kill/pause/resume, libfaketime, tmpfs/ballast disk-full.
- `core`: nemeses that apply generator ops, and their composition.
"""
