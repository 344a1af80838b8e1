"""CLI command module 'fairshare' (being written; registers its commands on walras.cli.app.app)."""
