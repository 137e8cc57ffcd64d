"""Framework plugins (what differs per kind) and cross-cutting pod plugins."""
