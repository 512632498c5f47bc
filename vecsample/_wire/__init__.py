"""Formats both processes share, with no behaviour: the wire protocol, the handshake, shared
memory, spaces, info columns and the call log's format. Imports neither _parent nor _worker.
"""
