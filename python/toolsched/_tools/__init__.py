"""Tools and how a run finds them: the tool, its schema and context, the registry, tool search (private)."""
