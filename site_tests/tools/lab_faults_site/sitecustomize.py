"""Python imports this at the start of every interpreter that has this folder on PYTHONPATH.

site_tests/tools/lab_faults.py puts the folder there, and the fault in LAB_FAULT, for a lab run and
every process it starts; see that module for why.
"""

import os

if os.environ.get("LAB_FAULT"):
    import lab_faults  # the folder above this one is on PYTHONPATH too

    lab_faults.arm(os.environ["LAB_FAULT"])
