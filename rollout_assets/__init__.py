"""rollout-assets: improvement-loop rounds as rollout ledgers, their training data and releases."""

import os

# pyarrow's buffers come from the system allocator, not its default (mimalloc), which keeps
# about 40 MiB more for the rest of the process once the training files are written
# (docs/performance.md, "Memory"). Read by pyarrow when it is first imported; a value already
# set is left as it is.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
