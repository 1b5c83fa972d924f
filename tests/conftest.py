"""Session set-up: partitioned datasets the tests make go to a temporary cache folder, not the user's."""

import os
import tempfile

os.environ.setdefault("SPGNN_CACHE_DIR", tempfile.mkdtemp(prefix="spgnn-test-cache-"))
