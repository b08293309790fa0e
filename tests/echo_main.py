"""A module's main for the worker pool's module runs (``runner.run_module``): says how it started, on stdout
(its parent, whether TensorFlow was imported, its arguments and folder) and stderr, then exits with its first
argument's status, or sleeps (``sleep``)."""
import json
import os
import sys
import time

print(json.dumps({"ppid": os.getppid(), "tensorflow": "tensorflow" in sys.modules, "argv": sys.argv[1:], "cwd": os.getcwd(),
                  "pid": os.getpid()}), flush=True)
print("said on stderr", file=sys.stderr)
if sys.argv[1:] == ["sleep"]:
    time.sleep(60)
sys.exit(int(sys.argv[1]))
