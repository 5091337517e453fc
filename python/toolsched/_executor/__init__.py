"""The executor's rooms, in the order a call meets them (private); `Executor` itself lives in `executor.py`."""
