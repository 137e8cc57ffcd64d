"""One exception type whose message is the whole story: what failed and the fix.

The CLI prints ``DevClusterError`` as a single line and exits non-zero, so every
raise site states the fix in the message rather than leaving it to a traceback.
"""


class DevClusterError(RuntimeError):
    """A fault of the local cluster, worded for the person who has to fix it."""
