"""CLI command module 'agent_cmd' (being written; registers its commands on walras.cli.app.app)."""
