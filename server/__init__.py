"""The Covercast server: wire protocol, scene state, sessions, and the network edge.

Rule of this package: data flows one way, bytes -> validated messages (messages.py) ->
immutable scenes (scene.py) -> ruleset annotations -> deltas (session.py) -> bytes; only
app.py imports asyncio or websockets, and nothing here is imported by `rulesets` or
`geometry`.
"""
