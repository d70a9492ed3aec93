"""``python -m data_plane``: the `raftlog` CLI as a program (node processes start so)."""

import sys

from data_plane.launch import main

sys.exit(main())
