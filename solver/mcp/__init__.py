"""``shardplan mcp``: shardplan's commands as Model Context Protocol tools for an agent, on stdio.

``server.py`` wires the SDK's server, ``tools.py`` holds the tools (each returns what its CLI command
prints with ``--json``), ``schemas.py`` their inputs, ``resources.py`` the rule catalog and DAG
schema, ``safety.py`` the file root and time limits, ``transport.py`` stdin and stdout as JSON-RPC lines.
Only ``server.py`` and ``transport.py`` import the MCP SDK (the
optional ``mcp`` extra); this package's ``__init__`` imports nothing, so the CLI can read the
limits without it.
"""
