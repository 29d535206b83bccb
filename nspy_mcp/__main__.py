import sys

from nspy_mcp.cli import main

sys.exit(main())
