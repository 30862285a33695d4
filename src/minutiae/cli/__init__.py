"""Thin command-line layer: parses options, calls the library, prints. No logic lives here."""
