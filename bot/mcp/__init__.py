"""``handoff mcp``: a Model Context Protocol server (the official ``mcp`` SDK) whose tools
hand work to people through a ``handoff api`` by URL and key, so an agent host's machine
never needs Redis. ``server`` builds it; the CLI runs it over stdio."""
