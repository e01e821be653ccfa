import sys

from shuangkou.cli import main

sys.exit(main())
