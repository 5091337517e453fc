"""Where tool bodies run: backends, worker tasks, threads, worker processes, Ray (private)."""
