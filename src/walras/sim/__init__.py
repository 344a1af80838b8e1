"""Trace-driven simulator (later issue): will reuse walras.allocator unchanged."""
