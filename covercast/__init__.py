"""The `covercast` command and an asyncio client for scripts, bots and tools.

Rule of this package: the client side speaks only the documented protocol. client.py,
recording.py and replay.py import nothing of the server but `server.messages`, the one
definition of the wire schema (its Structs decode replies; the server never imports this
package); cli.py also starts the server, and is the one place that wires the two.
"""
