"""The `covercast` command and an asyncio client for scripts, bots and tools.

Rule of this package: the client side speaks only the documented protocol (client.py never
imports the server); cli.py also starts the server, and is the one place that wires the two.
"""
