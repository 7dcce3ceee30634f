"""`python -m guestdata_cluster`: the same as `scripts/cluster` and `guestdata-cluster`."""

import sys

from guestdata_cluster.cli import main

sys.exit(main())
