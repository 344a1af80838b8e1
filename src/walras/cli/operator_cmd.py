"""CLI command module 'operator_cmd' (being written; registers its commands on walras.cli.app.app)."""
