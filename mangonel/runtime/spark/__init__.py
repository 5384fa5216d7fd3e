"""mangonel inside Spark Structured Streaming (the one part of mangonel that imports pyspark).

Every Python worker that runs a mangonel stage imports this package (the stage callbacks live
in its modules), so this is where the one warning those workers would print is handled:
pyspark's applyInPandasWithState worker pads each output batch with an empty or all-NA frame
and concatenates it with the callback's frames (pyspark/worker.py), which pandas 2.x warns
about as a FutureWarning on every micro-batch. pyspark then casts the frame to the declared
Arrow output types and drops the padding rows, so the dtype change pandas announces cannot
alter a result (and pyproject pins pandas < 3). The filter matches only that message raised
from pyspark's worker module; the same warning from any other code still shows.
"""

import warnings

warnings.filterwarnings(
    "ignore",
    message="The behavior of DataFrame concatenation with empty or all-NA entries is deprecated",
    category=FutureWarning,
    module=r"pyspark\.worker",
)
