"""CLI command module 'inspect_cmd' (being written; registers its commands on walras.cli.app.app)."""
