"""CLI command module 'solve' (being written; registers its commands on walras.cli.app.app)."""
