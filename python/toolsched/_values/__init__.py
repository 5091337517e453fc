"""Values every room shares: calls, results, decisions, events, outcomes, images, and their codecs (private)."""
